"""Verify that an SNS envelope really comes from Amazon SNS.

Follows AWS "Verifying the signatures of Amazon SNS messages": rebuild the string to sign,
fetch the signing certificate (only from an SNS host, or an operator-trusted prefix), and
check the RSA PKCS#1 v1.5 signature (SHA1 for SignatureVersion 1, SHA256 for 2).

The certificate URL is exactly SNS's form, `https://sns.<region>.amazonaws.com[.cn]/
SimpleNotificationService-<hex>.pem`: no query, fragment, port, userinfo or case variant, so one
certificate has one URL (one cache entry, one fetch) and a message cannot make the daemon fetch
anything else. What the fetch says is judged like the message: a 4xx (but 408/429), a redirect
or a host that does not exist (NXDOMAIN) means the URL names no SNS certificate, so the message
is forged (SignatureError); a 5xx, 408/429, timeout or network error is transient.
"""

from __future__ import annotations

import asyncio
import binascii
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from cfn_provider.trust.urls import matches_prefix

from ..errors import InputError, TransportError

_SNS_CERT_URL = re.compile(
    r"https://sns\.(?P<region>[a-z]{2}(?:-gov)?-[a-z]+-[0-9]{1,2})\.amazonaws\.com(?P<cn>\.cn)?"
    r"/SimpleNotificationService-[0-9a-f]{16,128}\.pem"
)
_TRANSIENT_STATUS = {408, 429}
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
_MAX_CERT_BYTES = 64 * 1024
_HASHES = {"1": hashes.SHA1(), "2": hashes.SHA256()}  # stateless: one instance each serves every verify
_KEYS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}
_KEYS["UnsubscribeConfirmation"] = _KEYS["SubscriptionConfirmation"]
_WITHOUT_SUBJECT = {keys: tuple(k for k in keys if k != "Subject") for keys in _KEYS.values()}


class SignatureError(InputError):
    """The message is not verifiably from Amazon SNS (forged, tampered, or an untrusted certificate URL). Permanent."""


class CertificateUnavailable(TransportError):
    """The signing certificate could not be fetched right now (network error, timeout, non-200).
    Transient: the caller retries later."""


def string_to_sign(envelope: Mapping[str, Any]) -> bytes:
    """The canonical "Key\\nValue\\n" string SNS signed, per message Type."""
    kind = envelope.get("Type")
    keys = _KEYS.get(kind) if isinstance(kind, str) else None
    if keys is None:
        raise SignatureError("unknown or missing message Type")
    if "Subject" not in envelope:  # the one optional key: signed when present
        keys = _WITHOUT_SUBJECT[keys]
    parts = []
    for key in keys:
        value = envelope.get(key)
        if not isinstance(value, str):
            raise SignatureError(f"{key} is missing or not a string")
        parts.append(f"{key}\n{value}\n")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: SNS never signs such text
        raise SignatureError("a signed field is not valid UTF-8") from None


def _is_sns_cert_url(url: str) -> bool:
    """True for exactly https://sns.<region>.amazonaws.com[.cn]/SimpleNotificationService-<hex>.pem
    (lower case, no port, userinfo, query or fragment; .cn only for cn-* regions)."""
    m = _SNS_CERT_URL.fullmatch(url)
    return m is not None and bool(m["cn"]) == m["region"].startswith("cn-")


_PADDING = padding.PKCS1v15()


@dataclass(frozen=True)
class _Signer:
    """What a verification needs of a signing certificate, read once when it is fetched (the key
    parsed and the validity period as epoch seconds), not again for every message."""

    key: rsa.RSAPublicKey | None  # None: the certificate holds no RSA key (every signature is refused)
    not_before: float
    not_after: float

    @classmethod
    def of(cls, cert: x509.Certificate) -> _Signer:
        key = cert.public_key()
        return cls(
            key=key if isinstance(key, rsa.RSAPublicKey) else None,
            not_before=cert.not_valid_before_utc.timestamp(),
            not_after=cert.not_valid_after_utc.timestamp(),
        )


def _signed_parts(envelope: Mapping[str, Any]) -> tuple[bytes, bytes, hashes.HashAlgorithm, str]:
    """The signature, the string to sign, the hash and the certificate URL of `envelope`;
    SignatureError when one is missing or malformed."""
    version = envelope.get("SignatureVersion")
    algorithm = _HASHES.get(version) if isinstance(version, str) else None
    if algorithm is None:
        raise SignatureError("unsupported or missing SignatureVersion")
    signature = envelope.get("Signature")
    if not isinstance(signature, str) or not signature:
        raise SignatureError("Signature is missing or not a string")
    try:  # what base64.b64decode(validate=True) calls, without its wrapper
        raw_signature = binascii.a2b_base64(signature, strict_mode=True)
    except (binascii.Error, ValueError):
        raise SignatureError("Signature is not valid base64") from None
    payload = string_to_sign(envelope)
    url = envelope.get("SigningCertURL")
    if not isinstance(url, str):
        raise SignatureError("SigningCertURL is missing or not a string")
    return raw_signature, payload, algorithm, url


def _check(signer: _Signer, raw_signature: bytes, payload: bytes, algorithm: hashes.HashAlgorithm) -> None:
    """SignatureError unless `signer` signed `payload` with `raw_signature` and is valid now."""
    if not signer.not_before <= time.time() <= signer.not_after:
        raise SignatureError("signing certificate is outside its validity period")
    if signer.key is None:
        raise SignatureError("signing certificate does not hold an RSA key")
    try:
        signer.key.verify(raw_signature, payload, _PADDING, algorithm)
    except InvalidSignature:
        raise SignatureError("signature does not match") from None


class SignatureVerifier:
    """Verifies SNS envelopes, caching signing certificates per URL (bounded LRU)."""

    def __init__(
        self,
        http: aiohttp.ClientSession | None = None,
        trusted_cert_prefixes: Sequence[str] = (),
        cache_size: int = 64,
        fetch_timeout: float = 10.0,
    ) -> None:
        self._http = http
        self._owns_http = http is None
        self._trusted = tuple(trusted_cert_prefixes)
        self._cache_size = max(1, cache_size)
        self._timeout = aiohttp.ClientTimeout(total=fetch_timeout)
        self._cache: OrderedDict[str, _Signer] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Signer]] = {}

    async def verify(self, envelope: Mapping[str, Any]) -> None:
        """Return if `envelope` is authentic; raise SignatureError or CertificateUnavailable."""
        if self.verify_cached(envelope):
            return
        raw_signature, payload, algorithm, url = _signed_parts(envelope)  # read again: once per certificate
        if not (_is_sns_cert_url(url) or any(matches_prefix(url, p) for p in self._trusted)):
            raise SignatureError("SigningCertURL is not an Amazon SNS certificate URL")
        _check(await self._certificate(url), raw_signature, payload, algorithm)

    def verify_cached(self, envelope: Mapping[str, Any]) -> bool:
        """`verify` without a wait, for the usual message, whose certificate is cached: True when
        `envelope` is authentic, False when its certificate must be fetched first (`verify` does);
        SignatureError when it is not authentic."""
        raw_signature, payload, algorithm, url = _signed_parts(envelope)
        signer = self._cache.get(url)  # its URL passed verify's rule when it was fetched
        if signer is None:
            return False
        self._cache.move_to_end(url)
        _check(signer, raw_signature, payload, algorithm)
        return True

    async def close(self) -> None:
        """Close the HTTP session if this verifier created it."""
        if self._owns_http and self._http is not None:
            await self._http.close()
            self._http = None

    async def _certificate(self, url: str) -> _Signer:
        """The certificate at `url` (its key and validity, read once), from cache or a single shared
        in-flight fetch."""
        if url in self._cache:
            self._cache.move_to_end(url)
            return self._cache[url]
        task = self._inflight.get(url)
        if task is None:
            task = asyncio.ensure_future(self._fetch(url))
            self._inflight[url] = task
            task.add_done_callback(lambda t: self._fetched(url, t))
        return await asyncio.shield(task)

    def _fetched(self, url: str, task: asyncio.Task[_Signer]) -> None:
        """Done-callback: drop the in-flight entry; cache successes only."""
        self._inflight.pop(url, None)
        if task.cancelled() or task.exception() is not None:
            return
        self._cache[url] = task.result()
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def _fetch(self, url: str) -> _Signer:
        """GET the PEM (no redirects, at most 64 KiB) and parse it."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        body = bytearray()
        try:
            async with self._http.get(url, timeout=self._timeout, allow_redirects=False) as resp:
                if resp.status >= 500 or resp.status in _TRANSIENT_STATUS:
                    raise CertificateUnavailable(f"certificate fetch returned HTTP {resp.status}")
                if resp.status != 200:  # SNS serves its certificates, never redirects: no such certificate
                    raise SignatureError(f"SigningCertURL answered HTTP {resp.status}: not an SNS certificate")
                async for chunk in resp.content.iter_chunked(8192):
                    body += chunk
                    if len(body) > _MAX_CERT_BYTES:
                        raise SignatureError("signing certificate is larger than 64 KiB")
        except aiohttp.ClientConnectorDNSError as exc:
            if getattr(exc.os_error, "errno", None) in _NO_SUCH_HOST:
                raise SignatureError("SigningCertURL names a host that does not exist") from None
            raise CertificateUnavailable(f"certificate fetch failed ({type(exc).__name__})") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise CertificateUnavailable(f"certificate fetch failed ({type(exc).__name__})") from None
        try:
            return _Signer.of(x509.load_pem_x509_certificate(bytes(body)))
        except ValueError:
            raise SignatureError("signing certificate is not a valid PEM certificate") from None

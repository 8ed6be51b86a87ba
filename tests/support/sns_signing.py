"""Test helpers: sign SNS envelopes like Amazon SNS does, and serve the signing certificates.

Deliberately independent of cfn_provider.trust.signature, so a bug in the string-to-sign there is caught.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.x509.oid import NameOID

_NOTIFICATION_KEYS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
_CONFIRMATION_KEYS = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")


@dataclass
class SigningIdentity:
    key: RSAPrivateKey
    cert_pem: bytes


def make_identity(days_valid: int = 30, not_before_days: int = 1) -> SigningIdentity:
    """A self-signed RSA 2048 certificate (CN=sns.amazonaws.com) valid from
    now - not_before_days to now - not_before_days + days_valid."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=not_before_days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days_valid))
        .sign(key, hashes.SHA256())
    )
    return SigningIdentity(key=key, cert_pem=cert.public_bytes(serialization.Encoding.PEM))


def _string_to_sign(envelope: dict) -> bytes:
    keys = _NOTIFICATION_KEYS if envelope["Type"] == "Notification" else _CONFIRMATION_KEYS
    return "".join(f"{k}\n{envelope[k]}\n" for k in keys if k in envelope).encode("utf-8")


def sign_envelope(envelope: dict, identity: SigningIdentity, version: str = "2") -> dict:
    """A copy of `envelope` with SignatureVersion and Signature set (version "1": SHA1, "2": SHA256)."""
    algorithm = {"1": hashes.SHA1, "2": hashes.SHA256}[version]()
    signed = dict(envelope, SignatureVersion=version)
    raw = identity.key.sign(_string_to_sign(signed), padding.PKCS1v15(), algorithm)
    signed["Signature"] = base64.b64encode(raw).decode("ascii")
    return signed


def notification(message: str, topic_arn: str, cert_url: str, subject: str | None = None) -> dict:
    """An unsigned SNS Notification envelope."""
    now = dt.datetime.now(dt.UTC)
    envelope = {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": topic_arn,
        "Message": message,
        "Timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
        "SigningCertURL": cert_url,
        "UnsubscribeURL": f"https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic_arn}:sub",
    }
    if subject is not None:
        envelope["Subject"] = subject
    return envelope


class CertServer:
    """A real HTTP server on 127.0.0.1 (own thread) serving PEMs added with add(); counts GETs per path.
    `statuses[path] = 503` answers that status (no body) for the path instead."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.statuses: dict[str, int] = {}
        self.hits: dict[str, int] = {}
        self.base_url = ""
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, name: str, pem: bytes) -> str:
        """Serve `pem` at /<name>; return its full URL."""
        self.files["/" + name.lstrip("/")] = pem
        return self.base_url + name.lstrip("/")

    def start(self) -> CertServer:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                with owner._lock:
                    owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                body = owner.files.get(self.path)
                if self.path in owner.statuses:
                    self.send_error(owner.statuses[self.path])
                    return
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-pem-file")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> CertServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Signer:
    """Signed SNS notifications from `provider`'s topic (its `topic_arn`), with a certificate `certs`
    serves: `signer.body(request)` is a queue message body as SNS would deliver it."""

    def __init__(self, provider: Any, certs: CertServer):
        self.provider, self.identity = provider, make_identity()
        self.cert_url = certs.add("SimpleNotificationService-dlq.pem", self.identity.cert_pem)

    def envelope(self, request: dict[str, Any] | str, topic_arn: str | None = None, sign: bool = True) -> dict:
        message = request if isinstance(request, str) else json.dumps(request)
        envelope = notification(message, topic_arn or self.provider.topic_arn, self.cert_url)
        return sign_envelope(envelope, self.identity) if sign else envelope

    def body(self, request: dict[str, Any] | str, **kwargs: Any) -> str:
        return json.dumps(self.envelope(request, **kwargs))

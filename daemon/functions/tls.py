"""The loopback listener's TLS: a private CA made at start, and the trust bundles functions get.

A function's ResponseURL is https, as CloudFormation's are (crhelper, for one, only speaks HTTPS
to it). At start the daemon makes a CA and a certificate for 127.0.0.1 signed by it (EC P-256, in
memory; the key is never written anywhere a function could read it: it reaches the SSL context
through a private file deleted at once). The functions' interpreters trust that CA through the
variables the usual HTTP clients read, each pointing at a bundle of what they trusted before plus
the CA: SSL_CERT_FILE (ssl's default context: urllib, http.client, urllib3, crhelper) and
REQUESTS_CA_BUNDLE (requests). Nothing else is trusted that was not trusted before.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"


@dataclass
class LoopbackTls:
    """The listener's SSL context and the folder holding the CA bundles (removed by `close`)."""

    context: ssl.SSLContext
    ca_pem: bytes
    folder: Path

    def bundle(self, base: str | None, name: str) -> str:
        """A file with `base`'s certificates (if readable) and the CA's: what a client trusted before, plus us."""
        path = self.folder / name
        if not path.exists():
            before = b""
            if base:
                try:
                    before = Path(base).read_bytes()
                except OSError:
                    before = b""
            path.write_bytes(before.rstrip(b"\n") + b"\n" + self.ca_pem if before else self.ca_pem)
        return str(path)

    def trust_environment(self, environment: dict[str, str]) -> dict[str, str]:
        """SSL_CERT_FILE and REQUESTS_CA_BUNDLE for a function whose environment is `environment`.
        Where the system's hashed certificate folder (SSL_CERT_DIR) holds its trust, as on Debian,
        SSL_CERT_FILE holds the CA alone: OpenSSL reads both, and a client's default context costs
        no parse of the whole system bundle (100 ms on a small machine) on every answer."""
        ssl_base = environment.get("SSL_CERT_FILE") or (None if _hashed_folder(environment) else _system_bundle())
        requests_base = environment.get("REQUESTS_CA_BUNDLE") or _certifi_bundle() or _system_bundle()
        return {
            "SSL_CERT_FILE": self.bundle(ssl_base, _name("ssl", ssl_base)),
            "REQUESTS_CA_BUNDLE": self.bundle(requests_base, _name("requests", requests_base)),
        }

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _name(kind: str, base: str | None) -> str:
    import hashlib

    return f"{kind}-{hashlib.sha256((base or '').encode()).hexdigest()[:12]}.pem"


def _hashed_folder(environment: dict[str, str]) -> bool:
    folder = environment.get("SSL_CERT_DIR") or ssl.get_default_verify_paths().openssl_capath
    try:
        return any(entry.endswith(".0") for entry in os.listdir(folder))
    except OSError:
        return False


def _system_bundle() -> str | None:
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def _certifi_bundle() -> str | None:
    try:
        import certifi
    except ImportError:
        return None
    path: str = certifi.where()
    return path


def make() -> LoopbackTls:
    """A fresh CA, a certificate for 127.0.0.1 (and localhost) signed by it, and the server context."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cfn-provider loopback CA")])
    ca_cert = _ca_certificate(ca_key, ca_name, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_certificate(key, ca_key, ca_name, now)
    folder = Path(tempfile.mkdtemp(prefix="cfn-provider-functions-"))
    os.chmod(folder, 0o700)
    pem = serialization.Encoding.PEM
    ca_pem = ca_cert.public_bytes(pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    key_file = folder / "listener-key.pem"
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(
                cert.public_bytes(pem)
                + key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            )
        context.load_cert_chain(key_file)
    finally:
        key_file.unlink(missing_ok=True)
    return LoopbackTls(context, ca_pem, folder)


def _ca_certificate(ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, now: dt.datetime) -> x509.Certificate:
    """The CA: self-signed, signs certificates only (path length 0), ten years."""
    return (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, now: dt.datetime
) -> x509.Certificate:
    """The listener's: 127.0.0.1 and localhost, server auth only, signed by the CA."""
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address(LOOPBACK)), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

"""A test certificate authority and server certificates for 127.0.0.1 / localhost, made with `cryptography`.

ca = CertAuthority()                                # a fresh self-signed CA (EC P-256)
cert, key = ca.issue(tmp_path / "server")           # server.crt (leaf + CA chain) and server.key (mode 600)
ctx = ca.client_context()                           # an ssl.SSLContext trusting only this CA
ca.issue(tmp_path / "rsa", rsa_key=True)            # an RSA server certificate (ca.rsa_only_client_context())
ca.path                                             # the CA certificate's PEM file (curl --cacert)
serial_of(pem_or_der)                               # which certificate a server presented
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import tempfile
from ipaddress import ip_address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CertAuthority:
    def __init__(self, directory: Path | None = None) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        public = self.key.public_key()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("cfn-provider test CA"))
            .issuer_name(_name("cfn-provider test CA"))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        folder = directory or Path(tempfile.mkdtemp(prefix="cfn-test-ca-"))
        self.path = folder / "ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, stem: Path, names: tuple[str, ...] = ("127.0.0.1", "localhost"), *, rsa_key: bool = False
    ) -> tuple[Path, Path]:
        """A server certificate for `names` (IP addresses or DNS names): (stem.crt, stem.key); an EC
        P-256 key, or an RSA 2048 one with `rsa_key`."""
        key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if rsa_key
            else ec.generate_private_key(ec.SECP256R1())
        )
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_path.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM)
        )
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        os.chmod(key_path, 0o600)
        return cert_path, key_path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.path))

    def rsa_only_client_context(self) -> ssl.SSLContext:
        """A client that can only verify an RSA server certificate (TLS 1.2, RSA-authenticated suites only)."""
        context = self.client_context()
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384")
        return context


def serial_of(cert: bytes) -> int:
    """The serial number of a certificate, PEM or DER."""
    loaded = x509.load_pem_x509_certificate(cert) if cert.startswith(b"-----") else x509.load_der_x509_certificate(cert)
    return loaded.serial_number


def serial_in(path: Path) -> int:
    """The serial number of the first (leaf) certificate in a PEM file."""
    return serial_of(path.read_bytes())

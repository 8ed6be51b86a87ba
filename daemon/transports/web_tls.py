"""The web listener's TLS: a server SSLContext from PEM certificate and key files, reloaded in place.

`reload()` (SIGHUP) first loads the files into a fresh context, so a half-written or mismatched
pair is refused and the listener goes on with the one it has; then it loads them into the live
context. A context's certificate applies to the handshakes that start after it is loaded:
connections already open keep theirs and are not dropped, new ones get the new certificate.
TLS 1.2 at least; the key file should be readable by the daemon's user only.
"""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

from ..config import TransportConfigError


class TlsError(TransportConfigError):
    """The certificate or key cannot be used (the listener does not start, or a reload is refused)."""


def _context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    return context


def _load(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    try:
        context.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as exc:
        raise TlsError(f"--web-cert/--web-key: no such file {exc.filename}") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise TlsError(
            f"--web-cert {cert_file} / --web-key {key_file} cannot be used: "
            f"{getattr(exc, 'reason', None) or type(exc).__name__} (a PEM certificate chain and "
            "its unencrypted private key)"
        ) from None


class ServerTls:
    """The live server context and the files it comes from."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = _context()
        _load(self.context, cert_file, key_file)
        self.loads = 1

    def key_exposed(self) -> bool:
        """Whether the key file can be read by group or others (worth a warning at start)."""
        try:
            return bool(Path(self.key_file).stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
        except OSError:
            return False

    def reload(self) -> None:
        """Load the files again into the live context (new connections only); TlsError leaves it as it was.
        (Replace both files first, then signal: a pair caught mid-replacement fails the check, and one
        that changes between the check and the load is loaded again.)"""
        for attempt in range(3):
            _load(_context(), self.cert_file, self.key_file)  # a usable pair, before the live context is touched
            try:
                _load(self.context, self.cert_file, self.key_file)
                break
            except TlsError:
                if attempt == 2:
                    raise
        self.loads += 1

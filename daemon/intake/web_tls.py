"""The web listener's TLS: a server SSLContext from PEM certificate and key files, swapped whole on reload.

The listener holds one context for its life (`ServerTls.context`); at each handshake its SNI
callback, which OpenSSL calls whether or not the client sends a server name, hands the connection
the context loaded last (`ServerTls.current`). `reload()` (SIGHUP) loads the files into a fresh
context and swaps it in whole: a half-written or mismatched pair is refused and the listener goes on
with the one it has; nothing of the old certificate is kept (loading into one context keeps a
certificate per key type: after an RSA to EC change, RSA-only clients went on getting the old RSA
one). Connections already open keep theirs; new ones get the new certificate.
TLS 1.2 at least; the key file should be readable by the daemon's user only.
"""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

from ..errors import TransportConfigError


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
    """The listener's context, the context its handshakes get (the last loaded), and their files."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.current = _context()
        _load(self.current, cert_file, key_file)
        self.context = _context()  # the listener's: each handshake is switched to `current`
        _load(self.context, cert_file, key_file)
        self.context.sni_callback = self._switch
        self.loads = 1

    def _switch(self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        connection.context = self.current

    def key_exposed(self) -> bool:
        """Whether the key file can be read by group or others (worth a warning at start)."""
        try:
            return bool(Path(self.key_file).stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
        except OSError:
            return False

    def reload(self) -> None:
        """Load the files into a fresh context and swap it in (new connections only); TlsError leaves
        the current one as it was. (Replace both files first, then signal: a pair caught
        mid-replacement fails the load and the next SIGHUP loads it.)"""
        fresh = _context()
        _load(fresh, self.cert_file, self.key_file)
        self.current = fresh
        self.loads += 1

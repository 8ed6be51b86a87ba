"""The web listener's connections: counted and capped per source and in all, TLS under a handshake deadline.

`Listener` accepts connections itself, so it knows each one's source before anything is read. Past
--web-max-connections open connections, or --web-max-connections-per-source from its source
address, a new connection is closed at once (no TLS handshake, no request: nothing to answer it
with a 503). Otherwise it is connected (loop.connect_accepted_socket, asyncio's or uvloop's) with
TLS under --web-header-timeout as its handshake timeout (asyncio's own default would hold a
connection that never completes it for 60 s), to a `Gate`: aiohttp's request handler behind a
protocol that counts the connection out when it closes. Behind a load balancer every connection
comes from its address: raise the per-source cap to the total there.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..logs import get_logger

log = get_logger("web")
SAY_EVERY = 60.0  # seconds: connections closed past a cap are logged in one line at most this often


@dataclass
class Connections:
    """The open connections, by source address; the caps they are held to."""

    per_source: int
    total: int
    by_source: Counter[str] = field(default_factory=Counter)
    open: int = 0
    refused: int = 0  # closed past a cap since the last `web.connections_capped` line
    said_at: float = 0.0

    def admit(self, source: str) -> bool:
        """Count the connection in (True), or False past a cap (the caller closes it)."""
        if self.open >= self.total or self.by_source[source] >= self.per_source:
            self._refused(source)
            return False
        self.open += 1
        self.by_source[source] += 1
        return True

    def release(self, source: str) -> None:
        self.open -= 1
        self.by_source[source] -= 1
        if self.by_source[source] <= 0:
            del self.by_source[source]

    def _refused(self, source: str) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self.said_at >= SAY_EVERY:
            log.warning(
                "web.connections_capped",
                closed=self.refused,
                source=source,
                open=self.open,
                from_source=self.by_source[source],
                detail=f"new connections past --web-max-connections ({self.total}) or "
                f"--web-max-connections-per-source ({self.per_source}) are closed at once",
            )
            self.refused, self.said_at = 0, now


class Gate(asyncio.Protocol):
    """One connection's protocol: aiohttp's request handler, and `on_close` once when it closes."""

    def __init__(self, handler: asyncio.Protocol, on_close: Callable[[], None]) -> None:
        self.handler, self.on_close = handler, on_close

    def connection_made(self, transport: Any) -> None:  # asyncio's or uvloop's transport
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_close()
        self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


class Listener:
    """The listening socket and its accept loop (see the module docstring); `close()` stops accepting."""

    def __init__(
        self,
        handler_factory: Callable[[], Any],
        connections: Connections,
        tls: ssl.SSLContext | None,
        handshake_timeout: float,
    ) -> None:
        self.handler_factory, self.connections = handler_factory, connections
        self.tls, self.handshake_timeout = tls, handshake_timeout
        self.sock: socket.socket | None = None
        self.accepting: asyncio.Task[None] | None = None
        self.connecting: set[asyncio.Task[None]] = set()

    def open(self, address: str, port: int) -> int:
        """Listen on address:port (OSError if it cannot); the port listened on."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.create_server((address, port), family=family, backlog=128)
        self.sock.setblocking(False)
        self.accepting = asyncio.ensure_future(self._accept(self.sock))
        return int(self.sock.getsockname()[1])

    def close(self) -> None:
        if self.accepting is not None:
            self.accepting.cancel()
        for task in list(self.connecting):  # handshakes still running: dropped
            task.cancel()
        if self.sock is not None:
            self.sock.close()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:  # out of file descriptors, say: the next accept may do
                log.error("web.accept_failed", error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
                continue
            source = str(peer[0]) if isinstance(peer, tuple) else "-"
            if not self.connections.admit(source):
                conn.close()
                continue
            task = asyncio.ensure_future(self._connect(conn, source))
            self.connecting.add(task)
            task.add_done_callback(self.connecting.discard)

    async def _connect(self, conn: socket.socket, source: str) -> None:
        """Connect the accepted socket to a Gate: with TLS, once its handshake completes in time."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.connections.release(source)

        timeout = self.handshake_timeout if self.tls else None  # (asyncio refuses one without TLS)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: Gate(self.handler_factory(), release), conn, ssl=self.tls, ssl_handshake_timeout=timeout
            )
        except (OSError, ssl.SSLError, TimeoutError):  # no TLS in time, or failed it
            with contextlib.suppress(OSError):
                conn.close()
            release()
        except asyncio.CancelledError:  # the listener closes
            with contextlib.suppress(OSError):
                conn.close()
            release()
            raise

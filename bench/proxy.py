"""A TCP proxy on 127.0.0.1 that notes every HTTP/1.1 request passing through it.

Used in front of moto to count the SQS calls an idle daemon makes (by X-Amz-Target) and to
time-stamp the moment an S3 PUT of a response is answered by the emulator (the response
object exists from then on). It frames requests by Content-Length (what botocore and
aiohttp send) and relies on HTTP/1.1 clients not pipelining: the first bytes coming back
after a request are its response. Bytes are forwarded untouched either way.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.I)
_TARGET = re.compile(rb"\r\nx-amz-target:\s*[\w.]*?\.?(\w+)\r\n", re.I)
_ACTION = re.compile(rb"Action=(\w+)")


@dataclass
class Exchange:
    method: str
    path: str
    operation: str  # X-Amz-Target's operation (or Action=), else METHOD
    sent_at: float  # time.time() when the request's header block was seen
    answered_at: float | None = None  # time.time() when the first byte of its response came back
    status: int | None = None


@dataclass
class _Connection:
    buffer: bytes = b""
    body_left: int = 0
    pending: deque = field(default_factory=deque)
    framing_lost: bool = False


class RecordingProxy:
    """`with RecordingProxy(port_of_moto) as proxy:` ... `proxy.endpoint`, `proxy.exchanges`."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def snapshot(self) -> list[Exchange]:
        with self._lock:
            return list(self.exchanges)

    def count(self, since: float = 0.0, until: float = float("inf")) -> Counter:
        return Counter(e.operation for e in self.snapshot() if since <= e.sent_at < until)

    # ---------------------------------------------------------------- plumbing
    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        conn = _Connection()
        await asyncio.gather(
            self._pump(client_r, up_w, lambda d: self._requests(conn, d)),
            self._pump(up_r, client_w, lambda d: self._responses(conn, d)),
            return_exceptions=True,
        )

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, note) -> None:
        try:
            while data := await reader.read(65536):
                note(data)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def _requests(self, conn: _Connection, data: bytes) -> None:
        if conn.framing_lost:
            return
        conn.buffer += data
        while conn.buffer:
            if conn.body_left:
                taken = min(conn.body_left, len(conn.buffer))
                conn.body_left -= taken
                conn.buffer = conn.buffer[taken:]
                continue
            end = conn.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buffer) > 65536:
                    conn.framing_lost = True
                return
            head, conn.buffer = conn.buffer[: end + 2], conn.buffer[end + 4 :]
            line = head.split(b"\r\n", 1)[0].split(b" ")
            if len(line) < 3 or b"transfer-encoding: chunked" in head.lower():
                conn.framing_lost = True  # nothing we send does this; stop counting this connection
                return
            length = _CONTENT_LENGTH.search(head)
            conn.body_left = int(length.group(1)) if length else 0
            target = _TARGET.search(head + b"\r\n")
            operation = target.group(1).decode() if target else ""
            if not operation and conn.body_left:
                action = _ACTION.search(conn.buffer[: conn.body_left])
                operation = action.group(1).decode() if action else ""
            exchange = Exchange(line[0].decode(), line[1].decode(), operation or line[0].decode(), time.time())
            conn.pending.append(exchange)
            with self._lock:
                self.exchanges.append(exchange)

    def _responses(self, conn: _Connection, data: bytes) -> None:
        if conn.pending and data.startswith(b"HTTP/"):
            exchange = conn.pending.popleft()
            exchange.answered_at = time.time()
            try:
                exchange.status = int(data[9:12])
            except ValueError:
                pass

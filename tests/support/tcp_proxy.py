"""A TCP forwarder on 127.0.0.1 that a test can take down and bring back: a dependency outage.

Threads and plain sockets, so it serves daemons running as subprocesses and never blocks an
event loop.

    with TcpProxy("127.0.0.1", moto_port) as proxy:   # forwards 127.0.0.1:<proxy.port> -> target
        env["AWS_ENDPOINT_URL_SQS"] = proxy.url        # only SQS goes through it
        ...
        proxy.down()                # every open connection is reset (RST); new ones are reset too
        ...                         # proxy.attempts_while_down counts connection attempts meanwhile
        proxy.up()                  # forwarding again

Two ways of being down:
- `down()` (mode "reset", the default): the port keeps listening, and every connection is
  accepted and at once aborted with a TCP RST. The client sees "connection reset"; the proxy
  counts each attempt, which is how a test measures how hard a client retries.
- `down(mode="refuse")`: the listening socket is closed, so connects are refused
  (ECONNREFUSED), as when the endpoint's host is gone. Attempts cannot be counted; `up()`
  listens on the same port again.

Each connection attempt is recorded in `attempts` as (time.monotonic(), "forwarded" | "reset" |
"upstream-failed").
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time

__all__ = ["TcpProxy"]

_POLL = 0.05  # how often the threads look at their stop/kill flags


def _abort(sock: socket.socket) -> None:
    """Close `sock` with a TCP RST (SO_LINGER 0) rather than a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client, self.upstream = client, upstream
        self.killed = threading.Event()  # set by down(): reset the client side
        self.thread: threading.Thread | None = None
        self.bytes_up = self.bytes_down = 0

    def pump(self, stopping: threading.Event) -> None:
        sel = selectors.DefaultSelector()
        try:
            self.client.setblocking(False)
            self.upstream.setblocking(False)
            sel.register(self.client, selectors.EVENT_READ, self.upstream)
            sel.register(self.upstream, selectors.EVENT_READ, self.client)
            while not (self.killed.is_set() or stopping.is_set()):
                for key, _ in sel.select(_POLL):
                    src, dst = key.fileobj, key.data
                    try:
                        data = src.recv(65536)  # type: ignore[union-attr]
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data:  # one side closed: close both (HTTP needs no half-close here)
                        return
                    if src is self.client:
                        self.bytes_up += len(data)
                    else:
                        self.bytes_down += len(data)
                    dst.setblocking(True)
                    try:
                        dst.sendall(data)
                    except OSError:
                        return
                    finally:
                        dst.setblocking(False)
        finally:
            sel.close()
            if self.killed.is_set() or stopping.is_set():
                _abort(self.client)
            else:
                try:
                    self.client.close()
                except OSError:
                    pass
            _abort(self.upstream)


class TcpProxy:
    """See the module docstring. A context manager, or start()/stop()."""

    def __init__(
        self, target_host: str, target_port: int, host: str = "127.0.0.1", connect_timeout: float = 5.0
    ) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self.connect_timeout = connect_timeout
        self.attempts: list[tuple[float, str]] = []
        self._mode = "up"  # "up", "reset", "refuse"
        self._down_since: float | None = None
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._mode == "up"

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        if self._thread is not None:
            return self
        self._stopping.clear()
        self._listen()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name=f"tcp-proxy-{self.port}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            listener, self._listener = self._listener, None
            connections = list(self._connections)
        if listener is not None:
            listener.close()
        for conn in connections:
            if conn.thread is not None:
                conn.thread.join(timeout=2)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the outage ------------------------------------------------------------------------

    def down(self, mode: str = "reset") -> None:
        """Take the endpoint away: reset every open connection, and reset ("reset") or refuse
        ("refuse") every new one until up()."""
        if mode not in ("reset", "refuse"):
            raise ValueError("mode is 'reset' or 'refuse'")
        with self._lock:
            self._mode = mode
            self._down_since = time.monotonic()
            connections = list(self._connections)
            listener = self._listener if mode == "refuse" else None
            if listener is not None:
                self._listener = None
        if listener is not None:
            listener.close()
        for conn in connections:
            conn.killed.set()
        for conn in connections:  # so that down() returns with every old connection gone
            if conn.thread is not None:
                conn.thread.join(timeout=2)

    def up(self) -> None:
        """Serve again (on the same port)."""
        with self._lock:
            relisten = self._listener is None
        if relisten:
            self._listen()
        with self._lock:
            self._mode = "up"
            self._down_since = None

    # ---- what happened ---------------------------------------------------------------------

    def attempts_between(self, start: float, end: float, outcome: str | None = None) -> int:
        """Connection attempts seen with time.monotonic() in [start, end) (of one outcome)."""
        with self._lock:
            return sum(1 for t, o in self.attempts if start <= t < end and (outcome is None or o == outcome))

    @property
    def forwarded(self) -> int:
        with self._lock:
            return sum(1 for _, o in self.attempts if o == "forwarded")

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    # ---- inside ----------------------------------------------------------------------------

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))  # port 0 the first time; the same port after that
        sock.listen(128)
        sock.settimeout(_POLL)
        with self._lock:
            self.port = sock.getsockname()[1]
            self._listener = sock

    def _record(self, outcome: str) -> None:
        with self._lock:
            self.attempts.append((time.monotonic(), outcome))

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                listener = self._listener
            if listener is None:
                time.sleep(_POLL)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue  # timeout, or the listener was closed by down("refuse")
            if self._mode != "up":
                self._record("reset")
                _abort(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
            except OSError:
                self._record("upstream-failed")
                _abort(client)
                continue
            self._record("forwarded")
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(client, upstream)
            conn.thread = threading.Thread(
                target=self._serve, args=(conn,), daemon=True, name=f"tcp-proxy-{self.port}-conn"
            )
            with self._lock:  # started under the lock: down() and stop() only ever see started threads
                self._connections.add(conn)
                if self._mode != "up":  # went down between the check and now
                    conn.killed.set()
                conn.thread.start()

    def _serve(self, conn: _Connection) -> None:
        try:
            conn.pump(self._stopping)
        finally:
            with self._lock:
                self._connections.discard(conn)


class RoundRobinProxy(TcpProxy):
    """A TcpProxy that sends each new connection to the next of several targets in turn: a small load
    balancer in front of a fleet (every connection a request's copy opens may reach another member).

        with RoundRobinProxy([("127.0.0.1", a_port), ("127.0.0.1", b_port)]) as lb:
            ...  # https://127.0.0.1:<lb.port>/...
    """

    def __init__(self, targets: list[tuple[str, int]], host: str = "127.0.0.1") -> None:
        self.targets = list(targets)
        self._next = 0
        super().__init__(*targets[0], host=host)

    @property  # type: ignore[override]
    def target(self) -> tuple[str, int]:
        chosen = self.targets[self._next % len(self.targets)]
        self._next += 1
        return chosen

    @target.setter
    def target(self, _value: tuple[str, int]) -> None:
        pass  # TcpProxy.__init__ sets one target; the list above is used instead

"""A real HTTP server standing in for the S3 endpoint behind presigned ResponseURLs.

Threaded (http.server.ThreadingHTTPServer in a daemon thread), so it serves sync tests,
async tests (the event loop is never blocked by it) and daemons running as subprocesses.

    with StubS3() as s3:
        url = s3.url("responses/req-1")            # SigV4-looking presigned URL, expires in 1 h
        s3.fail_with(503, times=2)                  # the next two writes get 503 SlowDown
        ...                                         # the code under test PUTs to `url`
        assert s3.bodies("responses/req-1") == [b"..."]
        assert s3.put_count("responses/req-1") == 3

Behaviour (applies to writes, i.e. PUT and POST; GET/HEAD are never scripted):
- a script of steps, consulted per request: the first step whose key matches (or that has no
  key) and has calls left is used and its count decremented; exhausted steps disappear; with
  no step left the request is passed through (stored, 200 + ETag, like S3).
- `fail_with(status, times=None, code=None)`: answer `status` with an S3-style XML error body,
  its <Code> `code` (default: S3's usual code for the status, e.g. 400 InvalidRequest; S3 also
  answers `400 RequestTimeout` when the body did not arrive in time)
  (a 2xx status here stores the body, like a pass-through with another status).
- `stall(seconds, times=None, status=200)`: hold the request (body already read) for
  `seconds` before answering `status`; a stall is cut short (and nothing answered) on stop().
- `reset_connections(times=None)`: read the request, then abort the TCP connection (RST).
- `trickle(every, times=None, status=200)`: read the request, then send the status line and one
  header byte every `every` seconds, never finishing the headers (a slow-loris answer: no
  socket read timeout ever trips); ended (nothing answered) on stop().
- `pass_through()`: forget every step (or only those for `key=`).
- each setter replaces the steps for the same `key` (None: the steps without a key) unless
  `append=True`, which queues it after them: `s3.fail_with(503, times=1); s3.stall(2, times=1,
  append=True)` gives 503, then a stall, then normal service.
- with `enforce_expiry=True` (the default) a passed-through request whose URL has expired
  (X-Amz-Date + X-Amz-Expires, or SigV2 Expires) gets 403 AccessDenied "Request has expired",
  like S3. Scripted steps are applied before that check.

Every request is recorded (`requests`): method, the raw request target (path + query exactly
as it came on the wire), headers as a list of (name, value) pairs in wire order (so an empty
`Content-Type:` is visible as ("Content-Type", "")), body, the status answered (None when no
answer was sent: reset, or a stall cut short), and what was done (`action`).
GET /<key> returns the last stored body of a key (404 NoSuchKey when none), which lets a test
read a response back through plain HTTP.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.server
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["StubS3", "Request"]

_REASONS = {
    400: ("InvalidRequest", "Bad Request"),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    408: (
        "RequestTimeout",
        "Your socket connection to the server was not read from or written to within the timeout period.",
    ),
    409: ("OperationAborted", "A conflicting conditional operation is currently in progress."),
    429: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    502: ("BadGateway", "Bad Gateway"),
    503: ("SlowDown", "Please reduce your request rate."),
    504: ("GatewayTimeout", "Gateway Timeout"),
}


@dataclass
class Request:
    """One request as the stub saw it."""

    method: str
    target: str  # raw path + query, exactly as on the request line
    headers: list[tuple[str, str]]
    body: bytes
    key: str  # the path without its leading "/", percent-decoded
    received_at: float
    status: int | None = None  # what was answered; None when nothing was (reset, stall cut short, not yet)
    action: str = ""  # "pass", "fail", "stall", "reset", "expired", "read"

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    def header(self, name: str) -> list[str]:
        """Every value of header `name` (case-insensitive), in wire order."""
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class _Step:
    kind: str  # "status", "stall", "reset", "trickle"
    times: int | None  # None: until told otherwise
    key: str | None = None
    status: int = 200
    seconds: float = 0.0
    code: str | None = None  # the error body's <Code> (None: the usual one for the status)


class StubS3:
    """See the module docstring. Usable as a context manager or with start()/stop()."""

    def __init__(self, enforce_expiry: bool = True, host: str = "127.0.0.1") -> None:
        self.enforce_expiry = enforce_expiry
        self.host = host
        self.base_url = ""
        self.port = 0
        self._requests: list[Request] = []
        self._objects: dict[str, bytes] = {}
        self._steps: list[_Step] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> StubS3:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = http.server.ThreadingHTTPServer((self.host, 0), _make_handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://{self.host}:{self.port}/"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True, name=f"stub-s3-{self.port}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # ends stalls at once
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None
            self._thread = None

    def __enter__(self) -> StubS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- URLs ------------------------------------------------------------------------------

    def url(self, key: str, expires_in: float = 3600, sigv2: bool = False, signed_at: float | None = None) -> str:
        """A presigned-looking URL for `key`. SigV4 (default): X-Amz-Algorithm, X-Amz-Credential,
        X-Amz-Date (= `signed_at`, default now), X-Amz-Expires, X-Amz-SignedHeaders=host,
        X-Amz-Signature (64 hex). SigV2: AWSAccessKeyId, Expires (epoch), Signature (base64 with
        '+', '/' and '=' escaped as %2B, %2F, %3D). Every URL has a fresh signature.
        A negative `expires_in` (or an old `signed_at`) gives a URL that has already expired."""
        if not self.base_url:
            raise RuntimeError("StubS3 is not started")
        now = time.time() if signed_at is None else signed_at
        path = self.base_url + quote(key.lstrip("/"), safe="/~")
        if sigv2:
            raw = os.urandom(20)
            sig = base64.b64encode(raw).decode("ascii")
            # make sure both characters that need escaping are there
            sig = "+/" + sig[2:]
            query = (
                f"AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires={int(now + expires_in)}&Signature={quote(sig, safe='')}"
            )
        else:
            stamp = dt.datetime.fromtimestamp(now, dt.UTC)
            day, amz_date = stamp.strftime("%Y%m%d"), stamp.strftime("%Y%m%dT%H%M%SZ")
            credential = quote(f"AKIAIOSFODNN7EXAMPLE/{day}/us-east-1/s3/aws4_request", safe="")
            signature = hashlib.sha256(os.urandom(32)).hexdigest()
            query = (
                f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={credential}&X-Amz-Date={amz_date}"
                f"&X-Amz-Expires={int(expires_in)}&X-Amz-SignedHeaders=host&X-Amz-Signature={signature}"
            )
        return f"{path}?{query}"

    # ---- behaviour -------------------------------------------------------------------------

    def fail_with(
        self,
        status: int,
        times: int | None = None,
        *,
        key: str | None = None,
        append: bool = False,
        code: str | None = None,
    ) -> StubS3:
        """Answer `status` (S3-style XML error body, <Code> `code`) to the next `times` writes (None: all)."""
        return self._set(_Step("status", times, key, status=status, code=code), append)

    respond_with = fail_with

    def stall(
        self,
        seconds: float,
        times: int | None = None,
        status: int = 200,
        *,
        key: str | None = None,
        append: bool = False,
    ) -> StubS3:
        """Hold the next `times` writes `seconds` before answering `status`."""
        return self._set(_Step("stall", times, key, status=status, seconds=seconds), append)

    def trickle(
        self, every: float, times: int | None = None, status: int = 200, *, key: str | None = None, append: bool = False
    ) -> StubS3:
        """Answer the next `times` writes one header byte every `every` seconds, never completing."""
        return self._set(_Step("trickle", times, key, status=status, seconds=every), append)

    def reset_connections(self, times: int | None = None, *, key: str | None = None, append: bool = False) -> StubS3:
        """Read the next `times` writes, then abort their connections with a TCP RST."""
        return self._set(_Step("reset", times, key), append)

    def pass_through(self, *, key: str | None = None) -> StubS3:
        """Normal service again: drop every scripted step (only those for `key` when given)."""
        with self._cond:
            self._steps = [] if key is None else [s for s in self._steps if s.key != key]
        return self

    def _set(self, step: _Step, append: bool) -> StubS3:
        if step.times is not None and step.times < 0:
            raise ValueError("times must be >= 0 or None")
        with self._cond:
            if not append:
                self._steps = [s for s in self._steps if s.key != step.key]
            if step.times != 0:
                self._steps.append(step)
        return self

    def _next_step(self, key: str) -> _Step | None:
        with self._cond:
            for step in self._steps:
                if step.key is not None and step.key != key:
                    continue
                if step.times is not None:
                    step.times -= 1
                    if step.times <= 0:
                        self._steps.remove(step)
                return step
        return None

    # ---- what happened ---------------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._cond:
            return list(self._requests)

    def requests_for(self, key: str, method: str | None = None) -> list[Request]:
        key = key.lstrip("/")
        return [r for r in self.requests if r.key == key and (method is None or r.method == method)]

    def bodies(self, key: str, method: str = "PUT") -> list[bytes]:
        """Bodies of the successful (2xx) writes of `key`, in arrival order."""
        return [r.body for r in self.requests_for(key, method) if r.ok]

    def put_count(self, key: str, method: str = "PUT") -> int:
        """How many PUTs of `key` arrived, whatever they were answered (every attempt counts)."""
        return len(self.requests_for(key, method))

    def body(self, key: str) -> bytes | None:
        """The last stored body of `key` (what S3 would now hold), or None."""
        with self._cond:
            return self._objects.get(key.lstrip("/"))

    def wait_for_put(self, key: str, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until `key` has had `count` successful PUTs; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if len(self._bodies_unlocked(key)) >= count:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def _bodies_unlocked(self, key: str) -> list[bytes]:
        key = key.lstrip("/")
        return [r.body for r in self._requests if r.key == key and r.method == "PUT" and r.ok]

    def clear(self) -> None:
        """Forget recorded requests and stored objects (the script stays)."""
        with self._cond:
            self._requests.clear()
            self._objects.clear()

    # ---- used by the handler ---------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()

    def _finish(self, request: Request, status: int | None, action: str) -> None:
        with self._cond:
            request.status, request.action = status, action
            if status is not None and 200 <= status < 300 and request.method in ("PUT", "POST"):
                self._objects[request.key] = request.body
            self._cond.notify_all()


def expired(target: str, now: float | None = None) -> bool:
    """True when the presigned query of `target` says the URL has expired."""
    now = time.time() if now is None else now
    query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(target).query).items()}
    try:
        if "x-amz-date" in query and "x-amz-expires" in query:
            start = dt.datetime.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
            return now > start.timestamp() + int(query["x-amz-expires"])
        if "expires" in query:
            return now > int(query["expires"])
    except ValueError:
        return False
    return False


def _error_xml(status: int, message: str | None = None, code: str | None = None) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    usual, default = _REASONS.get(status, (phrase.replace(" ", ""), phrase))
    code = code or usual
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message or default}</Message><RequestId>STUBREQUEST</RequestId></Error>"
    ).encode()


def _make_handler(stub: StubS3) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like S3

        def log_message(self, *args: object) -> None:
            pass

        def _read_body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _new_request(self, body: bytes) -> Request:
            request = Request(
                method=self.command,
                target=self.path,
                headers=[(k, v) for k, v in self.headers.items()],
                body=body,
                key=unquote(urlsplit(self.path).path).lstrip("/"),
                received_at=time.time(),
            )
            stub._record(request)
            return request

        def _send(
            self,
            request: Request,
            status: int,
            body: bytes = b"",
            action: str = "pass",
            content_type: str | None = None,
        ) -> None:
            # settled before the answer leaves, so a client that has read it sees it recorded
            # (and, like S3, a stored object stays stored even if the answer is then lost)
            stub._finish(request, status, action)
            try:
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                if 200 <= status < 300 and request.method in ("PUT", "POST"):
                    self.send_header("ETag", f'"{hashlib.md5(request.body).hexdigest()}"')
                self.send_header("x-amz-request-id", "STUBREQUEST")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body and self.command != "HEAD":
                    self.wfile.write(body)
                self.wfile.flush()
            except OSError:  # the client went away (e.g. after its read timeout)
                self.close_connection = True

        def _reset(self, request: Request) -> None:
            stub._finish(request, None, "reset")
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # with linger 0: RST, not FIN
            except OSError:
                pass

        def _write(self) -> None:
            body = self._read_body()
            request = self._new_request(body)
            step = stub._next_step(request.key)
            if step is None:
                if stub.enforce_expiry and expired(self.path):
                    self._send(request, 403, _error_xml(403, "Request has expired"), "expired", "application/xml")
                else:
                    self._send(request, 200, b"", "pass")
            elif step.kind == "reset":
                self._reset(request)
            elif step.kind == "trickle":
                self._trickle(request, step)
            elif step.kind == "stall":
                request.action = "stall"  # visible while the stall lasts
                if stub._stopping.wait(step.seconds):
                    stub._finish(request, None, "stall")
                    self.close_connection = True
                    return
                self._send_status(request, step.status, "stall")
            else:
                self._send_status(request, step.status, "fail" if step.status >= 300 else "pass", step.code)

        def _trickle(self, request: Request, step: _Step) -> None:
            request.action = "trickle"  # visible while it lasts
            self.close_connection = True
            try:
                self.wfile.write(f"HTTP/1.1 {step.status} OK\r\nX-Slow: ".encode())
                self.wfile.flush()
                while not stub._stopping.wait(step.seconds):
                    self.wfile.write(b"z")
                    self.wfile.flush()
            except OSError:  # the client gave up
                pass
            stub._finish(request, None, "trickle")

        def _send_status(self, request: Request, status: int, action: str, code: str | None = None) -> None:
            if 200 <= status < 300:
                self._send(request, status, b"", action)
            else:
                self._send(request, status, _error_xml(status, code=code), action, "application/xml")

        do_PUT = do_POST = _write  # noqa: N815

        def do_GET(self) -> None:  # noqa: N802
            request = self._new_request(self._read_body())
            body = stub.body(request.key)
            if body is None:
                self._send(request, 404, _error_xml(404), "read", "application/xml")
            else:
                self._send(request, 200, body, "read", "application/octet-stream")

        do_HEAD = do_GET  # noqa: N815

    return Handler

"""A lying network: an HTTP/1.1 proxy on 127.0.0.1 that does to each call, per a seeded
schedule, what networks and AWS do to calls.

    schedule = Schedule(seed=7, faults={"UpdateItem": {"drop": 0.1, "throttle": 0.05}, "*": {"error": 0.02}})
    with FaultProxy("dynamodb", dynalite_port, schedule) as proxy:
        env["AWS_ENDPOINT_URL_DYNAMODB"] = proxy.url   # the daemon reaches DynamoDB only through it
        ...
        proxy.tally()        # Counter of (operation, fault)

Faults (each decided per call, before the call is forwarded):
- "pass":     forwarded, and its answer relayed.
- "drop":     forwarded; once the service has answered (so the call was applied), the
              client's connection is reset (TCP RST) and the answer is thrown away. The client
              sees a connection error for a call that took effect: the ambiguous write.
- "stall":    forwarded and applied; the answer is held back and the connection left silent for
              `stall_seconds`, then reset: the client's own read timeout fires first when it is
              shorter (a timeout, not a reset, for a call that took effect).
- "delay":    forwarded; the whole answer is held `delay_range` seconds (uniform), then relayed.
- "reset":    the connection is reset before anything is forwarded (the call never happened).
- "throttle": answered by the proxy, not forwarded, with the service's throttling error:
              DynamoDB 400 ProvisionedThroughputExceededException; SQS 400 ThrottlingException
              (JSON protocol; every other one as RequestThrottled through x-amzn-query-error, which
              botocore prefers) or RequestThrottled (query protocol); S3 503 SlowDown; MNS 503
              Throttling.
- "error":    answered by the proxy, not forwarded: 500 InternalServerError / InternalError
              (S3: 500 InternalError, every other one 503 ServiceUnavailable).

The schedule is a seeded RNG per proxy, drawn in the order calls arrive: the same seed gives the
same sequence of faults, though which call gets which depends on the daemons' timing (subprocesses
on a shared machine). Operations are named as the service names them (X-Amz-Target's operation,
SQS's Action, "PUT"/"POST"/"GET" for S3, ReceiveMessage / DeleteMessage / ChangeMessageVisibility /
GetQueueAttributes / SendMessage for MNS); the schedule maps an operation (or "*") to fault
rates.

Framing: requests by Content-Length or chunked (what botocore and aiohttp send); responses by
Content-Length, chunked, or the connection's end. Clients are HTTP/1.1 without pipelining, so
one request is in flight per connection; each client connection gets its own upstream
connection. Bytes forwarded are untouched (signatures stay valid); `Expect: 100-continue` is
answered by the proxy itself. An asyncio loop in a thread: it serves subprocess daemons and never
blocks the test's loop. `observe(exchange, request_body, response_body)`, when given, sees every
call the service answered (also the dropped ones), e.g. to read SQS's receive counts.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["FAULTS", "Exchange", "FaultProxy", "Schedule"]

FAULTS = ("pass", "drop", "stall", "delay", "reset", "throttle", "error")
APPLIED = ("pass", "drop", "stall", "delay")  # faults after which the call took effect
SERVICES = ("dynamodb", "sqs", "s3", "mns")
_MAX_HEAD = 65536
_UPSTREAM_TIMEOUT = 120.0  # the longest a call may take upstream (long polls are at most 30 s)

_TARGET = re.compile(rb"\r\nx-amz-target:[ \t]*[\w.]*?\.?(\w+)[ \t]*\r\n", re.I)
_ACTION = re.compile(rb"(?:^|&)Action=(\w+)")


@dataclass
class Schedule:
    """Fault rates by operation ("*": every operation not named), drawn from a seeded RNG.

    `faults` maps an operation to {fault: probability}; the probabilities of one operation add
    up to at most 1, the rest is "pass". `delay_range` and `stall_seconds` size those faults."""

    seed: int | str
    faults: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    delay_range: tuple[float, float] = (0.2, 2.0)
    stall_seconds: float = 12.0

    def __post_init__(self) -> None:
        for operation, rates in self.faults.items():
            unknown = set(rates) - set(FAULTS)
            if unknown:
                raise ValueError(f"{operation}: unknown faults {sorted(unknown)}; known: {FAULTS}")
            if sum(rates.values()) > 1.0 + 1e-9:
                raise ValueError(f"{operation}: fault rates add up to more than 1")
        self._rng = random.Random(str(self.seed))
        self._lock = threading.Lock()
        self.enabled = True

    def decide(self, operation: str) -> tuple[str, float]:
        """(fault, seconds) for the next call of `operation`; seconds: the delay, when it is one."""
        rates = self.faults.get(operation, self.faults.get("*", {}))
        with self._lock:
            draw, seconds = self._rng.random(), self._rng.uniform(*self.delay_range)
            if not self.enabled:
                return "pass", 0.0
        for fault, rate in rates.items():
            if draw < rate:
                return fault, seconds if fault == "delay" else 0.0
            draw -= rate
        return "pass", 0.0


@dataclass
class Exchange:
    """One call through the proxy."""

    service: str
    operation: str
    fault: str
    started: float  # time.time()
    status: int | None = None  # the service's status (or the proxy's own, for throttle/error)
    ended: float | None = None


class _Closed(Exception):
    """The client closed its connection between requests."""


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0) rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return out


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    """The body of a message whose head had `headers`, as raw bytes (chunked framing kept)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            raw += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = await reader.readuntil(b"\r\n")
                    raw += trailer
                    if trailer == b"\r\n":
                        return bytes(raw)
            raw += await reader.readexactly(size + 2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


def _unchunk(raw: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(raw):
        end = raw.index(b"\r\n", i)
        size = int(raw[i:end].split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += raw[end + 2 : end + 2 + size]
        i = end + 4 + size
    return bytes(out)


def _operation(service: str, method: str, target: str, head: bytes, body: bytes) -> str:
    if service in ("dynamodb", "sqs"):
        found = _TARGET.search(head + b"\r\n")
        if found:
            return found.group(1).decode()
        action = _ACTION.search(body) or _ACTION.search(target.partition("?")[2].encode())
        return action.group(1).decode() if action else method
    if service == "mns":
        path = target.partition("?")[0].strip("/").split("/")
        if len(path) >= 3 and path[2] == "messages":
            return {
                "GET": "ReceiveMessage",
                "DELETE": "DeleteMessage",
                "PUT": "ChangeMessageVisibility",
                "POST": "SendMessage",
            }.get(method, method)
        return "GetQueueAttributes" if method == "GET" else method
    return method


def _response(status: int, reason: str, content_type: str, body: bytes, extra: Mapping[str, str] = {}) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        f"x-amzn-RequestId: fault-proxy-{random.getrandbits(48):012x}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def synthetic(service: str, fault: str, json_protocol: bool, nth: int) -> bytes:
    """What the service answers for `fault` ("throttle" or "error"), without the call being applied."""
    if service == "dynamodb":
        if fault == "throttle":
            doc = {
                "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "message": "The level of configured provisioned throughput for the table was exceeded.",
            }
            return _response(400, "Bad Request", "application/x-amz-json-1.0", json.dumps(doc).encode())
        doc = {"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "Internal server error"}
        return _response(500, "Internal Server Error", "application/x-amz-json-1.0", json.dumps(doc).encode())
    if service == "sqs":
        code, status, reason = (
            (("ThrottlingException" if nth % 2 else "RequestThrottled"), 400, "Bad Request")
            if fault == "throttle"
            else ("ServiceUnavailable", 503, "Service Unavailable")
        )
        message = "Rate exceeded" if fault == "throttle" else "Service is unavailable. Try again later."
        if json_protocol:
            extra = (
                {"x-amzn-query-error": f"{code};{'Sender' if status < 500 else 'Receiver'}"}
                if code != "ThrottlingException"
                else {}
            )
            doc = {"__type": f"com.amazonaws.sqs#{code}", "message": message}
            return _response(status, reason, "application/x-amz-json-1.0", json.dumps(doc).encode(), extra)
        xml = (
            f"<ErrorResponse><Error><Type>{'Sender' if status < 500 else 'Receiver'}</Type><Code>{code}</Code>"
            f"<Message>{message}</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
        return _response(status, reason, "text/xml", xml.encode())
    if service == "s3":
        code, status, reason, message = (
            ("SlowDown", 503, "Slow Down", "Please reduce your request rate.")
            if fault == "throttle"
            else ("InternalError", 500, "Internal Server Error", "We encountered an internal error. Please try again.")
        )
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>FAULTPROXY</RequestId><HostId>fault-proxy</HostId></Error>"
        )
        return _response(status, reason, "application/xml", xml.encode())
    code = "Throttling" if fault == "throttle" else "InternalError"
    status, reason = (503, "Service Unavailable") if fault == "throttle" else (500, "Internal Server Error")
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error xmlns="http://mns.aliyuncs.com/doc/v1/"><Code>{code}'
        f"</Code><Message>{code}</Message><RequestId>FAULTPROXY</RequestId><HostId>fault-proxy</HostId></Error>"
    )
    return _response(status, reason, "text/xml;charset=utf-8", xml.encode())


class FaultProxy:
    """See the module docstring. A context manager, or start()/stop()."""

    def __init__(
        self,
        service: str,
        upstream_port: int,
        schedule: Schedule,
        upstream_host: str = "127.0.0.1",
        observe: Callable[[Exchange, bytes, bytes], None] | None = None,
    ):
        if service not in SERVICES:
            raise ValueError(f"service is one of {SERVICES}")
        self.service, self.schedule, self.observe = service, schedule, observe
        self.upstream = (upstream_host, upstream_port)
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"fault-proxy-{service}", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0, limit=_MAX_HEAD * 4), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._server is not None:
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(15)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what happened -----------------------------------------------------------------------
    def snapshot(self) -> list[Exchange]:
        with self._lock:
            return list(self.exchanges)

    def tally(self) -> Counter:
        """(operation, fault) -> calls."""
        return Counter((e.operation, e.fault) for e in self.snapshot())

    def faults(self) -> Counter:
        """fault -> calls, over every operation."""
        return Counter(e.fault for e in self.snapshot())

    # ---- one client connection ---------------------------------------------------------------
    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    upstream = await self._one(client_r, client_w, upstream)
                except _Closed:
                    break
            client_w.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            _abort(client_w)
        except asyncio.CancelledError:
            _abort(client_w)
        finally:
            if upstream is not None:
                upstream[1].close()
            self._tasks.discard(task)

    async def _one(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Serve one request; the upstream connection to use for the next (None: open a new one)."""
        try:
            head = await client_r.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _Closed from None
            raise
        headers = _headers(head)
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        method, target = request_line[0], request_line[1] if len(request_line) > 1 else "/"
        if headers.get("expect", "").lower() == "100-continue":
            client_w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await client_w.drain()
            head = (
                b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"expect:"))
                + b"\r\n\r\n"
            )
        body = await _read_body(client_r, headers)
        plain = _unchunk(body) if "chunked" in headers.get("transfer-encoding", "").lower() else body
        operation = _operation(self.service, method, target, head, plain)
        fault, delay = self.schedule.decide(operation)
        exchange = Exchange(self.service, operation, fault, time.time())
        with self._lock:
            self.exchanges.append(exchange)

        if fault == "reset":
            _abort(client_w)
            raise _Closed
        if fault in ("throttle", "error"):
            json_protocol = "json" in headers.get("content-type", "")
            answer = synthetic(self.service, fault, json_protocol, len(self.exchanges))
            exchange.status, exchange.ended = int(answer[9:12]), time.time()
            client_w.write(answer)
            await client_w.drain()
            return upstream

        if upstream is not None and upstream[0].at_eof():  # the service closed it while idle
            upstream[1].close()
            upstream = None
        if upstream is None:
            upstream = await asyncio.open_connection(*self.upstream, limit=_MAX_HEAD * 4)
        up_r, up_w = upstream
        up_w.write(head + body)
        await up_w.drain()
        resp_head, (decoded, raw), keep = await asyncio.wait_for(self._response(up_r, method), _UPSTREAM_TIMEOUT)
        exchange.status, exchange.ended = int(resp_head[9:12]), time.time()
        if self.observe is not None:
            try:
                self.observe(exchange, plain, decoded)
            except Exception:  # noqa: BLE001 - an observer's bug must not become a network fault
                pass
        if fault == "drop":  # the service has answered, so the call was applied: the answer is lost
            _abort(client_w)
            up_w.close()
            raise _Closed
        if fault == "stall":
            await asyncio.sleep(self.schedule.stall_seconds)
            _abort(client_w)
            up_w.close()
            raise _Closed
        if fault == "delay":
            await asyncio.sleep(delay)
        client_w.write(resp_head + raw)
        await client_w.drain()
        if not keep:
            up_w.close()
            client_w.close()
            raise _Closed
        return upstream

    @staticmethod
    async def _response(reader: asyncio.StreamReader, method: str) -> tuple[bytes, tuple[bytes, bytes], bool]:
        """(head, (decoded body, raw body), keep the connection) of the upstream's answer; 1xx skipped."""
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            if not 100 <= status < 200:
                break
        headers = _headers(head)
        keep = headers.get("connection", "").lower() != "close" and not head.startswith(b"HTTP/1.0")
        if method == "HEAD" or status in (204, 304):
            raw = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers:
            raw = await _read_body(reader, headers)
        else:
            raw, keep = await reader.read(), False  # delimited by the connection's end
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        return head, (_unchunk(raw) if chunked else raw, raw), keep

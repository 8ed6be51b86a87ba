"""A local MNS-compatible HTTP server (queues only) for the tests: there is no public emulator.

Threaded (http.server.ThreadingHTTPServer in a daemon thread) on 127.0.0.1, port 0, like
StubS3, so it serves in-process daemons, subprocess daemons and sync tests alike.

    with MnsServer() as mns:                        # one account: mns.access_key_id / secret
        mns.create_queue("ros", visibility_timeout=30)
        mns.send("ros", body)                        # or over HTTP: MnsClient(mns).send_message(...)
        ...                                          # the code under test talks to mns.endpoint
        assert mns.queue("ros").in_flight == 0

What it implements, as MNS's REST API (2015-06-06) documents it:
- every request is authenticated: `Authorization: MNS AccessKeyId:Signature`, the signature
  being base64(HMAC-SHA1(secret, VERB\\nContent-MD5\\nContent-Type\\nDate\\n
  CanonicalizedMNSHeaders + CanonicalizedResource)) over the request as it arrived (resource =
  the raw request target); `x-mns-version: 2015-06-06` and a Date within 15 minutes are
  required. Failures answer 403 SignatureDoesNotMatch / InvalidAccessKeyId / TimeExpired.
- PUT /queues/Q (CreateQueue: VisibilityTimeout, PollingWaitSeconds, DlqPolicy in the XML
  body), GET /queues/Q (GetQueueAttributes), DELETE /queues/Q.
- POST /queues/Q/messages: SendMessage (<Message>) or BatchSendMessage (<Messages>).
- GET /queues/Q/messages?waitseconds=N[&numOfMessages=M]: (Batch)ReceiveMessage, long
  polling up to N seconds (or the queue's PollingWaitSeconds); 404 MessageNotExist when none.
  Each receive makes the message invisible for the queue's VisibilityTimeout and gives it a
  new receipt handle (base64-like, with '+', '/' and '=' as MNS's have).
- PUT /queues/Q/messages?receiptHandle=H&visibilityTimeout=N (1..43200): a new handle in
  <ChangeVisibility>; the old one stops working.
- DELETE /queues/Q/messages?ReceiptHandle=H: 204; a stale handle gets 400 ReceiptHandleError.
Query parameter names are matched case-insensitively; values are percent-decoded ('+' stays).

Everything is recorded (`requests`: method, target, headers, status, code); `fail_next()`
scripts errors; `queue(name)` exposes the messages for assertions.
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import hashlib
import hmac
import http.server
import itertools
import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

NS = "http://mns.aliyuncs.com/doc/v1/"
VERSION = "2015-06-06"


def string_to_sign(method: str, headers: dict[str, str], resource: str) -> str:
    """Written here from the documentation, independently of cfn_provider.transports.mns."""
    lower = {k.lower(): v.strip() for k, v in headers.items()}
    canonical = "".join(f"{k}:{lower[k]}\n" for k in sorted(lower) if k.startswith("x-mns-"))
    return (
        f"{method}\n{lower.get('content-md5', '')}\n{lower.get('content-type', '')}\n"
        f"{lower.get('date', '')}\n{canonical}{resource}"
    )


def sign(secret: str, method: str, headers: dict[str, str], resource: str) -> str:
    mac = hmac.new(secret.encode(), string_to_sign(method, headers, resource).encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


@dataclass
class StoredMessage:
    id: str
    body: str
    enqueued_ms: int
    priority: int = 8
    visible_at: float = 0.0  # time.time()
    dequeue_count: int = 0
    first_dequeue_ms: int = 0
    handle: str | None = None
    deleted: bool = False


@dataclass
class QueueState:
    name: str
    visibility_timeout: int = 30
    polling_wait: int = 0
    dlq: dict[str, str] | None = None
    messages: list[StoredMessage] = field(default_factory=list)

    @property
    def live(self) -> list[StoredMessage]:
        return [m for m in self.messages if not m.deleted]

    @property
    def in_flight(self) -> int:
        now = time.time()
        return sum(1 for m in self.live if m.visible_at > now)

    def handles(self) -> dict[str, StoredMessage]:
        return {m.handle: m for m in self.live if m.handle}


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    status: int = 0
    code: str = ""


class MnsServer:
    def __init__(
        self, access_key_id: str = "LTAI5tTestKeyId0001", secret: str | None = None, security_token: str | None = None
    ):
        self.access_key_id = access_key_id
        self.secret = secret or "mns-test-secret-" + uuid.uuid4().hex
        self.security_token = security_token  # required on every request when set
        self.queues: dict[str, QueueState] = {}
        self.requests: list[Seen] = []
        self.skew = 0.0  # seconds added to the server's clock (Date checks)
        self._failures: list[tuple[str, int, str, int]] = []  # (operation, status, code, times)
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._stopping = False
        self._server: http.server.ThreadingHTTPServer | None = None
        self.endpoint = ""
        self.port = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> MnsServer:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True, name="mns-server").start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MnsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """Environment for a daemon using this account's credentials."""
        env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": self.access_key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": self.secret}
        if self.security_token:
            env["ALIBABA_CLOUD_SECURITY_TOKEN"] = self.security_token
        return env

    # ---- direct access for tests ----------------------------------------------------------------
    def create_queue(
        self, name: str, visibility_timeout: int = 30, polling_wait: int = 0, dlq: dict[str, str] | None = None
    ) -> QueueState:
        with self._cond:
            return self.queues.setdefault(name, QueueState(name, visibility_timeout, polling_wait, dlq))

    def queue(self, name: str) -> QueueState:
        return self.queues[name]

    def send(self, queue: str, body: str, delay: float = 0.0) -> str:
        with self._cond:
            message = StoredMessage(uuid.uuid4().hex.upper(), body, _ms(), visible_at=time.time() + delay)
            self.queues[queue].messages.append(message)
            self._cond.notify_all()
            return message.id

    def fail_next(self, operation: str, status: int = 500, code: str = "InternalError", times: int = 1) -> None:
        """The next `times` requests of `operation` (receive, delete, change, attributes, send) fail."""
        with self._cond:
            self._failures.append((operation, status, code, times))

    def count(self, operation: str) -> int:
        return sum(1 for r in self.requests if _operation(r.method, r.target) == operation)

    def wait_until(self, predicate: Any, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if predicate():
                    return True
                self._cond.wait(0.05)
        return False

    # ---- the API ---------------------------------------------------------------------------------
    def _scripted(self, operation: str) -> tuple[int, str] | None:
        with self._cond:
            for i, (op, status, code, times) in enumerate(self._failures):
                if op == operation:
                    if times <= 1:
                        del self._failures[i]
                    else:
                        self._failures[i] = (op, status, code, times - 1)
                    return status, code
        return None

    def _authenticate(self, method: str, target: str, headers: dict[str, str]) -> tuple[int, str] | None:
        lower = {k.lower(): v for k, v in headers.items()}
        if lower.get("x-mns-version") != VERSION:
            return 400, "InvalidArgument"
        try:
            date = email.utils.parsedate_to_datetime(lower.get("date", ""))
        except (TypeError, ValueError):
            return 403, "TimeExpired"
        if date is None or abs(date.timestamp() - (time.time() + self.skew)) > 900:
            return 403, "TimeExpired"
        scheme, _, credential = lower.get("authorization", "").partition(" ")
        key_id, _, given = credential.rpartition(":")
        if scheme != "MNS" or key_id != self.access_key_id:
            return 403, "InvalidAccessKeyId"
        if self.security_token and lower.get("security-token") != self.security_token:
            return 403, "InvalidSecurityToken"
        if not hmac.compare_digest(given, sign(self.secret, method, headers, target)):
            return 403, "SignatureDoesNotMatch"
        return None

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, str, str]:
        """(status, error code or "", XML body)."""
        denied = self._authenticate(method, target, headers)
        if denied:
            return denied[0], denied[1], _error(denied[1], self.endpoint)
        scripted = self._scripted(_operation(method, target))
        if scripted:
            return scripted[0], scripted[1], _error(scripted[1], self.endpoint)
        parts = urlsplit(target)
        path = [unquote(p) for p in parts.path.strip("/").split("/")]
        query = _query(parts.query)
        if len(path) < 2 or path[0] != "queues":
            return 404, "InvalidArgument", _error("InvalidArgument", self.endpoint)
        name = path[1]
        if len(path) == 2:
            return self._queue_op(method, name, body)
        if name not in self.queues:
            return 404, "QueueNotExist", _error("QueueNotExist", self.endpoint)
        if method == "POST":
            return self._send(name, body)
        if method == "GET":
            return self._receive(name, query)
        if method == "PUT":
            return self._change(name, query)
        if method == "DELETE":
            return self._delete(name, query)
        return 405, "InvalidArgument", _error("InvalidArgument", self.endpoint)

    def _queue_op(self, method: str, name: str, body: bytes) -> tuple[int, str, str]:
        if method == "PUT":
            attrs = _fields(ElementTree.fromstring(body)) if body else {}
            with self._cond:
                existed = name in self.queues
                queue = self.create_queue(name)
                queue.visibility_timeout = int(attrs.get("VisibilityTimeout", queue.visibility_timeout))
                queue.polling_wait = int(attrs.get("PollingWaitSeconds", queue.polling_wait))
            return (204 if existed else 201), "", ""
        if name not in self.queues:
            return 404, "QueueNotExist", _error("QueueNotExist", self.endpoint)
        queue = self.queues[name]
        if method == "DELETE":
            with self._cond:
                del self.queues[name]
            return 204, "", ""
        dlq = ""
        if queue.dlq is not None:
            dlq = "<DlqPolicy>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in queue.dlq.items()) + "</DlqPolicy>"
        return (
            200,
            "",
            _doc(
                "Queue",
                f"<QueueName>{escape(name)}</QueueName>"
                f"<VisibilityTimeout>{queue.visibility_timeout}</VisibilityTimeout>"
                f"<PollingWaitSeconds>{queue.polling_wait}</PollingWaitSeconds>"
                f"<ActiveMessages>{len(queue.live) - queue.in_flight}</ActiveMessages>"
                f"<InactiveMessages>{queue.in_flight}</InactiveMessages>{dlq}",
            ),
        )

    def _send(self, name: str, body: bytes) -> tuple[int, str, str]:
        root = ElementTree.fromstring(body)
        batch = _local(root.tag) == "Messages"
        out = []
        for element in list(root) if batch else [root]:
            f = _fields(element)
            delay = int(f.get("DelaySeconds") or 0)
            message_id = self.send(name, f.get("MessageBody", ""), delay)
            md5 = hashlib.md5(f.get("MessageBody", "").encode()).hexdigest().upper()
            out.append(f"<Message><MessageId>{message_id}</MessageId><MessageBodyMD5>{md5}</MessageBodyMD5></Message>")
        if batch:
            return 201, "", _doc("Messages", "".join(out))
        return 201, "", _doc("Message", out[0][len("<Message>") : -len("</Message>")])

    def _receive(self, name: str, query: dict[str, str]) -> tuple[int, str, str]:
        queue = self.queues[name]
        wait = int(query.get("waitseconds", queue.polling_wait))
        batch = "numofmessages" in query
        count = min(int(query.get("numofmessages", 1)), 16)
        deadline = time.time() + min(max(wait, 0), 30)
        with self._cond:
            while True:
                now = time.time()
                ready = [m for m in queue.live if m.visible_at <= now][:count]
                if ready or now >= deadline or self._stopping:
                    break
                upcoming = [m.visible_at for m in queue.live if m.visible_at > now]
                self._cond.wait(min([deadline - now, *(t - now for t in upcoming)]) + 0.001)
            for m in ready:
                m.dequeue_count += 1
                m.first_dequeue_ms = m.first_dequeue_ms or _ms()
                m.visible_at = now + queue.visibility_timeout
                m.handle = _handle()
            self._cond.notify_all()
        if not ready:
            return 404, "MessageNotExist", _error("MessageNotExist", self.endpoint)
        rendered = [_render(m) for m in ready]
        if batch:
            return 200, "", _doc("Messages", "".join(f"<Message>{r}</Message>" for r in rendered))
        return 200, "", _doc("Message", rendered[0])

    def _change(self, name: str, query: dict[str, str]) -> tuple[int, str, str]:
        seconds = int(query.get("visibilitytimeout", "-1"))
        if not 1 <= seconds <= 43200:
            return 400, "InvalidArgument", _error("InvalidArgument", self.endpoint)
        with self._cond:
            message = self.queues[name].handles().get(query.get("receipthandle", ""))
            if message is None or message.visible_at <= time.time():
                return 400, "ReceiptHandleError", _error("ReceiptHandleError", self.endpoint)
            message.visible_at = time.time() + seconds
            message.handle = _handle()
            self._cond.notify_all()
            body = (
                f"<ReceiptHandle>{message.handle}</ReceiptHandle>"
                f"<NextVisibleTime>{int(message.visible_at * 1000)}</NextVisibleTime>"
            )
        return 200, "", _doc("ChangeVisibility", body)

    def _delete(self, name: str, query: dict[str, str]) -> tuple[int, str, str]:
        with self._cond:
            message = self.queues[name].handles().get(query.get("receipthandle", ""))
            if message is None:
                return 400, "ReceiptHandleError", _error("ReceiptHandleError", self.endpoint)
            message.deleted = True
            self._cond.notify_all()
        return 204, "", ""


class MnsClient:
    """A small synchronous client for tests (sending, mostly), signing like the documentation says."""

    def __init__(self, server: MnsServer):
        self.server = server

    def call(self, method: str, resource: str, body: str = "") -> tuple[int, str]:
        data = body.encode()
        headers = {"x-mns-version": VERSION, "Date": email.utils.formatdate(usegmt=True)}
        if data:
            headers["Content-Type"] = "text/xml;charset=utf-8"
            headers["Content-MD5"] = base64.b64encode(hashlib.md5(data).digest()).decode()
        if self.server.security_token:
            headers["security-token"] = self.server.security_token
        headers["Authorization"] = (
            f"MNS {self.server.access_key_id}:{sign(self.server.secret, method, headers, resource)}"
        )
        request = urllib.request.Request(
            self.server.endpoint + resource, data=data or None, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=40) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def send_message(self, queue: str, body: str, base64_encode: bool = False) -> str:
        text = base64.b64encode(body.encode()).decode() if base64_encode else body
        status, reply = self.call(
            "POST",
            f"/queues/{queue}/messages",
            f'<?xml version="1.0" encoding="UTF-8"?><Message xmlns="{NS}">'
            f"<MessageBody>{escape(text)}</MessageBody><Priority>8</Priority></Message>",
        )
        assert status == 201, (status, reply)
        return _fields(ElementTree.fromstring(reply))["MessageId"]


# ---- helpers -----------------------------------------------------------------------------------
def _ms() -> int:
    return int(time.time() * 1000)


def _handle() -> str:
    return "1-" + base64.b64encode(os.urandom(31)).decode()  # '+', '/' and a trailing '='


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _fields(element: ElementTree.Element) -> dict[str, str]:
    return {_local(c.tag): c.text or "" for c in element}


def _query(raw: str) -> dict[str, str]:
    out = {}
    for pair in raw.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            out[unquote(key).lower()] = unquote(value)  # '+' is not a space here
    return out


def _operation(method: str, target: str) -> str:
    path = urlsplit(target).path.strip("/").split("/")
    if len(path) <= 2:
        return "attributes" if method == "GET" else "queue"
    return {"GET": "receive", "POST": "send", "PUT": "change", "DELETE": "delete"}.get(method, "?")


def _render(m: StoredMessage) -> str:
    md5 = hashlib.md5(m.body.encode()).hexdigest().upper()
    return (
        f"<MessageId>{m.id}</MessageId><ReceiptHandle>{m.handle}</ReceiptHandle>"
        f"<MessageBodyMD5>{md5}</MessageBodyMD5><MessageBody>{escape(m.body)}</MessageBody>"
        f"<EnqueueTime>{m.enqueued_ms}</EnqueueTime><NextVisibleTime>{int(m.visible_at * 1000)}</NextVisibleTime>"
        f"<FirstDequeueTime>{m.first_dequeue_ms}</FirstDequeueTime><DequeueCount>{m.dequeue_count}</DequeueCount>"
        f"<Priority>{m.priority}</Priority>"
    )


def _doc(root: str, inner: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{NS}">{inner}</{root}>'


def _error(code: str, host: str) -> str:
    return _doc(
        "Error",
        f"<Code>{code}</Code><Message>{code}</Message>"
        f"<RequestId>{uuid.uuid4().hex[:24].upper()}</RequestId><HostId>{host}</HostId>",
    )


def _handler(server: MnsServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items()}
            seen = Seen(self.command, self.path, list(self.headers.items()))
            with server._cond:
                server.requests.append(seen)
            try:
                status, code, text = server.handle(self.command, self.path, headers, body)
            except (ElementTree.ParseError, ValueError, KeyError) as exc:
                status, code, text = 400, "InvalidArgument", _error(f"InvalidArgument: {type(exc).__name__}", "")
            seen.status, seen.code = status, code
            data = text.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/xml;charset=utf-8")
                self.send_header("x-mns-request-id", uuid.uuid4().hex[:24].upper())
                self.send_header("x-mns-version", VERSION)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True

        do_GET = do_PUT = do_POST = do_DELETE = _serve  # noqa: N815

    return Handler


def notification_json(
    message: str, topic: str = "ros-topic", publish_ms: int | None = None, owner: str = "1234567890"
) -> str:
    """An MNS topic notification in its JSON format (what a queue subscription receives)."""
    return json.dumps(
        {
            "TopicOwner": owner,
            "TopicName": topic,
            "Subscriber": "1234567890",
            "SubscriptionName": "cfn-provider",
            "MessageId": uuid.uuid4().hex.upper(),
            "MessageMD5": hashlib.md5(message.encode()).hexdigest().upper(),
            "Message": message,
            "PublishTime": str(publish_ms or _ms()),
        }
    )


def notification_xml(
    message: str, topic: str = "ros-topic", publish_ms: int | None = None, owner: str = "1234567890"
) -> str:
    """The same in the XML format."""
    fields = {
        "TopicOwner": owner,
        "TopicName": topic,
        "Subscriber": "1234567890",
        "SubscriptionName": "cfn-provider",
        "MessageId": uuid.uuid4().hex.upper(),
        "MessageMD5": hashlib.md5(message.encode()).hexdigest().upper(),
        "Message": message,
        "PublishTime": str(publish_ms or _ms()),
    }
    inner = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields.items())
    return f'<?xml version="1.0" encoding="utf-8"?><Notification xmlns="{NS}">{inner}</Notification>'


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)

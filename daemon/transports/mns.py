"""An MNS queue (Alibaba Cloud Simple Message Queue, formerly MNS) behind cfn_provider.transports.queue.Queue.

A small client of MNS's REST API (2015-06-06) on the daemon's own aiohttp, not the official
`aliyun-mns-sdk`. Both were measured against tests/support/mns_server.py (bench/mns_transport.py):

                  msg/s    CPU ms/msg   op during a long poll     cancelled long poll runs on
    this client   233-288  0.37-0.45    median 6 ms, max 13 ms    0 s
    SDK, pool     302-305  0.48         median 10 ms, max 99 ms   9 s (its thread cannot stop)
    SDK, shared   276-281  0.59-0.67    median 2.4 s, max 5.6 s   9 s
(drain 600-1000 messages in batches of 16 with a delete each; 20 visibility changes and deletes
while a 5 s long poll is out; a 10 s long poll cancelled after 1 s. Throughput is the local
server's, the same for all; "shared" is the SDK's documented one Account/Queue object.)

What decided it (aliyun-mns-sdk 1.3.0, read in full):
- one `http.client` connection per client, so not thread-safe: in a thread pool every thread
  needs its own client, and a delete or visibility change queues behind a 30 s long poll on a
  shared one;
- a long poll running in a thread cannot be cancelled: stopping waits for it (up to 30 s) or
  abandons the thread with its messages hidden;
- its HTTPS connection sets no socket timeout (a dead peer hangs a thread for ever), and it
  re-sends a request on BadStatusLine without knowing whether the first one was applied;
- it needs `deprecated` and `pycryptodome` (16 MB installed, never imported); this client
  needs nothing the daemon does not already have.
Its signing, URL forms (receipt handles sent unencoded) and XML were followed and checked.

Semantics: long poll (waitseconds up to 30), batch receive up to 16; a visibility change
returns a new receipt handle, which replaces `message.receipt` (deletes always use the latest);
an empty long poll is HTTP 404 MessageNotExist. MNS sets visibility per queue, not per receive,
so when the queue's VisibilityTimeout differs from the daemon's, each received message gets the
daemon's at once (set the queue's to the same value to save those calls). Credentials come from
ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET (/ _SECURITY_TOKEN), else the credentials file, else the
aliyun CLI's config; the secret is never logged (cfn_provider.logs redacts it too).
"""

from __future__ import annotations

import asyncio
import base64
import configparser
import datetime as dt
import email.utils
import functools
import hashlib
import hmac
import json
import os
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

from .. import logs
from ..errors import TransportConfigError, TransportError
from .queue import Message

API_VERSION = "2015-06-06"
MAX_BATCH, MAX_WAIT = 16, 30
VISIBILITY_RANGE = (1, 43200)
_HANDLE_SAFE = "+/="  # receipt handles go into URLs as the SDK sends them (base64 alphabet unencoded)


class MnsError(TransportError):
    """MNS answered a call with an error (its HTTP status and error code)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"MNS HTTP {status} {code}: {message}"[:300])
        self.status, self.code = status, code


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    access_key_secret: str = field(repr=False)
    security_token: str = field(default="", repr=False)
    source: str = ""


def load_credentials(environ: Mapping[str, str] = os.environ, home: Path | None = None) -> Credentials:
    """The environment, else ~/.alibabacloud/credentials (or $ALIBABA_CLOUD_CREDENTIALS_FILE),
    else the aliyun CLI's ~/.aliyun/config.json; an AccessKey pair, optionally with an STS token."""
    home = home or Path.home()
    key, secret = environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID"), environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
    if key and secret:
        return _known(Credentials(key, secret, environ.get("ALIBABA_CLOUD_SECURITY_TOKEN", ""), "environment"))
    profile = environ.get("ALIBABA_CLOUD_PROFILE", "default")
    ini = Path(environ.get("ALIBABA_CLOUD_CREDENTIALS_FILE") or home / ".alibabacloud" / "credentials")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(ini, encoding="utf-8")
    except configparser.Error as exc:
        raise TransportConfigError(f"{ini}: unreadable credentials file ({type(exc).__name__})") from None
    if parser.has_section(profile) and parser[profile].get("access_key_secret"):
        section = parser[profile]
        return _known(
            Credentials(
                section.get("access_key_id", ""),
                section["access_key_secret"],
                section.get("sts_token", section.get("security_token", "")),
                str(ini),
            )
        )
    cli = home / ".aliyun" / "config.json"
    try:
        doc = json.loads(cli.read_text(encoding="utf-8"))
        entry = next(p for p in doc.get("profiles", []) if p.get("name") == doc.get("current", "default"))
        if entry.get("access_key_secret"):
            return _known(
                Credentials(
                    entry.get("access_key_id", ""), entry["access_key_secret"], entry.get("sts_token", ""), str(cli)
                )
            )
    except (OSError, ValueError, StopIteration, AttributeError):
        pass
    raise TransportConfigError(
        "no Alibaba Cloud credentials for MNS: set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET, "
        f"or give an access_key profile in {ini}"
    )


def _known(credentials: Credentials) -> Credentials:
    if not credentials.access_key_id:
        raise TransportConfigError(f"{credentials.source}: AccessKey secret without an AccessKey id")
    for secret in (credentials.access_key_secret, credentials.security_token):
        logs.register_secret(secret)
    return credentials


def string_to_sign(method: str, headers: Mapping[str, str], resource: str) -> str:
    """VERB, Content-MD5, Content-Type, Date, the x-mns-* headers (lower-cased, sorted), resource."""
    lower = {k.lower(): v for k, v in headers.items()}
    mns = "".join(f"{k}:{lower[k]}\n" for k in sorted(lower) if k.startswith("x-mns-"))
    return "\n".join(
        [method, lower.get("content-md5", ""), lower.get("content-type", ""), lower.get("date", ""), mns + resource]
    )


def signature(secret: str, method: str, headers: Mapping[str, str], resource: str) -> str:
    digest = hmac.new(secret.encode("utf-8"), string_to_sign(method, headers, resource).encode("utf-8"), hashlib.sha1)
    return base64.b64encode(digest.digest()).decode("ascii")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _fields(element: ElementTree.Element) -> dict[str, str]:
    return {_local(child.tag): (child.text or "") for child in element}


def _xml(text: str) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise MnsError(0, "BadResponse", f"MNS answered with unparseable XML ({exc})") from None


def parse_messages(text: str) -> list[Message]:
    """A ReceiveMessage (<Message>) or BatchReceiveMessage (<Messages>) body."""
    root = _xml(text)
    elements = [root] if _local(root.tag) == "Message" else [e for e in root if _local(e.tag) == "Message"]
    messages = []
    for element in elements:
        f = _fields(element)
        enqueued = int(f.get("EnqueueTime") or 0) / 1000 or dt.datetime.now(dt.UTC).timestamp()
        messages.append(
            Message(
                id=f["MessageId"],
                body=f.get("MessageBody", ""),
                receipt=f["ReceiptHandle"],
                sent_at=dt.datetime.fromtimestamp(enqueued, dt.UTC),
                receive_count=int(f.get("DequeueCount") or 1),
            )
        )
    return messages


class MnsQueue:
    """cfn_provider.transports.queue.Queue over MNS's REST API."""

    max_batch = max_delete_batch = MAX_BATCH

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        queue: str,
        credentials: Credentials,
        connect_timeout: float = 10,
        read_timeout: float = 30,
        allow_http: bool = False,
    ):
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
            raise TransportConfigError(
                f"--mns-endpoint {endpoint!r} is not like https://ACCOUNT.mns.REGION.aliyuncs.com"
            )
        if parts.scheme == "http" and not allow_http:  # the signature and STS token would cross the network in clear
            raise TransportConfigError(plain_http_refused(endpoint))
        if not queue or any(c in queue for c in "/?#& %"):
            raise TransportConfigError(f"--mns-queue {queue!r} is not a queue name")
        self.session, self.credentials, self.name = session, credentials, queue
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.url = f"{self.base}/queues/{queue}"
        self.connect_timeout, self.read_timeout, self.allow_http = connect_timeout, read_timeout, allow_http
        self.queue_visibility: int | None = None  # the queue's VisibilityTimeout, once read
        self._changing: dict[int, asyncio.Task[None]] = {}  # id(message) -> its visibility change in flight

    @classmethod
    async def open(
        cls, endpoint: str, queue: str, credentials: Credentials, exit_stack: AsyncExitStack, allow_http: bool = False
    ) -> MnsQueue:
        cls(None, endpoint, queue, credentials, allow_http=allow_http)  # type: ignore[arg-type]  # refuse before connecting
        session = await exit_stack.enter_async_context(aiohttp.ClientSession())
        return cls(session, endpoint, queue, credentials, allow_http=allow_http)

    # ------------------------------------------------------------------ the Queue protocol
    async def receive(self, max_messages: int, wait_seconds: int, visibility_timeout: int) -> list[Message]:
        count, wait = min(max(max_messages, 1), MAX_BATCH), min(max(wait_seconds, 0), MAX_WAIT)
        status, text = await self._call(
            "GET",
            f"/queues/{self.name}/messages?numOfMessages={count}&waitseconds={wait}",
            read_timeout=wait + self.read_timeout,
        )
        if status == 404 and _error(text)[0] == "MessageNotExist":
            return []
        _check(status, text)
        messages = parse_messages(text)
        if messages and self.queue_visibility != visibility_timeout:
            await asyncio.gather(
                *(self.set_visibility(m, visibility_timeout) for m in messages), return_exceptions=True
            )  # a miss is only an earlier redelivery
        return messages

    async def delete(self, message: Message) -> None:
        await self._settled(message)
        status, text = await self._call("DELETE", f"/queues/{self.name}/messages?ReceiptHandle={_q(message.receipt)}")
        _check(status, text)

    async def delete_batch(self, messages: list[Message]) -> dict[int, str]:
        """One DELETE per message, side by side: each must wait for its own visibility change
        still in flight (its new receipt handle), and MNS's calls are cheap raw aiohttp requests."""
        results = await asyncio.gather(*(self.delete(m) for m in messages), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
        return {i: f"{type(r).__name__}: {r}" for i, r in enumerate(results) if isinstance(r, Exception)}

    async def set_visibility(self, message: Message, seconds: int) -> None:
        """Change it and keep the new receipt handle, even if the caller is cancelled meanwhile."""
        await self._settled(message)
        task = asyncio.ensure_future(self._change(message, min(max(seconds, VISIBILITY_RANGE[0]), VISIBILITY_RANGE[1])))
        self._changing[id(message)] = task
        task.add_done_callback(functools.partial(self._forget, id(message)))
        await asyncio.shield(task)

    async def has_dead_letter_queue(self) -> bool | None:
        """From the queue's attributes (DlqPolicy); None when they cannot be read."""
        try:
            status, text = await self._call("GET", f"/queues/{self.name}")
            _check(status, text)
            root = _xml(text)
        except (TimeoutError, MnsError, aiohttp.ClientError, OSError):
            return None
        attrs = _fields(root)
        if attrs.get("VisibilityTimeout", "").isdigit():
            self.queue_visibility = int(attrs["VisibilityTimeout"])
        policy = next((e for e in root if _local(e.tag) == "DlqPolicy"), None)
        return policy is not None and _fields(policy).get("Enabled", "").lower() == "true"

    async def dead_letter_queue(self) -> MnsQueue | None:
        """The queue its enabled DlqPolicy names (DeadLetterTargetQueue), on this session; None when
        none is enabled. Raises when the attributes cannot be read (for cfn_provider.intake.dead_letters)."""
        status, text = await self._call("GET", f"/queues/{self.name}")
        _check(status, text)
        policy = next((e for e in _xml(text) if _local(e.tag) == "DlqPolicy"), None)
        fields = _fields(policy) if policy is not None else {}
        target = (
            fields.get("DeadLetterTargetQueue", "").rstrip("/").rpartition("/")[2]
        )  # a name, or an ARN ending in it
        if fields.get("Enabled", "").lower() != "true" or not target:
            return None
        return MnsQueue(
            self.session,
            self.base,
            target,
            self.credentials,
            self.connect_timeout,
            self.read_timeout,
            allow_http=self.allow_http,
        )  # the same endpoint, so the same decision

    # ------------------------------------------------------------------ internals
    async def _change(self, message: Message, seconds: int) -> None:
        resource = f"/queues/{self.name}/messages?receiptHandle={_q(message.receipt)}&visibilityTimeout={seconds}"
        status, text = await self._call("PUT", resource)
        _check(status, text)
        message.receipt = _fields(_xml(text))["ReceiptHandle"]

    async def _settled(self, message: Message) -> None:
        """Let a visibility change still in flight land first: its new handle is the one to use."""
        pending = self._changing.get(id(message))
        if pending is not None:
            await asyncio.wait({pending})

    def _forget(self, key: int, task: asyncio.Task[None]) -> None:
        if self._changing.get(key) is task:
            del self._changing[key]
        if not task.cancelled():
            task.exception()  # retrieved: whoever awaited it has seen it already

    async def _call(self, method: str, resource: str, read_timeout: float | None = None) -> tuple[int, str]:
        creds = self.credentials
        headers = {"x-mns-version": API_VERSION, "Date": email.utils.formatdate(usegmt=True)}
        if creds.security_token:
            headers["security-token"] = creds.security_token
        headers["Authorization"] = (
            f"MNS {creds.access_key_id}:{signature(creds.access_key_secret, method, headers, resource)}"
        )
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout, sock_read=read_timeout or self.read_timeout
        )
        async with self.session.request(
            method,
            URL(self.base + resource, encoded=True),
            headers=headers,
            timeout=timeout,
            allow_redirects=False,
            skip_auto_headers=("Content-Type",),
        ) as resp:  # it is signed: none sent
            return resp.status, await resp.text(encoding="utf-8", errors="replace")


def _q(receipt: str) -> str:
    return quote(receipt, safe=_HANDLE_SAFE)


def _error(text: str) -> tuple[str, str]:
    try:
        f = _fields(ElementTree.fromstring(text))
    except ElementTree.ParseError:
        return "", text[:200]
    return f.get("Code", ""), f.get("Message", "")


def _check(status: int, text: str) -> None:
    if not 200 <= status < 300:
        raise MnsError(status, *_error(text))


def plain_http_refused(endpoint: str) -> str:
    """The error for an http:// MNS endpoint without --mns-allow-http."""
    return (
        f"--mns-endpoint {endpoint!r} is plain http: every MNS request carries the AccessKey id, a "
        "replayable signature and any STS security token in clear. Use https://ACCOUNT.mns.REGION.aliyuncs.com, "
        "or pass --mns-allow-http (CFN_PROVIDER_MNS_ALLOW_HTTP=1) for a local emulator."
    )

"""The loopback listener where `lambda:` functions answer: whatever they PUT to their ResponseURL.

Every call gets a ResponseURL of its own, `https://127.0.0.1:PORT/response?token=TOKEN`, with 256
random bits in the query (so the daemon's log redaction takes it out of every line, as it does a
presigned signature). It is valid for that call only: the first body PUT (or POSTed, ROS-style)
there is the function's answer, whatever sent it (AWS's cfnresponse or a renamed copy, crhelper,
urllib, requests); a second one is logged (`lambda.second_send`) and dropped, and after the call
ended the URL answers 403 as an expired presigned URL does (`lambda.late_send`). The real
ResponseURL never leaves the daemon: the daemon validates what was captured and delivers it
through its own responder (store, 4096-byte guard, NoEcho, retries).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..logs import get_logger
from .tls import LOOPBACK, LoopbackTls

MAX_BODY = 1024 * 1024  # a body this large is refused as an answer (CloudFormation takes 4096 bytes)
_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)

log = get_logger("lambda")


@dataclass(frozen=True)
class Answer:
    """What a function sent, as CloudFormation would read it from S3."""

    status: Any
    reason: Any = None
    physical_id: Any = None
    data: Any = None
    no_echo: bool = False
    problem: str | None = None  # the body could not be read as an answer: FAILED saying so


@dataclass
class Capture:
    """One call's ResponseURL: holds its first answer."""

    url: str
    ids: dict[str, str]
    answer: Answer | None = None
    closed: bool = False
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    on_answer: Callable[[Answer], None] | None = None  # called as the answer is taken, before anything else runs


def parse(body: bytes) -> Answer:
    """A PUT body as an Answer (a body that is not a JSON object is an answer too: FAILED, saying so)."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Answer(status=None, problem="the function's response body is not JSON")
    if not isinstance(doc, dict):
        return Answer(
            status=None, problem=f"the function's response body is a JSON {type(doc).__name__}, not an object"
        )
    return Answer(
        status=doc.get("Status"),
        reason=doc.get("Reason"),
        physical_id=doc.get("PhysicalResourceId"),
        data=doc.get("Data"),
        no_echo=doc.get("NoEcho") is True or doc.get("NoEcho") == "true",
    )


class Answers:
    """The listener: `open` a ResponseURL for a call, `close` it when the call ends."""

    def __init__(self, tls: LoopbackTls):
        self.tls = tls
        self._open: dict[str, Capture] = {}
        self._closed: dict[str, dict[str, str]] = {}  # recently ended calls, to name them in late_send
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, 0, ssl_context=self.tls.context)
        await site.start()
        server = getattr(site, "_server", None)
        self.port = server.sockets[0].getsockname()[1] if server is not None and server.sockets else 0

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open(self, ids: dict[str, str]) -> Capture:
        token = secrets.token_urlsafe(32)
        capture = Capture(f"https://{LOOPBACK}:{self.port}/response?token={token}", ids)
        self._open[token] = capture
        return capture

    def close(self, capture: Capture) -> None:
        capture.closed = True
        token = capture.url.rpartition("token=")[2]
        if self._open.pop(token, None) is not None:
            self._closed[token] = capture.ids
            while len(self._closed) > 1000:
                self._closed.pop(next(iter(self._closed)))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("PUT", "POST"):
            return web.Response(status=405)
        token = request.query.get("token", "")
        capture = self._open.get(token)
        if capture is None:
            ended = self._closed.get(token)
            if ended is not None:
                log.warning(
                    "lambda.late_send", **ended, detail="sent after the call ended; the request was already answered"
                )
            return web.Response(status=403, body=_DENIED, content_type="application/xml")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            answer = Answer(
                status=None,
                problem=f"the function's response body is over {MAX_BODY} bytes; CloudFormation accepts at most 4096",
            )
        else:
            answer = parse(body)
        self.capture(capture, answer)
        return web.Response(status=200)

    @staticmethod
    def capture(capture: Capture, answer: Answer) -> None:
        if capture.answer is not None:
            log.warning(
                "lambda.second_send",
                status=str(answer.status)[:40],
                kept=str(capture.answer.status)[:40],
                **capture.ids,
                detail="the function sent a second answer; the first is kept",
            )
            return
        capture.answer = answer
        if capture.on_answer is not None:
            capture.on_answer(answer)
        capture.arrived.set()
        log.info("lambda.sent", status=str(answer.status)[:40], **capture.ids)

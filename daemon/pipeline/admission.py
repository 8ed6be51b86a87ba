"""Admission: whether a queue message is a request this daemon may act on, the same checks
wherever a message comes from (the queue, the dead-letter watcher, `cfn-provider answer --from-dlq`).

    unwrap (SNS envelope) -> raw delivery only without verification -> TopicArn allowlist
        -> SNS signature -> parse (the transport's dialect) -> ResponseURL allowlist

A message that fails is `Rejected` (`security` when it may be forged, `transient` when a signing
certificate could not be fetched and it is worth looking at again).
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import structlog

from ..dialects.base import CLOUDFORMATION, Dialect
from ..dialects.ros import ResponseUrlChoice
from ..transports.queue import Message
from ..trust.signature import CertificateUnavailable, SignatureError, SignatureVerifier
from ..trust.urls import ResponseUrlPolicy, UrlRejected, redact
from .envelope import BadMessage, Envelope, unwrap
from .request import NotARequest, Request, parse

log = structlog.get_logger("worker")
CERT_RETRY_MAX = 30.0  # seconds, at most, between tries to fetch an SNS signing certificate
MAX_SERVICE_TIMEOUT = 3600  # no request in a message older than this can still be answered in time


class Rejected(Exception):
    def __init__(self, reason: str, security: bool = False, transient: bool = False):
        super().__init__(reason)
        self.security, self.transient = security, transient


class Admission:
    """The checks, with the daemon's settings: `verifier` None when signatures are not verified,
    `topic_arns` empty for any topic; `stopping()` says whether to give up on a certificate now."""

    def __init__(self, *, url_policy: ResponseUrlPolicy, verifier: SignatureVerifier | None,
                 topic_arns: tuple[str, ...] = (), dialect: Dialect = CLOUDFORMATION,
                 url_choice: ResponseUrlChoice = ResponseUrlChoice(), stopping: Callable[[], bool] = lambda: False):
        self.url_policy, self.verifier, self.topic_arns = url_policy, verifier, topic_arns
        self.dialect, self.url_choice, self.stopping = dialect, url_choice, stopping

    async def admit(self, message: Message) -> tuple[Envelope, Request]:
        try:
            envelope = unwrap(message.body, message.id, message.sent_at)
        except BadMessage as exc:
            raise Rejected(str(exc)) from None
        if envelope.raw and self.verifier is not None:
            raise Rejected("raw message delivery carries no signature; it is accepted only with "
                           "--no-verify-signatures (turn raw delivery off on the subscription)", security=True)
        if not envelope.raw:
            # The allowlist first: a message from another topic never makes the daemon fetch anything.
            if self.topic_arns and envelope.topic_arn not in self.topic_arns:
                raise Rejected(f"TopicArn {envelope.topic_arn!r} is not in the allowlist", security=True)
            if self.verifier is not None:
                await self._verify(message, envelope)
        try:
            request = parse(envelope.message, self.dialect)
        except NotARequest as exc:
            structlog.contextvars.bind_contextvars(dialect=exc.dialect.name)
            raise Rejected(str(exc)) from None
        structlog.contextvars.bind_contextvars(dialect=request.dialect.name)
        for url in self.url_choice.urls(request):
            try:
                self.url_policy.check(url, request.dialect.response_hosts)
            except UrlRejected as exc:
                raise Rejected(f"ResponseURL {redact(url)!r} rejected: {exc}", security=True) from None
        return envelope, request

    async def _verify(self, message: Message, envelope: Envelope) -> None:
        """Verify the signature. A certificate that cannot be fetched right now is retried here,
        with backoff, while the heartbeat keeps the message hidden (no receive is spent on it),
        until the message is too old for any request in it to be answered in time."""
        assert self.verifier is not None
        give_up = envelope.timestamp.timestamp() + MAX_SERVICE_TIMEOUT
        pause = 1.0
        while True:
            try:
                await self.verifier.verify(envelope.document)
                return
            except SignatureError as exc:
                raise Rejected(f"SNS signature rejected: {exc}", security=True) from None
            except CertificateUnavailable as exc:
                if pause == 1.0:
                    log.warning("deferred", reason=f"SNS signing certificate unavailable, will retry: {exc}",
                                receive_count=message.receive_count)
                if self.stopping() or time.time() + pause > give_up:
                    raise Rejected(f"SNS signing certificate unavailable, will retry: {exc}", transient=True) from None
            await asyncio.sleep(pause)
            pause = min(CERT_RETRY_MAX, pause * 2)

"""Admission: whether a message is a request this daemon may act on, the same checks wherever a
message comes from (the queue, the dead-letter watcher, `cfn-provider answer --from-dlq`; the web
listener's body goes through `admit_request`, the part after the envelope).

    unwrap (the transport's forms) -> raw delivery only without verification -> bare MNS messages
        only when allowed -> TopicArn allowlist -> SNS signature -> parse (the transport's dialect)
        -> ResponseURL allowlist -> the principal (the tenant whose topic it came through: cfn_provider.trust.tenants)

A message that fails is not admitted (cfn_provider.errors): `Rejected` (bad input), `Forged` (it
may be forged: logged as a `security` event) or `Deferred` (a signing certificate could not be
fetched: worth looking at again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from ..dialects.base import CLOUDFORMATION, Dialect
from ..dialects.ros import DEFAULT_URL_CHOICE, ResponseUrlChoice
from ..errors import Deferred, Forged, NotAdmitted, Rejected
from ..logs import get_logger
from ..transports.queue import Message
from ..trust.signature import CertificateUnavailable, SignatureError, SignatureVerifier
from ..trust.tenants import DEFAULT, Tenants
from ..trust.urls import ResponseUrlPolicy, UrlRejected, redact
from .envelope import SNS_FORMS, BadMessage, Envelope, unwrap
from .request import NotARequest, Request, parse

log = get_logger("worker")
CERT_RETRY_MAX = 30.0  # seconds, at most, between tries to fetch an SNS signing certificate
MAX_SERVICE_TIMEOUT = 3600  # no request in a message older than this can still be answered in time
BARE_REFUSED = (
    "a bare MNS message names no topic: with --mns-topic set, only notifications of those topics are "
    "served (--mns-allow-bare-messages also serves requests sent straight to the queue)"
)

__all__ = ["Admission", "Deferred", "Forged", "NotAdmitted", "Rejected"]  # the outcomes, importable from here too


class Admission:
    """The checks, with the daemon's settings: `verifier` None when signatures are not verified,
    `topic_arns` empty for any topic (SNS TopicArns; on MNS cfn_provider.trust.topics' form),
    `forms` the message forms the transport carries (cfn_provider.pipeline.envelope),
    `bare_messages` whether an MNS message that is not a topic notification is served;
    `stopping()` says whether to give up on a certificate now."""

    def __init__(
        self,
        *,
        url_policy: ResponseUrlPolicy,
        verifier: SignatureVerifier | None,
        topic_arns: tuple[str, ...] = (),
        dialect: Dialect = CLOUDFORMATION,
        url_choice: ResponseUrlChoice = DEFAULT_URL_CHOICE,
        forms: str = SNS_FORMS,
        bare_messages: bool = True,
        stopping: Callable[[], bool] = lambda: False,
        tenants: Tenants | None = None,
    ):
        self.url_policy, self.verifier, self.topic_arns = url_policy, verifier, topic_arns
        self.dialect, self.url_choice, self.stopping = dialect, url_choice, stopping
        self.forms, self.bare_messages = forms, bare_messages
        self.tenants = tenants or Tenants()

    async def admit(self, message: Message) -> tuple[Envelope, Request]:
        """The message's envelope and request; NotAdmitted (Rejected, Forged, Deferred) saying why not."""
        try:
            envelope = unwrap(message.body, message.id, message.sent_at, self.forms)
        except BadMessage as exc:
            raise Rejected(str(exc)) from None
        topic = envelope.topic_arn
        if topic is None:  # raw delivery, or a bare MNS message
            if self.verifier is not None:
                raise Forged(
                    "raw message delivery carries no signature; it is accepted only with "
                    "--no-verify-signatures (turn raw delivery off on the subscription)"
                )
            if not self.bare_messages:
                raise Forged(BARE_REFUSED)
        else:
            # The allowlist first: a message from another topic never makes the daemon fetch anything.
            if self.topic_arns and topic not in self.topic_arns:
                raise Forged(f"TopicArn {topic!r} is not in the allowlist")
            if self.verifier is not None and not self._verified_now(envelope):
                await self._verify(message, envelope)
        return envelope, self.admit_request(envelope.message, self.tenants.of_topic(topic))

    def admit_request(self, text: str, principal: str = DEFAULT) -> Request:
        """The request in `text` from `principal` (who sent it, as its transport proved: never a
        field of `text`), parsed under the transport's dialect and its ResponseURLs checked;
        Rejected (not a request) or Forged (a ResponseURL outside the allowlist) saying why not."""
        try:
            request = parse(text, self.dialect, principal)
        except NotARequest as exc:
            raise Rejected(str(exc)) from None
        if request.ignored:  # another dialect's fields: they change nothing, but say they were there
            structlog.contextvars.bind_contextvars(ignored_fields=list(request.ignored))
        for url in self.url_choice.urls(request):
            try:
                self.url_policy.check(url, request.dialect.response_hosts)
            except UrlRejected as exc:
                raise Forged(f"ResponseURL {redact(url)!r} rejected: {exc}") from None
        return request

    def _verified_now(self, envelope: Envelope) -> bool:
        """Whether the signature is verified without a wait (its certificate cached: the usual
        message); Forged when it is rejected, False when the certificate must be fetched."""
        assert self.verifier is not None
        try:
            return self.verifier.verify_cached(envelope.document)
        except SignatureError as exc:
            raise Forged(f"SNS signature rejected: {exc}") from None

    async def _verify(self, message: Message, envelope: Envelope) -> None:
        """Verify the signature. A certificate that cannot be fetched right now is retried here,
        with backoff, while the heartbeat keeps the message hidden (no receive is spent on it),
        until the message is too old for any request in it to be answered in time."""
        assert self.verifier is not None
        pause = 1.0
        while True:
            try:
                await self.verifier.verify(envelope.document)
                return
            except SignatureError as exc:
                raise Forged(f"SNS signature rejected: {exc}") from None
            except CertificateUnavailable as exc:
                if pause == 1.0:
                    log.warning(
                        "deferred",
                        reason=f"SNS signing certificate unavailable, will retry: {exc}",
                        receive_count=message.receive_count,
                    )
                give_up = envelope.timestamp.timestamp() + MAX_SERVICE_TIMEOUT
                if self.stopping() or time.time() + pause > give_up:
                    raise Deferred(f"SNS signing certificate unavailable, will retry: {exc}") from None
            await asyncio.sleep(pause)
            pause = min(CERT_RETRY_MAX, pause * 2)

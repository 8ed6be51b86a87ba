"""One message through the pipeline:

    unwrap -> verify -> parse -> check URL -> claim -> route -> run handler -> build response
           -> record -> PUT -> mark sent

`process` returns what should happen to the queue message; the poller carries it out.
Every message ends in exactly one log line: `request` for a request that was handled,
`rejected` / `security` for one that was not. Every line carries the request's dialect
(`cloudformation` or `ros`: detected per message, the transport's default until it is known).
"""
from __future__ import annotations

import asyncio
import contextvars
import enum
import hashlib
import json
import time
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from . import response as responses
from ..trust import retention
from ..dialects.base import CLOUDFORMATION, Dialect
from .envelope import BadMessage, Envelope, unwrap
from .heartbeat import Heartbeat
from ..ops.metrics import Metrics
from ..transports.queue import Message
from .request import NotARequest, Request, idempotency_key, parse
from .responder import Responder
from .retries import first_try_then
from ..dialects.ros import ResponseUrlChoice
from .router import HandlerError, Router
from .runner import Context, HandlerTimeout, call
from ..trust.signature import CertificateUnavailable, SignatureError, SignatureVerifier
from ..stores.base import CLAIMED, Record, Store, new_token, transient
from ..trust.urls import ResponseUrlPolicy, UrlRejected, redact

log = structlog.get_logger("worker")
T = TypeVar("T")
HANDOFF_MARGIN = 60.0  # on shutdown, a request with less time left than this is answered FAILED, not handed off
STORE_RETRY_MAX = 10.0  # seconds, at most, between tries of a store call that failed transiently
WAIT_POLL_MAX = 10.0  # seconds, at most, between looks at a request another attempt holds
CERT_RETRY_MAX = 30.0  # seconds, at most, between tries to fetch an SNS signing certificate
MAX_SERVICE_TIMEOUT = 3600  # no request in a message older than this can still be answered in time


_DEAD_LETTER: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("dead_letter", default=None)
"""(dead-letter queue name, message id) while answer_dead_letter runs a message through the main path."""


def _gave_marker(record: Record | None, request: Request) -> bool:
    """Whether `record` (a Create's) holds the FAILED answer that gave `request` its timed-out marker."""
    if record is None or record.status != "FAILED" or not record.body:
        return False
    try:
        doc = json.loads(record.body)
    except ValueError:
        return False
    return (isinstance(doc, dict) and doc.get("PhysicalResourceId") == request.physical_id
            and doc.get("LogicalResourceId") == request.logical_id and doc.get("StackId") == request.stack_id)


class Disposition(enum.Enum):
    DELETE = "delete"  # done with it
    LEAVE = "leave"  # let it come back after its visibility timeout
    DEFER = "defer"  # hide it for a while (Heartbeat.defer_seconds), then look again
    RELEASE = "release"  # make it visible again now, for another worker
    REJECT = "reject"  # bad input: leave for the dead-letter queue, or delete when there is none


class _Rejected(Exception):
    def __init__(self, reason: str, security: bool = False, transient: bool = False):
        super().__init__(reason)
        self.security, self.transient = security, transient


class StoreHealth:
    """Whether the store answers, said once when that changes ("store.unreachable", "store.back"),
    not once per message or per retry. A blip (a failure the next try gets past, as when an
    answer was lost) is no outage: the store is called unreachable after OUTAGE_FAILURES failures
    in a row (across all calls) spanning OUTAGE_SECONDS."""

    OUTAGE_FAILURES, OUTAGE_SECONDS = 3, 1.0

    def __init__(self) -> None:
        self.down_since: float | None = None  # logged as unreachable since
        self.failing_since: float | None = None
        self.failures = 0  # in a row

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now
        if (self.down_since is None and self.failures >= self.OUTAGE_FAILURES
                and now - self.failing_since >= self.OUTAGE_SECONDS):
            self.down_since = self.failing_since
            log.warning("store.unreachable", error=f"{type(exc).__name__}: {exc}"[:300],
                        detail="store calls are retried with backoff; their messages stay hidden meanwhile")

    def ok(self) -> None:
        if self.down_since is not None:
            log.warning("store.back", down_seconds=round(time.monotonic() - self.down_since, 1),
                        failed_calls=self.failures)
        self.down_since = self.failing_since = None
        self.failures = 0


@dataclass(frozen=True)
class Policy:
    verify_signatures: bool = True
    topic_arns: tuple[str, ...] = ()  # empty: any topic
    lease_seconds: int = 60


def response_margin(service_timeout: int) -> float:
    """Time kept back from the handler to build and send the answer before the deadline."""
    return min(30.0, max(1.0, service_timeout * 0.1))


class Worker:
    def __init__(self, *, router: Router, store: Store, responder: Responder, url_policy: ResponseUrlPolicy,
                 verifier: SignatureVerifier | None, policy: Policy, executor: Executor, owner: str,
                 session: Any = None, metrics: Metrics | None = None, dialect: Dialect = CLOUDFORMATION,
                 url_choice: ResponseUrlChoice = ResponseUrlChoice()):
        self.router, self.store, self.responder = router, store, responder
        self.dialect, self.url_choice = dialect, url_choice  # the transport's default dialect; ROS URL choice
        self.url_policy, self.verifier, self.policy = url_policy, verifier, policy
        self.executor, self.owner, self.session = executor, owner, session
        self.metrics = metrics or Metrics()
        self.stopping = False  # set by the poller when the grace period is over
        self.store_health = StoreHealth()
        self._draining = asyncio.Event()  # set by drain(): the daemon stopped receiving
        self._logged_bad: OrderedDict[str, None] = OrderedDict()
        self._orphans: dict[str, asyncio.Future] = {}  # timed-out Create's marker -> its handler, still running

    def drain(self) -> None:
        """The daemon stops receiving: copies waiting for another attempt are handed back at once
        (hidden for the time left on the lease they wait for) rather than at the grace period's end."""
        self._draining.set()

    # ------------------------------------------------------------------ entry point
    async def process(self, message: Message, heartbeat: Heartbeat) -> Disposition:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(message_id=message.id, dialect=self.dialect.name)
        started = time.monotonic()
        try:
            envelope, request = await self._admit(message)
        except _Rejected as exc:
            return self._rejected(message, exc)
        structlog.contextvars.bind_contextvars(
            request_id=request.request_id, stack=request.stack_name, logical_id=request.logical_id,
            resource_type=request.resource_type, request_type=request.request_type,
        )
        outcome: dict[str, Any] = {}
        try:
            disposition = await self._handle(envelope, request, heartbeat, outcome)
        except Exception as exc:
            if not (self.stopping and transient(exc)):
                raise
            outcome.update(outcome="store-unreachable")  # stopping while the store is down: hand it back
            heartbeat.defer(STORE_RETRY_MAX)
            disposition = Disposition.DEFER
        except asyncio.CancelledError:
            outcome.setdefault("outcome", "interrupted")
            raise
        finally:
            log.info("request", duration_ms=round((time.monotonic() - started) * 1000),
                     response_url=redact(request.response_url), **outcome)
            self.metrics.request_done(request.request_type, outcome.get("outcome", "?"), outcome.get("status"))
        return disposition

    # ------------------------------------------------------------------ admission
    async def _admit(self, message: Message) -> tuple[Envelope, Request]:
        try:
            envelope = unwrap(message.body, message.id, message.sent_at)
        except BadMessage as exc:
            raise _Rejected(str(exc)) from None
        if envelope.raw and self.verifier is not None:
            raise _Rejected("raw message delivery carries no signature; it is accepted only with "
                            "--no-verify-signatures (turn raw delivery off on the subscription)", security=True)
        if not envelope.raw:
            # The allowlist first: a message from another topic never makes the daemon fetch anything.
            if self.policy.topic_arns and envelope.topic_arn not in self.policy.topic_arns:
                raise _Rejected(f"TopicArn {envelope.topic_arn!r} is not in the allowlist", security=True)
            if self.verifier is not None:
                await self._verify(message, envelope)
        try:
            request = parse(envelope.message, self.dialect)
        except NotARequest as exc:
            structlog.contextvars.bind_contextvars(dialect=exc.dialect.name)
            raise _Rejected(str(exc)) from None
        structlog.contextvars.bind_contextvars(dialect=request.dialect.name)
        for url in self.url_choice.urls(request):
            try:
                self.url_policy.check(url, request.dialect.response_hosts)
            except UrlRejected as exc:
                raise _Rejected(f"ResponseURL {redact(url)!r} rejected: {exc}", security=True) from None
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
                raise _Rejected(f"SNS signature rejected: {exc}", security=True) from None
            except CertificateUnavailable as exc:
                if pause == 1.0:
                    log.warning("deferred", reason=f"SNS signing certificate unavailable, will retry: {exc}",
                                receive_count=message.receive_count)
                if self.stopping or time.time() + pause > give_up:
                    raise _Rejected(f"SNS signing certificate unavailable, will retry: {exc}", transient=True) from None
            await asyncio.sleep(pause)
            pause = min(CERT_RETRY_MAX, pause * 2)

    def _rejected(self, message: Message, exc: _Rejected) -> Disposition:
        if exc.transient:  # already logged ("deferred") when it first failed
            return Disposition.DEFER
        self.metrics.message_rejected("security" if exc.security else "rejected")
        first = message.id not in self._logged_bad
        if first:
            self._logged_bad[message.id] = None
            if len(self._logged_bad) > 10_000:
                self._logged_bad.popitem(last=False)
        level = ("warning" if exc.security else "error") if first else "debug"
        getattr(log, level)("security" if exc.security else "rejected", reason=str(exc),
                            message_id=message.id, receive_count=message.receive_count)
        return Disposition.REJECT

    # ------------------------------------------------------------------ idempotent handling
    async def _handle(self, envelope: Envelope, request: Request, heartbeat: Heartbeat,
                      outcome: dict[str, Any]) -> Disposition:
        digest = hashlib.sha256(request.response_url.encode()).hexdigest()
        key, lease = request.key, self.policy.lease_seconds
        token = new_token()  # this attempt: every retry of its writes carries it (daemon/stores/sqlite.py)
        while True:
            claim, cut_off = await self._settle(
                self._store(lambda: self.store.claim(key, self.owner, digest, lease, token=token)))
            if cut_off:  # stopping: take nothing new on
                if claim.acquired:
                    await self._settle(self._store(lambda: self.store.release(key, token)))
                outcome.update(outcome="released")
                return Disposition.RELEASE
            if claim.acquired:
                break
            record = claim.record
            if record is None:  # refused, then gone before it could be read (an endpoint without ALL_OLD)
                await asyncio.sleep(0.05)
                continue
            if record.answered(digest):
                outcome.update(outcome="duplicate", status=record.status)
                return Disposition.DELETE
            if self._must_wait(record, digest):
                # Another attempt holds it: wait here, the message kept hidden by its heartbeat,
                # instead of handing it back to the queue (every receive counts toward the DLQ).
                outcome.setdefault("waited_for", record.owner)
                try:
                    if await self._wait_out(record):
                        continue
                except asyncio.CancelledError:
                    if not self.stopping:
                        raise
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                outcome.update(outcome="in-progress-elsewhere", owner=record.owner)
                heartbeat.defer(max(1.0, (record.lease_until or 0) - time.time()))
                return Disposition.DEFER
            # A stored answer not yet delivered here: re-send it, never re-run the handler.
            replay_deadline = envelope.timestamp.timestamp() + request.service_timeout
            if retention.past_window(record.scrub_at, time.time()):  # its NoEcho Data is gone
                return await self._replay_scrubbed(request, record, digest, outcome, replay_deadline)
            outcome.update(outcome="replayed", status=record.status)
            return await self._deliver(request, record.body or b"", digest, outcome, replay_deadline, token=None)

        if claim.record is not None:
            outcome["took_over_from"] = claim.record.owner
        heartbeat.also(lambda: self._extend(key, token))
        deadline = envelope.timestamp.timestamp() + request.service_timeout
        try:
            answer = await self._answer(request, deadline)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            if deadline - time.time() >= HANDOFF_MARGIN:
                await self._settle(self._store(lambda: self.store.release(key, token)))
                outcome.update(outcome="released")
                return Disposition.RELEASE
            answer = responses.cut_short(request, "provider shutting down before the handler finished")
        outcome.update(outcome="answered", status=answer.status, physical_id=answer.physical_id)
        if not answer.ok:
            outcome["reason"] = answer.reason
        saved, cut_off = await self._settle(
            self._store(lambda: self.store.save_response(key, token, answer.status, answer.body)))
        if cut_off and saved:  # stopping: the stored body is re-sent by whoever takes it next
            outcome.update(delivered=False)
            await self._end_lease(request, token)
            return Disposition.RELEASE
        if not saved:
            outcome.update(outcome="lost-claim")
            log.error("store.lost_claim", detail="another worker took this request over; not sending")
            return Disposition.LEAVE
        return await self._deliver(request, answer.body, digest, outcome, deadline, token=token)

    async def _replay_scrubbed(self, request: Request, record: Any, digest: str, outcome: dict[str, Any],
                               deadline: float) -> Disposition:
        """The stored SUCCESS held NoEcho Data and the replay window is over (cfn_provider.trust.retention):
        CloudFormation no longer waits for this request. Never re-run the handler (a second
        Create makes a second resource); answer FAILED with the stored id, in case it does."""
        await asyncio.shield(self._store(lambda: self.store.scrub(request.key)))  # if nobody has yet
        window = round(retention.NOECHO_REPLAY_WINDOW)
        answer = responses.failure(
            request, f"the stored answer held NoEcho Data, which the provider keeps for {window} s only; this "
                     "request came back after that, when CloudFormation should no longer be waiting for it. "
                     "Retry the stack operation.", retention.physical_id(record.body))
        log.warning("replay.scrubbed", detail="NoEcho answer past the replay window: answering FAILED, not re-running")
        outcome.update(outcome="replayed-scrubbed", status=answer.status)
        return await self._deliver(request, answer.body, digest, outcome, deadline, token=None)

    @staticmethod
    def _must_wait(record: Record, digest: str) -> bool:
        """Whether a claim that was refused must wait for the attempt holding the request: it is
        running the handler, or delivering an answer to this URL (re-sending it would answer
        twice), or holds a FAILED that this URL is to re-run once it is let go. A stored SUCCESS
        for another URL is re-sent at once, whoever holds it."""
        if record.state == CLAIMED:
            return True  # held (or, by a clock that runs ahead of ours, only just let go)
        return record.leased(time.time()) and (record.url_digest == digest or record.status == "FAILED")

    async def _wait_out(self, record: Record) -> bool:
        """Until the attempt holding `record` lets go of it or its lease runs out (True): look
        again at the record now and then (early if the holder finishes), never later than its
        lease ends. False when the daemon starts draining meanwhile."""
        pause = 0.25
        while True:
            remaining = (record.lease_until or 0) - time.time()
            try:
                await asyncio.wait_for(self._draining.wait(), min(max(remaining, 0.05), pause))
                return False
            except asyncio.TimeoutError:
                pass
            pause = min(WAIT_POLL_MAX, pause * 2)
            now = await self._store(lambda: self.store.get(record.key))
            if (now is None or now.token != record.token or now.state != record.state
                    or not now.leased(time.time())):
                return True
            record = now

    async def _store(self, call: Callable[[], Awaitable[T]]) -> T:
        """A store call, tried again (the same call: the same token) while it fails with a
        connection error, a timeout or throttling: the store recognises a try that was applied
        although its answer was lost. Backs off up to STORE_RETRY_MAX between tries, while the
        message stays hidden (the heartbeat); an outage is logged once, by `store_health`; once
        the daemon is stopping, the next failure is raised."""
        def failed(state: RetryCallState) -> None:
            if state.outcome is not None and state.outcome.exception() is not None:
                self.store_health.failed(state.outcome.exception())  # type: ignore[arg-type]

        result = await first_try_then(call, lambda: AsyncRetrying(  # tenacity only after a failure
            retry=retry_if_exception(transient), wait=wait_random_exponential(multiplier=0.2, max=STORE_RETRY_MAX),
            stop=lambda _: self.stopping, before_sleep=failed, reraise=True,
        ))
        self.store_health.ok()
        return result

    async def _extend(self, key: str, token: str) -> None:
        """The heartbeat's lease extension; a store outage is said once (store_health), not per beat."""
        try:
            await self.store.extend(key, token, self.policy.lease_seconds)
        except Exception as exc:
            if not transient(exc):
                raise
            self.store_health.failed(exc)
            return
        self.store_health.ok()

    async def _settle(self, aw: Awaitable[T]) -> tuple[T, bool]:
        """Await a store write to its end even if the grace period's cancel lands meanwhile (a write
        whose outcome is unknown is worse than a late one); say whether that cancel came."""
        task = asyncio.ensure_future(aw)
        try:
            return await asyncio.shield(task), False
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return await task, True

    async def _end_lease(self, request: Request, token: str | None) -> None:
        """Stop holding a stored answer we could not deliver (no-op when we never held it)."""
        if token is not None:
            await self._settle(self._store(lambda: self.store.extend(request.key, token, 0)))

    async def _answer(self, request: Request, deadline: float) -> responses.Response:
        """Decide the answer: from the request alone where possible, else from the handler.
        (A dead-lettered request is answered FAILED without the handler: see answer_dead_letter.)"""
        if request.problems:
            return responses.failure(request, "invalid request: " + "; ".join(request.problems))
        if request.request_type == "Delete" and (
            not request.physical_id or responses.is_failed_create_marker(request.physical_id)
        ):
            return responses.success(request, None)  # nothing of ours was created: nothing to delete
        dead_letter = _DEAD_LETTER.get()
        if dead_letter is not None:
            return self._dead_letter_answer(request, dead_letter)
        if request.request_type == "Delete" and responses.is_timed_out_marker(request.physical_id):
            return await self._after_timed_out_create(request, deadline)
        return await self._run_handler(request, deadline)

    async def _run_handler(self, request: Request, deadline: float, wait_for: asyncio.Future | None = None
                           ) -> responses.Response:
        route = self.router.route(request.resource_type)
        if route is None:
            return responses.failure(request, f"no handler for {request.resource_type}")
        try:
            handler = route.handler()
        except HandlerError as exc:
            return responses.failure(request, str(exc))
        budget = deadline - time.time() - response_margin(request.service_timeout)
        if wait_for is not None and not wait_for.done():  # the timed-out Create still runs here
            log.info("timed_out_create.waiting", detail="the Create's handler is still running; waiting for it "
                     "before calling delete", up_to_seconds=round(max(0.0, budget / 2), 1))
            await asyncio.wait({wait_for}, timeout=max(0.0, budget / 2))
            budget = deadline - time.time() - response_margin(request.service_timeout)
        context = Context(request, time.monotonic() + budget, self.session)
        started = time.monotonic()
        try:
            result = await call(handler, request, context, self.executor)
        except HandlerTimeout as exc:
            answer = responses.cut_short(request, str(exc))
            if exc.orphan is not None and responses.is_timed_out_marker(answer.physical_id):
                self._track_orphan(answer.physical_id, exc.orphan)
            return answer
        except Exception as exc:  # noqa: BLE001 - a raising handler is a FAILED answer
            log.warning("handler.raised", error=type(exc).__name__, exc_info=True)
            return responses.failure(request, str(exc) or type(exc).__name__)
        finally:
            self.metrics.handler_ran(request.resource_type, request.request_type, time.monotonic() - started)
        return responses.success(request, result)

    # ------------------------------------------------------------------ a Create cut short
    def _track_orphan(self, marker: str, orphan: asyncio.Future) -> None:
        """Remember a timed-out Create's handler still running here, for its rollback Delete."""
        self._orphans[marker] = orphan
        orphan.add_done_callback(lambda _: self._orphans.pop(marker, None))

    async def _after_timed_out_create(self, request: Request, deadline: float) -> responses.Response:
        """The rollback Delete of a Create that was cut short: give the handler's `delete` its chance
        to remove what the Create may have made after its answer, with the Create's properties.

        The marker is attacker-chosen text on a Delete, so `delete` is called only when it is one
        this provider gave: it matches this Delete's stack, logical id, type and properties, and the
        store holds that Create's FAILED answer carrying exactly this marker. Anything else is
        answered SUCCESS without the handler (as for the failed-Create marker). A `delete` that
        fails (or times out) here is logged and answered SUCCESS too: the Create most likely made
        nothing, and the stack's rollback must not be stuck on it."""
        create_id = responses.timed_out_create(request)
        record = await self.store.get(idempotency_key(request.stack_id, create_id)) if create_id else None
        if not _gave_marker(record, request):
            log.warning("timed_out_create.unverified", physical_id=request.physical_id[:120],
                        detail="the Delete carries a timed-out-Create marker this provider did not give for this "
                               "stack, resource and properties (or its record has expired): delete is not called")
            return responses.success(request, None)
        orphan = self._orphans.get(request.physical_id)
        answer = await self._run_handler(request, deadline, wait_for=orphan)
        if not answer.ok:
            log.error("timed_out_create.cleanup_failed", reason=answer.reason,
                      detail="delete failed after a Create that was cut short; answering SUCCESS so the rollback "
                             "goes on: check for a leaked resource")
            return responses.success(request, None)
        log.info("timed_out_create.cleaned_up")
        return answer

    # ------------------------------------------------------------------ the dead-letter queue
    async def answer_dead_letter(self, message: Message, heartbeat: Heartbeat, queue_name: str) -> Disposition:
        """A message found in the dead-letter queue, through exactly the main path (admission:
        signature, topic and ResponseURL allowlists; the store's claim, replay and duplicate
        rules; record; PUT; mark sent), except that a request nobody has answered gets FAILED
        saying where to look instead of a run of its handler. A message that fails admission is
        REJECT (never answered: a forged one must not fail someone else's resource)."""
        token = _DEAD_LETTER.set((queue_name, message.id))
        try:
            return await self.process(message, heartbeat)
        finally:
            _DEAD_LETTER.reset(token)

    def _dead_letter_answer(self, request: Request, where: tuple[str, str]) -> responses.Response:
        queue_name, message_id = where
        log.error("deadletter.answered", dead_letter_queue=queue_name,
                  detail="the request ran out of receives on the queue; answering FAILED")
        return responses.cut_short(request, (
            f"The provider could not process this request: it ran out of receives and was moved to the "
            f"dead-letter queue {queue_name}. Look in the provider's log for event deadletter.answered "
            f"(message {message_id}, RequestId {request.request_id})."))

    async def _deliver(self, request: Request, body: bytes, digest: str, outcome: dict[str, Any],
                       deadline: float | None = None, *, token: str | None) -> Disposition:
        """PUT `body`; `token` is this attempt's when it stored the body, None for a replay."""
        # CloudFormation stops listening at the request's deadline, so no PUT outlives it. ROS's
        # deadline is only a lower bound (its Timeout rarely reaches the properties): the URL's
        # expiry alone bounds that delivery.
        deadline = deadline if request.dialect is CLOUDFORMATION else None
        try:
            delivery = await self.responder.send(self.url_choice.urls(request), body, request.dialect,
                                                 deadline=deadline)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            outcome["delivered"] = False
            await self._end_lease(request, token)
            return Disposition.RELEASE  # the stored body is re-sent by whoever takes it next
        outcome.update(delivered=delivery.delivered, attempts=delivery.attempts)
        if delivery.delivered:
            try:
                await self._settle(self._store(lambda: self.store.mark_sent(request.key, digest, token)))
            except Exception as exc:  # noqa: BLE001 - answered all the same: the message is done
                log.error("store.mark_sent_failed", error=f"{type(exc).__name__}: {exc}"[:300],
                          detail="answered, but the store could not record it; a redelivery may re-send it")
            return Disposition.DELETE
        await self._end_lease(request, token)  # a redelivery (new URL, or this one) may try at once
        outcome["delivery_error"] = delivery.detail
        hint = "the ResponseURL has expired or is forbidden" if delivery.expired else "the response was not accepted"
        log.error("response.undeliverable", detail=delivery.detail, hint=hint)
        return Disposition.DELETE  # nothing can reach CloudFormation through this URL any more

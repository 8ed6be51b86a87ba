"""One message through the pipeline:

    unwrap -> verify -> parse -> check URL -> claim -> route -> run handler -> build response
           -> record -> PUT -> mark sent

`process` returns what should happen to the queue message; the poller carries it out.
Every message ends in exactly one log line: `request` for a request that was handled,
`rejected` / `security` for one that was not. Every line carries the request's dialect
(`cloudformation` or `ros`): the transport's, whatever the message carries.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import structlog

from ..dead_letters.answer import DEAD_LETTER, dead_letter_answer
from ..dialects.base import CLOUDFORMATION, Dialect
from ..dialects.ros import DEFAULT_URL_CHOICE, ResponseUrlChoice
from ..errors import Deferred, Forged, NotAdmitted
from ..long_running.progress import InProgress
from ..long_running.steps import Polls, accepted
from ..ops.metrics import Metrics
from ..stores.base import CLAIMED, POLLING, Record, Store, new_token, transient, url_digest
from ..transports.queue import Message
from ..trust import retention
from ..trust.signature import SignatureVerifier
from ..trust.urls import ResponseUrlPolicy, redact
from . import raised
from . import response as responses
from .admission import Admission
from .cleanup import TimedOutCreates
from .disposition import Disposition, when_cut_short
from .envelope import SNS_FORMS, Envelope
from .heartbeat import Heartbeat
from .outlets import Outlet, ResponseUrl
from .request import Request, stored_form
from .responder import Responder
from .router import HandlerError, Router
from .runner import Context, HandlerTimeout, call, handler_budget
from .store_calls import STORE_RETRY_MAX, StoreCalls

log = structlog.get_logger("worker")
HANDOFF_MARGIN = 60.0  # on shutdown, a request with less time left than this is answered FAILED, not handed off
WAIT_POLL_MAX = 10.0  # seconds, at most, between looks at a request another attempt holds


@dataclass(frozen=True)
class Policy:
    verify_signatures: bool = True
    topic_arns: tuple[str, ...] = ()  # empty: any topic (SNS TopicArns; MNS: cfn_provider.trust.topics)
    lease_seconds: int = 60
    forms: str = SNS_FORMS  # the message forms the transport carries (cfn_provider.pipeline.envelope)
    bare_messages: bool = True  # MNS: serve messages that are not topic notifications
    wait_poll_max: float = WAIT_POLL_MAX  # seconds, at most, between looks at a request another attempt holds


class Worker:
    def __init__(
        self,
        *,
        router: Router,
        store: Store,
        responder: Responder,
        url_policy: ResponseUrlPolicy,
        verifier: SignatureVerifier | None,
        policy: Policy,
        executor: Executor,
        owner: str,
        session: Any = None,
        metrics: Metrics | None = None,
        dialect: Dialect = CLOUDFORMATION,
        url_choice: ResponseUrlChoice = DEFAULT_URL_CHOICE,
    ):
        self.router, self.store, self.responder = router, store, responder
        self.dialect, self.url_choice = dialect, url_choice  # the transport's dialect; ROS URL choice
        self.outlet: Outlet = ResponseUrl(responder, url_choice)  # where answers go unless `handle` is told
        self.url_policy, self.verifier, self.policy = url_policy, verifier, policy
        self.admission = Admission(
            url_policy=url_policy,
            verifier=verifier,
            topic_arns=policy.topic_arns,
            dialect=dialect,
            url_choice=url_choice,
            forms=policy.forms,
            bare_messages=policy.bare_messages,
            stopping=lambda: self.stopping,
        )
        self.admit_request = self.admission.admit_request  # the web listener's body: the request, admitted
        self.executor, self.owner, self.session = executor, owner, session
        self.metrics = metrics or Metrics()
        self.stopping = False  # set by the poller when the grace period is over
        self.calls = StoreCalls(store, lambda: self.stopping)
        self.timed_out = TimedOutCreates(store)
        self.polls = Polls(self)  # long-running actions: their progress stored, their steps run by the scheduler
        self._draining = asyncio.Event()  # set by drain(): the daemon stopped receiving
        self._logged_bad: OrderedDict[str, None] = OrderedDict()

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
            envelope, request = await self.admission.admit(message)
        except NotAdmitted as exc:
            return self._rejected(message, exc)
        return await self.handle(envelope, request, heartbeat, started)

    async def handle(
        self,
        envelope: Envelope,
        request: Request,
        heartbeat: Heartbeat,
        started: float,
        *,
        outlet: Outlet | None = None,
        run_here: bool = True,
    ) -> Disposition:
        """An admitted request claimed, answered, sent to `outlet` (default: its ResponseURL), logged. `run_here`
        False: once claimed it is stored for the poll scheduler to run (long_running.steps.Polls.accept)."""
        structlog.contextvars.bind_contextvars(
            request_id=request.request_id,
            stack=request.stack_name,
            logical_id=request.logical_id,
            resource_type=request.resource_type,
            request_type=request.request_type,
        )
        outcome: dict[str, Any] = {}
        try:
            disposition = await self._handle(envelope, request, heartbeat, outcome, outlet or self.outlet, run_here)
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
            log.info(
                "request",
                duration_ms=round((time.monotonic() - started) * 1000),
                response_url=redact(request.response_url),
                **outcome,
            )
            self.metrics.request_done(request.request_type, outcome.get("outcome", "?"), outcome.get("status"))
        return disposition

    # ------------------------------------------------------------------ admission (cfn_provider.pipeline.admission)
    def _rejected(self, message: Message, exc: NotAdmitted) -> Disposition:
        if isinstance(exc, Deferred):  # already logged ("deferred") when it first failed
            return Disposition.DEFER
        self.metrics.message_rejected(exc.event)  # "rejected", or "security" for a Forged one
        first = message.id not in self._logged_bad
        if first:
            self._logged_bad[message.id] = None
            if len(self._logged_bad) > 10_000:
                self._logged_bad.popitem(last=False)
        level = ("warning" if isinstance(exc, Forged) else "error") if first else "debug"
        getattr(log, level)(
            exc.event,
            reason=str(exc),
            message_id=message.id,
            receive_count=message.receive_count,
        )
        return Disposition.REJECT

    # ------------------------------------------------------------------ idempotent handling
    async def _handle(  # noqa: C901 - to split (issue 24: complexity <= 12)
        self,
        envelope: Envelope,
        request: Request,
        heartbeat: Heartbeat,
        outcome: dict[str, Any],
        outlet: Outlet,
        run_here: bool,
    ) -> Disposition:
        digest = url_digest(request.response_url)
        key, lease = request.key, self.policy.lease_seconds
        token = new_token()  # this attempt: every retry of its writes carries it (daemon/stores/sqlite.py)
        wire = stored_form(request)  # stored, with its dialect: poll steps, `cfn-provider requests` / `answer`
        request_deadline = envelope.timestamp.timestamp() + request.service_timeout
        while True:
            claim, cut_off = await self.calls.write(
                lambda: self.store.claim(key, self.owner, digest, lease, token=token, request=wire)
            )
            if cut_off:  # stopping: take nothing new on
                if claim.acquired:
                    await self.calls.write(lambda: self.store.release(key, token))
                outcome.update(outcome="released")
                return Disposition.RELEASE
            if claim.acquired:
                break
            record = claim.record
            if record is None:  # refused, then gone before it could be read (an endpoint without ALL_OLD)
                await asyncio.sleep(0.05)
                continue
            if record.answered(digest) and not outlet.caller_waits:  # a waiting caller gets the stored body
                outcome.update(outcome="duplicate", status=record.status)
                return Disposition.DELETE
            if record.state == POLLING or (not run_here and record.next_poll is not None):  # polls answer it, not us
                outcome.update(outcome="polling-elsewhere", owner=record.owner)
                return Disposition.DELETE
            if self._must_wait(record, digest, request_deadline):
                # Another attempt holds it: wait here, the message kept hidden by its heartbeat,
                # instead of handing it back to the queue (every receive counts toward the DLQ).
                # The dead-letter watcher never waits: its next pass looks again.
                outcome.setdefault("waited_for", record.owner)
                try:
                    if DEAD_LETTER.get() is None and await self._wait_out(record):
                        continue
                except asyncio.CancelledError:
                    if not self.stopping:
                        raise
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
                outcome.update(outcome="in-progress-elsewhere", owner=record.owner)
                heartbeat.defer(max(1.0, (record.lease_until or 0) - time.time()))
                return Disposition.DEFER
            # A stored answer not yet delivered here: re-send it, never re-run the handler.
            if retention.past_window(record.scrub_at, time.time()):  # its NoEcho Data is gone
                return await self._replay_scrubbed(request, record, digest, outcome, request_deadline, outlet)
            outcome.update(outcome="replayed", status=record.status)
            return await self._deliver(
                request, record.body or b"", digest, outcome, request_deadline, token=None, outlet=outlet
            )

        if claim.record is not None:
            outcome["took_over_from"] = claim.record.owner
        deadline = outlet.deadline(request, request_deadline)
        if not run_here:
            return await self.polls.accept(request, token, deadline, outcome)
        heartbeat.also(lambda: self.calls.extend(key, token, lease))
        try:
            answer = await self._answer(request, deadline)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
            if deadline - time.time() >= HANDOFF_MARGIN:
                await self.calls.write(lambda: self.store.release(key, token))
                outcome.update(outcome="released")
                return Disposition.RELEASE
            answer = responses.cut_short(request, "provider shutting down before the handler finished")
        if isinstance(answer, InProgress) and outlet.caller_waits:  # nothing polls for a waiting caller
            answer = self.polls.unwaitable(request, answer)
        if isinstance(answer, InProgress):  # stored, then polled (cfn_provider.long_running.steps)
            return await self.polls.wait(request, token, answer, deadline, outcome)
        outcome.update(outcome="answered", status=answer.status, physical_id=answer.physical_id)
        if not answer.ok:
            outcome["reason"] = answer.reason
        saved, cut_off = await self.calls.write(
            lambda: self.store.save_response(key, token, answer.status, answer.body)
        )
        if cut_off and saved:  # stopping: the stored body is re-sent by whoever takes it next
            outcome.update(delivered=False)
            await self._end_lease(request, token)
            return Disposition.RELEASE
        if not saved:
            outcome.update(outcome="lost-claim")
            log.error("store.lost_claim", detail="another worker took this request over; not sending")
            return Disposition.LEAVE
        return await self._deliver(request, answer.body, digest, outcome, deadline, token=token, outlet=outlet)

    async def _replay_scrubbed(
        self, request: Request, record: Any, digest: str, outcome: dict[str, Any], deadline: float, outlet: Outlet
    ) -> Disposition:
        """The stored SUCCESS held NoEcho Data and the replay window is over (cfn_provider.trust.retention):
        CloudFormation no longer waits for this request. Never re-run the handler (a second
        Create makes a second resource); answer FAILED with the stored id, in case it does."""
        await asyncio.shield(self.calls.call(lambda: self.store.scrub(request.key)))  # if nobody has yet
        window = round(retention.NOECHO_REPLAY_WINDOW)
        answer = responses.failure(
            request,
            f"the stored answer held NoEcho Data, which the provider keeps for {window} s only; this "
            "request came back after that, when CloudFormation should no longer be waiting for it. "
            "Retry the stack operation.",
            retention.physical_id(record.body),
        )
        log.warning("replay.scrubbed", detail="NoEcho answer past the replay window: answering FAILED, not re-running")
        outcome.update(outcome="replayed-scrubbed", status=answer.status)
        return await self._deliver(request, answer.body, digest, outcome, deadline, token=None, outlet=outlet)

    @staticmethod
    def _must_wait(record: Record, digest: str, deadline: float) -> bool:
        """Whether a claim that was refused must wait for the attempt holding the request: it is
        running the handler, or delivering an answer to this URL (re-sending it would answer
        twice), or holds a FAILED that this URL is to re-run once it is let go. A stored SUCCESS
        for another URL is re-sent at once, whoever holds it; so is a stored answer whose lease
        outlasts this copy's deadline (nothing waited for could still count: a lease written by an
        older release that parked an undeliverable answer for 30 days, for one)."""
        if record.state == CLAIMED:
            return True  # held (or, by a clock that runs ahead of ours, only just let go)
        if (record.lease_until or 0) > deadline:
            return False
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
            except TimeoutError:
                pass
            pause = min(self.policy.wait_poll_max, pause * 2)
            now = await self.calls.call(functools.partial(self.store.get, record.key))
            if now is None or now.token != record.token or now.state != record.state or not now.leased(time.time()):
                return True
            record = now

    async def _end_lease(self, request: Request, token: str | None) -> None:
        """Stop holding a stored answer we could not deliver (no-op when we never held it)."""
        if token is not None:
            await self.calls.write(lambda: self.store.extend(request.key, token, 0))

    async def _answer(self, request: Request, deadline: float) -> responses.Response | InProgress:
        """Decide the answer: from the request alone where possible, else from the handler.
        (A dead-lettered request is answered FAILED without the handler: see answer_dead_letter.)"""
        if request.problems:
            return responses.failure(request, "invalid request: " + "; ".join(request.problems))
        if request.request_type == "Delete" and (
            not request.physical_id or responses.is_failed_create_marker(request.physical_id)
        ):
            return responses.success(request, None)  # nothing of ours was created: nothing to delete
        dead_letter = DEAD_LETTER.get()
        if dead_letter is not None:
            return dead_letter_answer(request, dead_letter)
        if request.request_type == "Delete" and responses.is_timed_out_marker(request.physical_id):
            return await self.timed_out.clean_up(request, deadline, self._run_handler)
        return await self._run_handler(request, deadline)

    async def _run_handler(
        self, request: Request, deadline: float, wait_for: asyncio.Future[Any] | None = None
    ) -> responses.Response | InProgress:
        route = self.router.route(request.resource_type)
        if route is None:
            return responses.failure(request, f"no handler for {request.resource_type}")
        try:
            handler = route.handler()
        except HandlerError as exc:
            return responses.failure(request, str(exc))
        budget = handler_budget(deadline - time.time(), request.service_timeout)
        if wait_for is not None and not wait_for.done():  # the timed-out Create still runs here
            log.info(
                "timed_out_create.waiting",
                detail="the Create's handler is still running; waiting for it before calling delete",
                up_to_seconds=round(max(0.0, budget / 2), 1),
            )
            await asyncio.wait({wait_for}, timeout=max(0.0, budget / 2))
            budget = handler_budget(deadline - time.time(), request.service_timeout)
        context = Context(request, time.monotonic() + budget, self.session)
        started = time.monotonic()
        try:
            result = await call(
                handler,
                request,
                context,
                self.executor,
                on_cancel=lambda: when_cut_short(self.stopping, deadline - time.time(), HANDOFF_MARGIN),
            )
        except HandlerTimeout as exc:
            answer = responses.cut_short(request, str(exc))
            if exc.orphan is not None and responses.is_timed_out_marker(answer.physical_id):
                self.timed_out.track(answer.physical_id, exc.orphan)
            return answer
        except Exception as exc:  # noqa: BLE001 - a raising handler is a FAILED answer
            log.warning("handler.raised", error=type(exc).__name__, exc_info=True)
            return responses.failure(request, raised.reason(exc))
        finally:
            self.metrics.handler_ran(request.resource_type, request.request_type, time.monotonic() - started)
        if isinstance(result, InProgress):
            return accepted(handler, request, result)
        return responses.success(request, result)

    # ------------------------------------------------------------------ the dead-letter queue
    async def answer_dead_letter(self, message: Message, heartbeat: Heartbeat, queue_name: str) -> Disposition:
        """A message found in the dead-letter queue, through exactly the main path (admission:
        signature, topic and ResponseURL allowlists; the store's claim, replay and duplicate
        rules; record; PUT; mark sent), except that a request nobody has answered gets FAILED
        saying where to look instead of a run of its handler. A message that fails admission is
        REJECT (never answered: a forged one must not fail someone else's resource)."""
        token = DEAD_LETTER.set((queue_name, message.id))
        try:
            return await self.process(message, heartbeat)
        finally:
            DEAD_LETTER.reset(token)

    async def _deliver(
        self,
        request: Request,
        body: bytes,
        digest: str,
        outcome: dict[str, Any],
        deadline: float | None = None,
        *,
        token: str | None,
        outlet: Outlet | None = None,
    ) -> Disposition:
        """Send `body` to `outlet` (default: the ResponseURL); `token`: this attempt's when it stored it, or None."""
        # CloudFormation stops listening at the request's deadline, so no PUT outlives it. ROS's
        # deadline is only a lower bound (its Timeout rarely reaches the properties): the URL's
        # expiry alone bounds that delivery.
        deadline = deadline if request.dialect is CLOUDFORMATION else None
        try:
            delivery = await (outlet or self.outlet).send(request, body, deadline)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
            outcome["delivered"] = False
            await self._end_lease(request, token)
            return Disposition.RELEASE  # the stored body is re-sent by whoever takes it next
        outcome.update(delivered=delivery.delivered, attempts=delivery.attempts)
        if delivery.delivered:
            try:
                await self.calls.write(lambda: self.store.mark_sent(request.key, digest, token))
            except Exception as exc:  # noqa: BLE001 - answered all the same: the message is done
                log.error(
                    "store.mark_sent_failed",
                    error=f"{type(exc).__name__}: {exc}"[:300],
                    detail="answered, but the store could not record it; a redelivery may re-send it",
                )
            return Disposition.DELETE
        await self._end_lease(request, token)  # a redelivery (new URL, or this one) may try at once
        outcome["delivery_error"] = delivery.detail
        hint = "the ResponseURL has expired or is forbidden" if delivery.expired else "the response was not accepted"
        log.error("response.undeliverable", detail=delivery.detail, hint=hint)
        return Disposition.DELETE  # nothing can reach CloudFormation through this URL any more

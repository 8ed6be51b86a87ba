"""One message through the pipeline:

    unwrap -> verify -> parse -> check URL -> claim -> route -> run handler -> build response
           -> record -> PUT -> mark sent

`process` returns what should happen to the queue message; the poller carries it out.
Every message ends in exactly one log line: `request` for a request that was handled,
`rejected` / `security` for one that was not. Every line carries the request's dialect
(`cloudformation` or `ros`): the transport's, whatever the message carries.

The worker's seams are modules of their own: admission (is it a request we may serve), claim
(the idempotency store's claim, and what stands in its way), handling (the answer: the handler,
run under its deadline), delivery (store the body, send it through the request's outlet, mark
it sent) and outcome (the `request` line and its metrics).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import structlog

from ..dialects.base import CLOUDFORMATION, Dialect
from ..dialects.ros import DEFAULT_URL_CHOICE, ResponseUrlChoice
from ..errors import Deferred, Forged, NotAdmitted
from ..logs import get_logger
from ..metrics import Metrics
from ..progress import Busy, InProgress
from ..stores.base import Record, Store, new_token, transient
from ..transports.queue import Message
from ..trust import retention
from ..trust.signature import SignatureVerifier
from ..trust.tenants import Tenants
from ..trust.urls import ResponseUrlPolicy
from . import response as responses
from .admission import Admission
from .claim import Attempt, Claims
from .cleanup import TimedOutCreates
from .dead_letter import DeadLetter
from .delivery import Deliverer
from .disposition import Disposition
from .envelope import SNS_FORMS, Envelope
from .handling import HANDOFF_MARGIN, Handling
from .heartbeat import Heartbeat
from .outcome import Outcome
from .outlets import Outlet, ResponseUrl
from .poll_steps import Polls
from .request import Request
from .responder import Responder
from .router import Router
from .store_calls import STORE_RETRY_MAX, StoreCalls
from .tenancy import Tenancy

log = get_logger("worker")
WAIT_POLL_MAX = 10.0  # seconds, at most, between looks at a request another attempt holds


@dataclass(frozen=True)
class Policy:
    verify_signatures: bool = True
    topic_arns: tuple[str, ...] = ()  # empty: any topic (SNS TopicArns; MNS: cfn_provider.trust.topics)
    lease_seconds: int = 60
    forms: str = SNS_FORMS  # the message forms the transport carries (cfn_provider.pipeline.envelope)
    bare_messages: bool = True  # MNS: serve messages that are not topic notifications
    wait_poll_max: float = WAIT_POLL_MAX  # seconds, at most, between looks at a request another attempt holds
    tenants: Tenants = field(default_factory=Tenants)  # principals: their topics and handlers (trust.tenants)
    owners: bool = False  # check each stack's owner (pipeline.tenancy): the web, or tenants' topics configured


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
            tenants=policy.tenants,
        )
        self.admit_request = self.admission.admit_request  # the web listener's body: the request, admitted
        self.executor, self.owner, self.session = executor, owner, session
        self.metrics = metrics or Metrics()
        self.stopping = False  # set by the poller when the grace period is over
        self._draining = asyncio.Event()  # set by drain(): the daemon stopped receiving
        stopping = self._is_stopping  # read by each collaborator when it needs it
        self.calls = StoreCalls(store, stopping)
        self.claims = Claims(store, self.calls, owner, lambda: self.policy, self._draining, stopping)
        self.tenancy = Tenancy(self.calls, policy.owners or bool(policy.tenants.topics))  # whose stack it is
        self.handling = Handling(
            router, executor, session, self.metrics, TimedOutCreates(store), stopping, policy.tenants.allows
        )
        self.delivery = Deliverer(store, self.calls, self.outlet, stopping)
        # long-running actions: their progress stored, their steps run by the scheduler
        self.polls = Polls(store, self.calls, self.handling, self.delivery, self.metrics, dialect)
        self._logged_bad: OrderedDict[str, None] = OrderedDict()

    def _is_stopping(self) -> bool:
        return self.stopping

    def drain(self) -> None:
        """The daemon stops receiving: copies waiting for another attempt are handed back at once
        (hidden for the time left on the lease they wait for) rather than at the grace period's end."""
        self._draining.set()

    # ------------------------------------------------------------------ entry point
    async def process(
        self, message: Message, heartbeat: Heartbeat, *, dead_letter: DeadLetter | None = None
    ) -> Disposition:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(message_id=message.id, dialect=self.dialect.name)
        started = time.monotonic()
        try:
            envelope, request = await self.admission.admit(message)
            await self.tenancy.admit(request)  # its principal's stack, or Forged
        except NotAdmitted as exc:
            return self._rejected(message, exc)
        return await self.handle(envelope, request, heartbeat, started, dead_letter=dead_letter)

    async def handle(
        self,
        envelope: Envelope,
        request: Request,
        heartbeat: Heartbeat,
        started: float,
        *,
        outlet: Outlet | None = None,
        run_here: bool = True,
        dead_letter: DeadLetter | None = None,
    ) -> Disposition:
        """An admitted request claimed, answered, sent to `outlet` (default: its ResponseURL), logged. `run_here`
        False: once claimed it is stored for the poll scheduler to run (pipeline.poll_steps.Polls.accept).
        `dead_letter`: it came from the dead-letter queue (answer_dead_letter)."""
        structlog.contextvars.bind_contextvars(**request.log_context())
        deadline = envelope.timestamp.timestamp() + request.service_timeout
        attempt = Attempt(request, new_token(), deadline, outlet or self.outlet, run_here, dead_letter)
        outcome = Outcome()
        try:
            disposition = await self._handle(attempt, heartbeat, outcome)
        except Exception as exc:
            if not (self.stopping and transient(exc)):
                raise
            outcome.name = "store-unreachable"  # stopping while the store is down: hand it back
            heartbeat.defer(STORE_RETRY_MAX)
            disposition = Disposition.DEFER
        except asyncio.CancelledError:
            outcome.name = outcome.name or "interrupted"
            raise
        finally:
            outcome.log("request", request, started)
            outcome.count(self.metrics, request)
        return disposition

    # ------------------------------------------------------------------ admission (cfn_provider.pipeline.admission)
    def _rejected(self, message: Message, exc: NotAdmitted) -> Disposition:
        if isinstance(exc, Deferred):  # already logged ("deferred") when it first failed
            self.metrics.message_refused(exc.event, str(exc))
            return Disposition.DEFER
        self.metrics.message_rejected(exc.event, str(exc))  # "rejected", or "security" for a Forged one
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

    # ------------------------------------------------------------------ the claim, then what its end calls for
    async def _handle(self, attempt: Attempt, heartbeat: Heartbeat, outcome: Outcome) -> Disposition:
        claimed = await self.claims.claim(attempt, outcome)
        record = claimed.record
        if claimed.end == "acquired":
            if record is not None:
                outcome.took_over_from = record.owner
            return await self._finish(attempt, heartbeat, outcome)
        if claimed.end == "released" or record is None:  # every other end met a record
            outcome.name = "released"
            return Disposition.RELEASE
        if claimed.end == "duplicate":
            outcome.name, outcome.status = "duplicate", record.status
            return Disposition.DELETE
        if claimed.end == "polling-elsewhere":
            outcome.name, outcome.owner = "polling-elsewhere", record.owner
            return Disposition.DELETE
        if claimed.end == "wait":  # hand it back, hidden until the lease it waits for ends
            outcome.name, outcome.owner = "in-progress-elsewhere", record.owner
            heartbeat.defer(claimed.retry_in or max(1.0, (record.lease_until or 0) - time.time()))
            return Disposition.DEFER
        return await self._replay(attempt, record, outcome)

    async def _replay(self, attempt: Attempt, record: Record, outcome: Outcome) -> Disposition:
        """A stored answer not yet delivered to this URL: re-sent, never re-computed."""
        if retention.past_window(record.scrub_at, time.time()):  # its NoEcho Data is gone
            return await self._replay_scrubbed(attempt, record, outcome)
        outcome.name, outcome.status = "replayed", record.status
        return await self.delivery.send(
            attempt.request, record.body or b"", outcome, attempt.deadline, token=None, outlet=attempt.outlet
        )

    async def _replay_scrubbed(self, attempt: Attempt, record: Record, outcome: Outcome) -> Disposition:
        """The stored SUCCESS held NoEcho Data and the replay window is over (cfn_provider.trust.retention):
        CloudFormation no longer waits for this request. Never re-run the handler (a second
        Create makes a second resource); answer FAILED with the stored id, in case it does."""
        request = attempt.request
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
        outcome.name, outcome.status = "replayed-scrubbed", answer.status
        return await self.delivery.send(
            request, answer.body, outcome, attempt.deadline, token=None, outlet=attempt.outlet
        )

    # ------------------------------------------------------------------ finishing a claimed request
    async def _finish(self, attempt: Attempt, heartbeat: Heartbeat, outcome: Outcome) -> Disposition:
        """The claim is held: run the handler (or, `run_here` False, store the request for a poll step to),
        then store the answer and deliver it (cfn_provider.pipeline.delivery)."""
        request, token = attempt.request, attempt.token
        deadline = attempt.outlet.deadline(request, attempt.deadline)
        if not attempt.run_here:
            return await self.polls.accept(request, token, deadline, outcome)
        lease = self.policy.lease_seconds
        heartbeat.also(lambda: self.calls.extend(request.key, token, lease))
        answer = await self._answer(attempt, deadline)
        if answer is None:
            outcome.name = "released"
            return Disposition.RELEASE
        if isinstance(answer, Busy) and attempt.outlet.caller_waits:  # nothing ran: the caller retries
            return await self._busy(attempt, outcome)
        if isinstance(answer, InProgress) and attempt.outlet.caller_waits:  # nothing polls for a waiting caller
            answer = self.polls.unwaitable(request, answer)
        if isinstance(answer, InProgress):  # stored, then polled (cfn_provider.pipeline.poll_steps)
            return await self.polls.wait(request, token, answer, deadline, outcome)
        outcome.answered(answer)
        return await self.delivery.store_and_send(request, token, answer, outcome, deadline, attempt.outlet)

    async def _busy(self, attempt: Attempt, outcome: Outcome) -> Disposition:
        """The handler could not start (its function's every process busy) for a caller waiting on its
        connection: nothing ran, so nothing is stored: the claim is let go of (its retry runs it) and
        the request handed back (the web listener: 503 + Retry-After)."""
        await self.calls.write(lambda: self.store.release(attempt.request.key, attempt.token))
        outcome.name = "busy"
        log.info("request.busy", detail="every process of the function is busy: the caller is told to retry")
        return Disposition.RELEASE

    async def _answer(self, attempt: Attempt, deadline: float) -> responses.Response | InProgress | None:
        """The request's answer (cfn_provider.pipeline.handling). When the grace period's cancel cuts the
        handler short: None (let go of, for another worker) if there is time to hand it over, else FAILED."""
        try:
            return await self.handling.answer(attempt.request, deadline, attempt.dead_letter)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
        if deadline - time.time() >= HANDOFF_MARGIN:
            await self.calls.write(lambda: self.store.release(attempt.request.key, attempt.token))
            return None
        return responses.cut_short(attempt.request, "provider shutting down before the handler finished")

    # ------------------------------------------------------------------ the dead-letter queue
    async def answer_dead_letter(self, message: Message, heartbeat: Heartbeat, queue_name: str) -> Disposition:
        """A message found in the dead-letter queue, through exactly the main path (admission:
        signature, topic and ResponseURL allowlists; the store's claim, replay and duplicate
        rules; record; PUT; mark sent), except that a request nobody has answered gets FAILED
        saying where to look instead of a run of its handler, and a copy another attempt holds is
        not waited for. A message that fails admission is REJECT (never answered: a forged one
        must not fail someone else's resource)."""
        return await self.process(message, heartbeat, dead_letter=DeadLetter(queue_name, message.id))

"""The steps of a long-running action (the poll contract, cfn_provider.progress).

- an action returned InProgress (cfn_provider.pipeline.pollable.accepted): a handler without
  a poll function for it, or a progress that is not JSON, is answered FAILED at once, saying so.
- `Polls.wait` (the worker's side): store the progress (POLLING, with the request), so that the
  queue message is deleted and the slot freed; `create` is never called again for the request.
- `Polls.accept` (the web listener's asynchronous mode): store a claimed request whose action has
  not run yet (`PollState.started` False), due at once: the first step runs the action itself,
  on whichever fleet member takes it, so a request the listener said 200 to outlives its process.
- `Polls.step` (the scheduler's side, cfn_provider.intake.poll_scheduler): with a poll leased by
  `take_poll`, call the handler's poll function with the stored progress, then store the next
  progress, or store the answer and deliver it; FAILED "timed out" before the request's
  deadline, keeping the response margin the worker keeps. A stored answer whose daemon died
  before delivering it is delivered by the next step, never re-computed. Answers are stored and
  sent by the worker's own delivery (cfn_provider.pipeline.delivery).

The stored progress is the daemon's own JSON document (`PollState`): the handler's progress,
the PhysicalResourceId so far, the request's deadline, how many steps ran and since when.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from ..dialects.base import Dialect
from ..logs import get_logger
from ..metrics import Metrics
from ..progress import POLL_FUNCTIONS, InProgress, poll_function
from ..stores.base import RESPONSE_READY, Record, Store
from . import raised
from . import response as responses
from .cleanup import cleanup_failed
from .delivery import Deliverer
from .disposition import STEP_HANDED_BACK, Disposition
from .handling import Handling
from .outcome import Outcome
from .pollable import failed
from .request import NotARequest, Request, from_stored, stored_form
from .router import HandlerError
from .runner import Context, HandlerTimeout, call, response_margin
from .store_calls import StoreCalls

log = get_logger("polling")


@dataclass
class PollState:
    progress: Any  # the handler's, as its last InProgress gave it
    physical_id: str | None  # the PhysicalResourceId so far
    deadline: float  # epoch seconds: the request's (SNS Timestamp + ServiceTimeout)
    polls: int = 0  # poll steps run so far
    since: float = 0.0  # when the action first returned InProgress
    no_echo: bool = False  # `progress` holds NoEcho Data: scrubbed as a NoEcho body is (cfn_provider.trust.retention)
    started: bool = True  # False: the action itself has not run yet (Polls.accept): the next step runs it

    def dumps(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True, allow_nan=False)

    @classmethod
    def loads(cls, text: str) -> PollState:
        doc = json.loads(text)
        return cls(
            doc.get("progress"),
            doc.get("physical_id"),
            float(doc["deadline"]),
            int(doc.get("polls", 0)),
            float(doc.get("since", 0.0)),
            doc.get("no_echo") is True,
            bool(doc.get("started", True)),
        )


def _with_id(result: Any, physical_id: str | None) -> Any:
    """The poll's final result, carrying the id an earlier InProgress gave when it names none."""
    if physical_id is None:
        return result
    if result is None:
        return {"PhysicalResourceId": physical_id}
    if isinstance(result, Mapping) and "PhysicalResourceId" not in result:
        return {**result, "PhysicalResourceId": physical_id}
    return result


class _Step:
    """A poll function as the runner calls an action, `(event, context)`, with the progress bound."""

    def __init__(self, fn: Callable[..., Any], progress: Any, request_type: str):
        async def async_action(event: Any, context: Any) -> Any:
            return await fn(event, context, progress)

        def sync_action(event: Any, context: Any) -> Any:
            return fn(event, context, progress)

        setattr(self, request_type.lower(), async_action if inspect.iscoroutinefunction(fn) else sync_action)


class Polls:
    """Both sides of polling, on the worker's store and collaborators: `handling` runs an action or a poll
    function, `delivery` stores and sends an answer (cfn_provider.pipeline.delivery)."""

    def __init__(
        self,
        store: Store,
        calls: StoreCalls,
        handling: Handling,
        delivery: Deliverer,
        metrics: Metrics,
        dialect: Dialect,
    ) -> None:
        self.store, self.calls, self.handling, self.delivery = store, calls, handling, delivery
        self.metrics, self.dialect = metrics, dialect  # the transport's: stored requests carry their own
        self.wake: Callable[[float], None] = lambda when: None  # the scheduler's: a poll is due at `when`
        self.take_now: Callable[[str], None] = lambda key: None  # the scheduler's: run this due poll here, now

    # ------------------------------------------------------------------ the worker's side
    async def wait(
        self, request: Request, token: str, pending: InProgress, deadline: float, outcome: Outcome
    ) -> Disposition:
        now = time.time()
        state = PollState(json.loads(pending.progress_json()), pending.physical_id, deadline, 0, now, pending.no_echo)
        next_poll = min(now + pending.after, deadline - response_margin(request.service_timeout))
        if not await self._park(request, token, state, next_poll, outcome):
            return Disposition.LEAVE
        outcome.name, outcome.physical_id = "polling", pending.physical_id
        outcome.next_poll_in = round(next_poll - now, 1)
        self.metrics.poll_ran("started")
        return Disposition.DELETE  # the store holds the request now: no receive is spent while it waits

    async def accept(self, request: Request, token: str, deadline: float, outcome: Outcome) -> Disposition:
        """The claimed request stored (durably) for a step to run its action, due now: DELETE once it is."""
        now = time.time()
        if not await self._park(request, token, PollState(None, None, deadline, 0, now, started=False), now, outcome):
            return Disposition.LEAVE
        outcome.name = "accepted"
        self.take_now(request.key)
        return Disposition.DELETE

    async def _park(self, request: Request, token: str, state: PollState, next_poll: float, outcome: Outcome) -> bool:
        saved, _ = await self.calls.write(
            lambda: self.store.save_progress(request.key, token, state.dumps(), next_poll, stored_form(request))
        )
        if not saved:
            outcome.name = "lost-claim"
            log.error("store.lost_claim", detail="another worker took this request over; not polling it here")
            return False
        self.wake(next_poll)
        return True

    @staticmethod
    def unwaitable(request: Request, pending: InProgress) -> responses.Response:
        """FAILED for an action that returned InProgress to a caller waiting on its connection (web[sync])."""
        return failed(
            request,
            "the handler's action is long-running (it returned InProgress), which a caller "
            "waiting on its connection (web[sync]) cannot wait for: use the asynchronous "
            "web: ServiceToken for this resource",
            pending.physical_id,
        )

    # ------------------------------------------------------------------ the scheduler's side
    async def step(self, record: Record, token: str) -> str:
        """One step of `record`'s poll (leased to `token`); its outcome."""
        structlog.contextvars.clear_contextvars()
        try:
            request = from_stored(record.request or "", self.dialect)  # the dialect it came in with
            state = PollState.loads(record.progress or "")
        except (NotARequest, ValueError, TypeError, KeyError) as exc:
            log.error(
                "poll.unreadable",
                error=f"{type(exc).__name__}"[:100],
                detail="the stored request or progress cannot be read: it is not polled again",
            )
            await self.calls.write(lambda: self.store.park(record.key, token))  # never due again
            return "unreadable"
        structlog.contextvars.bind_contextvars(**request.log_context())
        outcome = Outcome(polls=state.polls + 1)
        started = time.monotonic()
        try:
            await self._step(request, state, record, token, outcome)
        finally:
            outcome.log(
                "request" if outcome.final else "poll", request, started, waited_s=round(time.time() - state.since, 1)
            )
            if outcome.final:
                outcome.count(self.metrics, request)
        return outcome.name or "?"

    async def _step(self, request: Request, state: PollState, record: Record, token: str, outcome: Outcome) -> None:
        if record.state == RESPONSE_READY:  # a step answered it, and its daemon died before delivering
            outcome.name, outcome.status = "replayed", record.status
            await self._deliver(request, record.body or b"", state, token, outcome)
            return
        left = state.deadline - response_margin(request.service_timeout) - time.time()
        if left <= 0:
            kind, answer = "timed-out", self._timed_out(request, state)
        else:
            result = await (self._poll(request, state, left) if state.started else self._start(request, state))
            if isinstance(result, InProgress):
                await self._again(request, state, result, token, outcome)
                return
            kind, answer = ("answered" if result.ok else "failed"), result
        if not answer.ok and request.request_type == "Delete" and responses.is_timed_out_marker(request.physical_id):
            answer = cleanup_failed(request, answer)  # the rollback of a cut-short Create: SUCCESS, the leak logged
        outcome.answered(answer)
        saved, _ = await self.delivery.store_body(request, token, answer)
        if not saved:
            outcome.name = "lost-claim"
            self.metrics.poll_ran("lost")
            return
        self.metrics.poll_ran(kind)
        await self._deliver(request, answer.body, state, token, outcome)

    @staticmethod
    def _timed_out(request: Request, state: PollState) -> responses.Response:
        """FAILED at the deadline: an action that never started, or one that never finished."""
        if not state.started:
            return responses.failure(
                request,
                f"timed out: the handler could not start before the request's deadline (its timeout is "
                f"{request.service_timeout} s); every slot was busy",
            )
        return failed(
            request,
            f"timed out: the long-running {request.request_type} did not finish within its ServiceTimeout "
            f"({request.service_timeout} s) after {state.polls} polls",
            state.physical_id,
        )

    async def _start(self, request: Request, state: PollState) -> InProgress | responses.Response:
        """Run an accepted request's action itself (Polls.accept), as the worker would have."""
        return await self.handling.answer(request, state.deadline)

    async def _poll(self, request: Request, state: PollState, budget: float) -> InProgress | responses.Response:
        """Call the handler's poll function with the stored progress: InProgress, or the answer."""
        h = self.handling
        route = h.router.route(request.resource_type)
        if route is None:
            return failed(request, f"no handler for {request.resource_type}", state.physical_id)
        try:
            handler = route.handler()
        except HandlerError as exc:
            return failed(request, str(exc), state.physical_id)
        fn = poll_function(handler, request.request_type)
        if fn is None:
            return failed(
                request,
                f"the handler has no {POLL_FUNCTIONS.get(request.request_type)} or is_complete "
                "to poll this long-running request with",
                state.physical_id,
            )
        context = Context(request, time.monotonic() + budget, h.session)
        started = time.monotonic()
        try:
            result = await call(
                _Step(fn, state.progress, request.request_type),
                request,
                context,
                h.executor,
                on_cancel=lambda: STEP_HANDED_BACK,
            )
        except HandlerTimeout as exc:
            return failed(request, str(exc), state.physical_id)
        except Exception as exc:  # noqa: BLE001 - a raising poll function is a FAILED answer
            log.warning("handler.raised", error=type(exc).__name__, exc_info=True)
            return failed(request, raised.reason(exc), state.physical_id)
        finally:
            h.metrics.handler_ran(request.resource_type, request.request_type, time.monotonic() - started)
        if isinstance(result, InProgress):
            try:
                result.progress_json()
            except ValueError as exc:
                return failed(request, str(exc), result.physical_id or state.physical_id)
            return result
        return responses.success(request, _with_id(result, state.physical_id))

    async def _again(
        self, request: Request, state: PollState, pending: InProgress, token: str, outcome: Outcome
    ) -> None:
        """Not done yet: store the new progress and when to look next (never past the deadline)."""
        now = time.time()
        state.progress, state.polls, state.started = json.loads(pending.progress_json()), state.polls + 1, True
        state.physical_id = pending.physical_id or state.physical_id
        state.no_echo = state.no_echo or pending.no_echo  # once secret, always: an earlier step's may linger
        next_poll = min(now + pending.after, state.deadline - response_margin(request.service_timeout))
        saved, _ = await self.calls.write(
            lambda: self.store.save_progress(request.key, token, state.dumps(), next_poll)
        )
        outcome.name, outcome.next_poll_in = ("waiting" if saved else "lost-claim"), round(next_poll - now, 1)
        self.metrics.poll_ran("waiting" if saved else "lost")
        if saved:
            self.wake(next_poll)

    async def _deliver(self, request: Request, body: bytes, state: PollState, token: str, outcome: Outcome) -> None:
        disposition = await self.delivery.send(request, body, outcome, state.deadline, token=token)
        if disposition is Disposition.DELETE and not outcome.delivered:  # undeliverable: stop trying
            await self.calls.write(lambda: self.store.park(request.key, token))  # out of the due polls, no lease held

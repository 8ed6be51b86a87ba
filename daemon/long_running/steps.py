"""The steps of a long-running action (the poll contract, cfn_provider.long_running.progress).

- `accepted`: an action returned InProgress; a handler without a poll function for it, or a
  progress that is not JSON, is answered FAILED at once, saying so.
- `Polls.wait` (the worker's side): store the progress (POLLING, with the request), so that the
  queue message is deleted and the slot freed; `create` is never called again for the request.
- `Polls.accept` (the web listener's asynchronous mode): store a claimed request whose action has
  not run yet (`PollState.started` False), due at once: the first step runs the action itself,
  on whichever fleet member takes it, so a request the listener said 200 to outlives its process.
- `Polls.step` (the scheduler's side, cfn_provider.long_running.scheduler): with a poll leased by
  `take_poll`, call the handler's poll function with the stored progress, then store the next
  progress, or store the answer and deliver it; FAILED "timed out" before the request's
  deadline, keeping the response margin the worker keeps. A stored answer whose daemon died
  before delivering it is delivered by the next step, never re-computed.

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

from ..pipeline import raised
from ..pipeline import response as responses
from ..pipeline.cleanup import cleanup_failed
from ..pipeline.disposition import STEP_HANDED_BACK, Disposition
from ..pipeline.request import NotARequest, Request, from_stored, stored_form
from ..pipeline.router import HandlerError
from ..pipeline.runner import Context, HandlerTimeout, call, response_margin
from ..stores.base import RESPONSE_READY, Record, url_digest
from ..trust.urls import redact
from .progress import POLL_FUNCTIONS, InProgress, poll_function

log = structlog.get_logger("polling")


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


def _failed(request: Request, reason: str, physical_id: str | None) -> responses.Response:
    """FAILED for an action that started work: with its id when known (the rollback Delete gets it),
    else a Create's timed-out marker, so the rollback Delete still reaches the handler's `delete`."""
    if physical_id and request.request_type != "Delete":
        return responses.failure(request, reason, physical_id)
    return responses.cut_short(request, reason)


def accepted(handler: Any, request: Request, pending: InProgress) -> InProgress | responses.Response:
    """`pending` if the handler can be polled for this action, else FAILED saying why."""
    if poll_function(handler, request.request_type) is None:
        name = POLL_FUNCTIONS.get(request.request_type, "poll_<action>")
        return _failed(
            request,
            f"the handler's {request.request_type.lower()} returned InProgress, but the handler "
            f"has no {name} or is_complete to poll it with",
            pending.physical_id,
        )
    try:
        pending.progress_json()
    except ValueError as exc:
        return _failed(request, str(exc), pending.physical_id)
    return pending


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
    """Both sides of polling, on the worker's store, router, executor and delivery (`worker` is the
    Worker, taken as it is: cfn_provider.pipeline.worker imports this module)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.wake: Callable[[float], None] = lambda when: None  # the scheduler's: a poll is due at `when`
        self.take_now: Callable[[str], None] = lambda key: None  # the scheduler's: run this due poll here, now

    # ------------------------------------------------------------------ the worker's side
    async def wait(
        self, request: Request, token: str, pending: InProgress, deadline: float, outcome: dict[str, Any]
    ) -> Disposition:
        now = time.time()
        state = PollState(json.loads(pending.progress_json()), pending.physical_id, deadline, 0, now, pending.no_echo)
        next_poll = min(now + pending.after, deadline - response_margin(request.service_timeout))
        if not await self._park(request, token, state, next_poll, outcome):
            return Disposition.LEAVE
        outcome.update(outcome="polling", physical_id=pending.physical_id, next_poll_in=round(next_poll - now, 1))
        self.worker.metrics.poll_ran("started")
        return Disposition.DELETE  # the store holds the request now: no receive is spent while it waits

    async def accept(self, request: Request, token: str, deadline: float, outcome: dict[str, Any]) -> Disposition:
        """The claimed request stored (durably) for a step to run its action, due now: DELETE once it is."""
        now = time.time()
        if not await self._park(request, token, PollState(None, None, deadline, 0, now, started=False), now, outcome):
            return Disposition.LEAVE
        outcome.update(outcome="accepted")
        self.take_now(request.key)
        return Disposition.DELETE

    async def _park(
        self, request: Request, token: str, state: PollState, next_poll: float, outcome: dict[str, Any]
    ) -> bool:
        w = self.worker
        saved, _ = await w.calls.write(
            lambda: w.store.save_progress(request.key, token, state.dumps(), next_poll, stored_form(request))
        )
        if not saved:
            outcome.update(outcome="lost-claim")
            log.error("store.lost_claim", detail="another worker took this request over; not polling it here")
            return False
        self.wake(next_poll)
        return True

    @staticmethod
    def unwaitable(request: Request, pending: InProgress) -> responses.Response:
        """FAILED for an action that returned InProgress to a caller waiting on its connection (web[sync])."""
        return _failed(
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
            request = from_stored(record.request or "", self.worker.dialect)  # the dialect it came in with
            state = PollState.loads(record.progress or "")
        except (NotARequest, ValueError, TypeError, KeyError) as exc:
            log.error(
                "poll.unreadable",
                error=f"{type(exc).__name__}"[:100],
                detail="the stored request or progress cannot be read: it is not polled again",
            )
            await self.worker.calls.write(lambda: self.worker.store.park(record.key, token))  # never due again
            return "unreadable"
        structlog.contextvars.bind_contextvars(
            request_id=request.request_id,
            stack=request.stack_name,
            logical_id=request.logical_id,
            resource_type=request.resource_type,
            request_type=request.request_type,
            dialect=request.dialect.name,
        )
        outcome: dict[str, Any] = {"polls": state.polls + 1}
        started = time.monotonic()
        try:
            await self._step(request, state, record, token, outcome)
        finally:
            final = outcome.get("outcome") in ("answered", "replayed")
            log.info(
                "request" if final else "poll",
                duration_ms=round((time.monotonic() - started) * 1000),
                response_url=redact(request.response_url),
                waited_s=round(time.time() - state.since, 1),
                **outcome,
            )
            if final:
                self.worker.metrics.request_done(request.request_type, outcome["outcome"], outcome.get("status"))
        return str(outcome.get("outcome", "?"))

    async def _step(
        self, request: Request, state: PollState, record: Record, token: str, outcome: dict[str, Any]
    ) -> None:
        w = self.worker
        if record.state == RESPONSE_READY:  # a step answered it, and its daemon died before delivering
            outcome.update(outcome="replayed", status=record.status)
            await self._deliver(request, record.body or b"", state, token, outcome)
            return
        left = state.deadline - response_margin(request.service_timeout) - time.time()
        if left <= 0 and not state.started:
            kind, answer = (
                "timed-out",
                responses.failure(
                    request,
                    (
                        f"timed out: the handler could not start before the request's deadline (its timeout is "
                        f"{request.service_timeout} s); every slot was busy"
                    ),
                ),
            )
        elif left <= 0:
            kind, answer = (
                "timed-out",
                _failed(
                    request,
                    (
                        f"timed out: the long-running {request.request_type} did not finish within its ServiceTimeout "
                        f"({request.service_timeout} s) after {state.polls} polls"
                    ),
                    state.physical_id,
                ),
            )
        else:
            result = await (self._poll(request, state, left) if state.started else w._answer(request, state.deadline))
            if isinstance(result, InProgress):
                await self._again(request, state, result, token, outcome)
                return
            kind, answer = ("answered" if result.ok else "failed"), result
        if not answer.ok and request.request_type == "Delete" and responses.is_timed_out_marker(request.physical_id):
            answer = cleanup_failed(request, answer)  # the rollback of a cut-short Create: SUCCESS, the leak logged
        outcome.update(outcome="answered", status=answer.status, physical_id=answer.physical_id)
        if not answer.ok:
            outcome["reason"] = answer.reason
        saved, _ = await w.calls.write(lambda: w.store.save_response(request.key, token, answer.status, answer.body))
        if not saved:
            outcome.update(outcome="lost-claim")
            w.metrics.poll_ran("lost")
            return
        w.metrics.poll_ran(kind)
        await self._deliver(request, answer.body, state, token, outcome)

    async def _poll(self, request: Request, state: PollState, budget: float) -> InProgress | responses.Response:
        """Call the handler's poll function with the stored progress: InProgress, or the answer."""
        w = self.worker
        route = w.router.route(request.resource_type)
        if route is None:
            return _failed(request, f"no handler for {request.resource_type}", state.physical_id)
        try:
            handler = route.handler()
        except HandlerError as exc:
            return _failed(request, str(exc), state.physical_id)
        fn = poll_function(handler, request.request_type)
        if fn is None:
            return _failed(
                request,
                f"the handler has no {POLL_FUNCTIONS.get(request.request_type)} or is_complete "
                "to poll this long-running request with",
                state.physical_id,
            )
        context = Context(request, time.monotonic() + budget, w.session)
        started = time.monotonic()
        try:
            result = await call(
                _Step(fn, state.progress, request.request_type),
                request,
                context,
                w.executor,
                on_cancel=lambda: STEP_HANDED_BACK,
            )
        except HandlerTimeout as exc:
            return _failed(request, str(exc), state.physical_id)
        except Exception as exc:  # noqa: BLE001 - a raising poll function is a FAILED answer
            log.warning("handler.raised", error=type(exc).__name__, exc_info=True)
            return _failed(request, raised.reason(exc), state.physical_id)
        finally:
            w.metrics.handler_ran(request.resource_type, request.request_type, time.monotonic() - started)
        if isinstance(result, InProgress):
            try:
                result.progress_json()
            except ValueError as exc:
                return _failed(request, str(exc), result.physical_id or state.physical_id)
            return result
        return responses.success(request, _with_id(result, state.physical_id))

    async def _again(
        self, request: Request, state: PollState, pending: InProgress, token: str, outcome: dict[str, Any]
    ) -> None:
        """Not done yet: store the new progress and when to look next (never past the deadline)."""
        w, now = self.worker, time.time()
        state.progress, state.polls, state.started = json.loads(pending.progress_json()), state.polls + 1, True
        state.physical_id = pending.physical_id or state.physical_id
        state.no_echo = state.no_echo or pending.no_echo  # once secret, always: an earlier step's may linger
        next_poll = min(now + pending.after, state.deadline - response_margin(request.service_timeout))
        saved, _ = await w.calls.write(lambda: w.store.save_progress(request.key, token, state.dumps(), next_poll))
        outcome.update(outcome="waiting" if saved else "lost-claim", next_poll_in=round(next_poll - now, 1))
        w.metrics.poll_ran("waiting" if saved else "lost")
        if saved:
            self.wake(next_poll)

    async def _deliver(
        self, request: Request, body: bytes, state: PollState, token: str, outcome: dict[str, Any]
    ) -> None:
        w = self.worker
        disposition = await w._deliver(
            request, body, url_digest(request.response_url), outcome, state.deadline, token=token
        )
        if disposition is Disposition.DELETE and not outcome.get("delivered"):  # undeliverable: stop trying
            await w.calls.write(lambda: w.store.park(request.key, token))  # out of the due polls, no lease held

"""Call a handler action with the request, a context, and a time limit.

Async actions run on the loop, as a task of their own; sync ones in a thread pool, with the
caller's contextvars so their log lines carry the request's ids. At the deadline the answer
(FAILED, timed out) goes out whatever the handler does: an async action is cancelled and
given a moment (CANCEL_GRACE) to unwind, a sync one cannot be killed; either way the caller
is not kept waiting for it. What is left running (an action that swallows CancelledError,
awaits a slow cleanup, or a thread still busy) is an orphan: logged when abandoned
(`handler.orphaned`, saying what becomes of its request) and again when it finally ends
(`handler.orphan_ended`), and handed to the caller (HandlerTimeout.orphan) so a rollback Delete
can wait for it. The same holds when the caller itself is cancelled (shutdown): then the caller
says what becomes of the request (`on_cancel`), since it decides that.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import structlog

from ..errors import HandlerFailure
from ..logs import get_logger
from .request import Request

log = get_logger("runner")
CANCEL_GRACE = 0.1  # seconds an async action gets to unwind its cancellation before it is abandoned
_orphans: set[asyncio.Future[Any]] = set()  # strong references: the loop keeps only weak ones to tasks


class HandlerTimeout(HandlerFailure):
    """A handler's action did not end within its deadline."""

    def __init__(self, seconds: float, orphan: asyncio.Future[Any] | None = None):
        super().__init__(f"timed out after {seconds:.0f} s")
        self.seconds = seconds
        self.orphan = orphan  # done when the abandoned action has really ended (None: it never started)


class Context:
    """The optional second argument of a handler action."""

    def __init__(self, request: Request, deadline: float, session: Any = None):
        self.request = request
        self.deadline = deadline  # time.monotonic() by which the handler must have returned
        self.log = structlog.get_logger("handler")
        self.session = session  # a shared aiobotocore session

    @property
    def principal(self) -> str:
        """Who sent the request, as its transport proved (cfn_provider.trust.tenants): per-stack state a
        handler keeps or derives belongs to it (`default`: every transport's default principal)."""
        return self.request.principal

    def remaining(self) -> float:
        """Seconds left before the daemon gives up on this handler."""
        return max(0.0, self.deadline - time.monotonic())

    def get_remaining_time_in_millis(self) -> int:  # the Lambda context's name, so ported code works
        return int(self.remaining() * 1000)


def response_margin(service_timeout: int) -> float:
    """Time kept back from the handler to build and send the answer before the deadline: a tenth of
    the ServiceTimeout, at least 1 s but never more than a quarter of it, at most 30 s
    (1 s -> 0.25 s, 5 s -> 1 s, 60 s -> 6 s, 3600 s -> 30 s)."""
    return min(30.0, max(min(1.0, service_timeout / 4), service_timeout * 0.1))


def handler_budget(left: float, service_timeout: int) -> float:
    """Seconds the handler gets when `left` seconds remain before the request's deadline: all but
    the response margin, and never less than half of what is left, so a request still inside its
    deadline always gets its handler called (0 only when the deadline has passed)."""
    if left <= 0:
        return 0.0
    return left - min(response_margin(service_timeout), left / 2)


def deadline_for(handler_seconds: float, service_timeout: int) -> float:
    """handler_budget's inverse: the seconds to leave before a deadline so that the handler gets
    `handler_seconds` of them (for an outlet that needs no response margin of its own)."""
    if handler_seconds <= 0:
        return 0.0
    margin = response_margin(service_timeout)
    return handler_seconds + margin if handler_seconds >= margin else 2 * handler_seconds


@functools.lru_cache(maxsize=256)
def _wants_context(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


async def call(
    handler: Any, request: Request, context: Context, executor: Executor, on_cancel: Callable[[], str] | None = None
) -> Any:
    """Run the action for request.request_type; raise HandlerTimeout at context.deadline.
    `on_cancel`: what becomes of the request when the caller is cancelled meanwhile (for the log)."""
    fn = getattr(handler, request.request_type.lower())
    args = (request.wire, context) if _wants_context(fn) else (request.wire,)
    budget = context.remaining()
    if budget <= 0:
        raise HandlerTimeout(0)
    run, job = _start(fn, args, executor)
    while True:
        try:
            done, _ = await asyncio.wait({run}, timeout=context.remaining())
        except asyncio.CancelledError:
            _abandon(
                run,
                _ended(run, job),
                "cancelled",
                on_cancel() if on_cancel is not None else "the daemon stopped waiting for it",
            )
            raise
        if run not in done:
            break
        value = run.result()  # whatever it raised (its own TimeoutError included) is the handler's failure
        if job is None or not inspect.isawaitable(value):
            return value
        run, job = asyncio.ensure_future(value), None  # a sync action handed back an awaitable: await it too
    run.cancel()
    ended = _ended(run, job)
    await asyncio.wait({ended}, timeout=CANCEL_GRACE)  # a well-behaved action unwinds at once
    _abandon(run, ended, "timed out", "the request is answered now (timed out)")
    raise HandlerTimeout(budget, None if ended.done() else ended)


def _start(
    fn: Callable[..., Any], args: tuple[Any, ...], executor: Executor
) -> tuple[asyncio.Future[Any], Future[Any] | None]:
    """Start the action: its result, and for a sync action its job in the thread pool (no task of
    its own: the pool's future, wrapped for the loop, is what is awaited)."""
    if inspect.iscoroutinefunction(fn):
        return asyncio.ensure_future(fn(*args)), None  # a task copies the caller's contextvars
    job = executor.submit(contextvars.copy_context().run, fn, *args)
    return asyncio.wrap_future(job), job


def _ended(run: asyncio.Future[Any], job: Future[Any] | None) -> asyncio.Future[Any]:
    """Done when the action's code has really stopped running (only built for one being abandoned):
    cancelling `run` stops a job still queued (it never runs); a running thread goes on until it returns."""
    if job is None:
        return run

    async def both() -> None:
        await asyncio.wait({asyncio.wrap_future(job), run})

    return asyncio.ensure_future(both())


def _abandon(run: asyncio.Future[Any], ended: asyncio.Future[Any], why: str, fate: str) -> None:
    """Stop waiting for the action: cancel it, keep it referenced, and log it if it is still running,
    saying what becomes of its request (`fate`)."""
    run.cancel()
    run.add_done_callback(_quiet)
    if ended.done():
        return
    started = time.monotonic()
    log.warning("handler.orphaned", why=why, detail=f"{fate}; the handler is still running and was left to finish")
    _orphans.add(ended)

    def finished(future: asyncio.Future[Any]) -> None:
        _orphans.discard(future)
        _quiet(future)
        log.warning("handler.orphan_ended", after_seconds=round(time.monotonic() - started, 1))

    ended.add_done_callback(finished)


def _quiet(future: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned future's outcome, so asyncio does not report it as never retrieved."""
    if not future.cancelled():
        future.exception()

"""Call a handler action with the request, a context, and a time limit.

Async actions run on the loop; sync ones in a thread pool, with the caller's contextvars
so their log lines carry the request's ids. A sync action that overruns cannot be killed:
the answer (FAILED, timed out) is sent anyway and the thread is left to finish.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from concurrent.futures import Executor
from typing import Any, Callable

import structlog

from .request import Request


class HandlerTimeout(Exception):
    def __init__(self, seconds: float):
        super().__init__(f"timed out after {seconds:.0f} s")
        self.seconds = seconds


class Context:
    """The optional second argument of a handler action."""

    def __init__(self, request: Request, deadline: float, session: Any = None):
        self.request = request
        self.deadline = deadline  # time.monotonic() by which the handler must have returned
        self.log = structlog.get_logger("handler")
        self.session = session  # a shared aiobotocore session

    def remaining(self) -> float:
        """Seconds left before the daemon gives up on this handler."""
        return max(0.0, self.deadline - time.monotonic())

    def get_remaining_time_in_millis(self) -> int:  # the Lambda context's name, so ported code works
        return int(self.remaining() * 1000)


@functools.lru_cache(maxsize=256)
def _wants_context(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


async def call(handler: Any, request: Request, context: Context, executor: Executor) -> Any:
    """Run the action for request.request_type; raise HandlerTimeout at context.deadline."""
    fn = getattr(handler, request.request_type.lower())
    args = (request.wire, context) if _wants_context(fn) else (request.wire,)
    budget = context.remaining()
    if budget <= 0:
        raise HandlerTimeout(0)
    limit = asyncio.timeout(budget)
    try:
        async with limit:
            if inspect.iscoroutinefunction(fn):
                return await fn(*args)
            ctx = contextvars.copy_context()
            result = await asyncio.get_running_loop().run_in_executor(executor, functools.partial(ctx.run, fn, *args))
            return await result if inspect.isawaitable(result) else result
    except TimeoutError:
        if limit.expired():
            raise HandlerTimeout(budget) from None
        raise  # the handler's own TimeoutError is its failure, not ours

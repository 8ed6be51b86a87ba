"""Retry a call with tenacity, paying for tenacity only once the first try has failed.

Building an AsyncRetrying and going through its attempt machinery costs more CPU per call than
a PUT or a store write that succeeds at once (the usual case) needs; `first_try_then` makes the
first try a plain await. Only when it raises does it build the policy (`retrying()`) and carry on
from there, exactly as tenacity would have from its first failed attempt: the same retry
predicate, stop, wait and before_sleep see attempt 1's exception, and the next try is attempt 2.
A BaseException that is not an Exception (a cancellation) is not retried: it propagates, as it
does through tenacity with the predicates this daemon uses.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, DoAttempt, DoSleep, RetryCallState

T = TypeVar("T")


async def first_try_then(call: Callable[[], Awaitable[T]], retrying: Callable[[], AsyncRetrying]) -> T:
    """`await call()`; if it raises, the policy `retrying()` takes over from attempt 1's failure."""
    started = time.monotonic()  # tenacity's start_time: its delay_since_first_attempt counts attempt 1
    try:
        return await call()
    except Exception as exc:  # noqa: BLE001 - the policy decides (reraise, retry or RetryError)
        first = exc
    policy = retrying()
    policy.begin()
    state = RetryCallState(policy, fn=None, args=(), kwargs={})
    state.start_time = started
    state.set_exception((type(first), first, first.__traceback__))
    del first
    while True:  # tenacity's own AsyncRetrying.__call__ loop, entered after its first attempt
        do = await policy.iter(retry_state=state)
        if isinstance(do, DoAttempt):
            try:
                result = await call()
            except BaseException:  # noqa: BLE001 - recorded; the policy decides
                state.set_exception(sys.exc_info())  # type: ignore[arg-type]
            else:
                state.set_result(result)
        elif isinstance(do, DoSleep):
            state.prepare_for_next_attempt()
            await policy.sleep(do)  # type: ignore[misc]
        else:
            return do  # type: ignore[no-any-return]

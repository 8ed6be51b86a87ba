"""`simulate --poll-every SECONDS`: long-running resources polled at simulate speed.

A handler that returns `InProgress(after=120)` (crhelper's default `polling_interval` is two
minutes) would make a simulated stack wait two minutes a poll. With --poll-every, simulate serves
each handler through `FastPolls`, which shortens every `after` its actions and poll functions ask
for to at most SECONDS. Nothing else changes: the handler's code, its progress and its results are
its own, and the daemon's deadline still holds. `run` never does this.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ...pipeline.router import ACTIONS
from ...progress import POLL_FUNCTIONS, InProgress

_SPED_UP = frozenset((*ACTIONS, *POLL_FUNCTIONS.values(), "is_complete"))


class FastPolls:
    """A handler whose InProgress answers ask to be polled again within `every` seconds."""

    def __init__(self, handler: Any, every: float, spec: str):
        self._handler, self._every, self._spec = handler, every, spec

    def __repr__(self) -> str:
        return self._spec

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._handler, name)
        if name in _SPED_UP and callable(value):
            return _sped_up(value, self._every)
        return value


def _shorten(result: Any, every: float) -> Any:
    if isinstance(result, InProgress) and result.after > every:
        result.after = every  # past InProgress's own 1 s floor on purpose: simulate's clock, not AWS's
    return result


def _sped_up(fn: Callable[..., Any], every: float) -> Callable[..., Any]:
    """`fn` with the same signature (the runner reads it) and kind (sync or async)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_action(*args: Any) -> Any:
            return _shorten(await fn(*args), every)

        return async_action

    @functools.wraps(fn)
    def action(*args: Any) -> Any:
        result = fn(*args)
        if inspect.isawaitable(result):  # a sync action handing back an awaitable: the runner awaits it
            return _awaited(result, every)
        return _shorten(result, every)

    return action


async def _awaited(awaitable: Any, every: float) -> Any:
    return _shorten(await awaitable, every)

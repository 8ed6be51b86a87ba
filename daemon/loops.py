"""The event loop the daemon runs on: uvloop where it is importable (CPython, not Windows), else asyncio's own.

`--event-loop auto` (the default) takes uvloop when it imports and the platform is one uvloop
supports, and falls back to asyncio's loop quietly otherwise; `uvloop` insists (an error saying
why when it cannot be had); `asyncio` never tries. The daemon's `started` log line names the loop
that is actually running (`running()`).
"""

from __future__ import annotations

import asyncio
import platform
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar, get_args

from .errors import StartupError

EventLoop = Literal["auto", "asyncio", "uvloop"]  # --event-loop (cfn_provider.config.Settings)
Running = Literal["asyncio", "uvloop"]  # what `auto` resolves to, and what runs
CHOICES: tuple[EventLoop, ...] = get_args(EventLoop)
T = TypeVar("T")


class EventLoopError(StartupError, ValueError):
    """The event loop asked for cannot be had here."""


def _uvloop() -> Any:
    """The uvloop module; EventLoopError saying why not."""
    if sys.platform == "win32":
        raise EventLoopError("uvloop does not run on Windows")
    if platform.python_implementation() != "CPython":
        raise EventLoopError(f"uvloop needs CPython, this is {platform.python_implementation()}")
    try:
        import uvloop
    except ImportError as exc:
        raise EventLoopError(
            f"uvloop is not installed ({exc}); pip install uvloop, or use --event-loop asyncio"
        ) from None
    return uvloop


def choose(name: EventLoop = "auto") -> Running:
    """The loop `name` resolves to here: "uvloop" or "asyncio"."""
    if name not in CHOICES:
        raise EventLoopError(f"unknown event loop {name!r}: one of {', '.join(CHOICES)}")
    if name == "asyncio":
        return "asyncio"
    try:
        _uvloop()
    except EventLoopError:
        if name == "uvloop":
            raise
        return "asyncio"
    return "uvloop"


def factory(name: EventLoop = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A loop factory for asyncio.Runner (None: asyncio's own loop)."""
    return _uvloop().new_event_loop if choose(name) == "uvloop" else None


def run(main: Callable[[], Coroutine[Any, Any, T]], name: EventLoop = "auto") -> T:
    """asyncio.run(main()) on the loop `name` chooses (EventLoopError before anything runs if it cannot)."""
    loop_factory = factory(name)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


def running() -> Running:
    """The name of the running loop: "uvloop" or "asyncio"."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"

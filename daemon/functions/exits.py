"""A function process's end, noticed by the process itself (never by its pipes), and its whole group killed.

asyncio's `Process.wait()` (Python 3.11) returns only when the process has exited *and* every
pipe to it is closed, so a function whose child inherited its stderr would look alive until that
child ended. `exit_of` waits on a pidfd instead (Linux 5.3+: readable once the process has
exited), reads how it ended without reaping it (`waitid(P_PIDFD, WNOWAIT)`: the event loop's
child watcher still reaps it), then waits (briefly) for the returncode the watcher records. Where
there is no pidfd it polls that returncode.

`kill_group` kills the process group the function leads (it is started in a session of its
own, so the group id is its pid): its children and theirs die with it, unless one started a
session of its own (setsid, a double-forking daemon), which no signal to the group reaches.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Protocol

POLL = 0.05  # seconds between looks at the returncode where there is no pidfd
SETTLE = 2.0  # seconds the watcher gets to record a returncode after the pidfd said the process ended


class Watched(Protocol):
    """What `exit_of` needs of asyncio.subprocess.Process."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...


def kill_group(pgid: int) -> None:
    """SIGKILL to every process of the group `pgid` (nothing when it is gone)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def exit_of(proc: Watched) -> int | None:
    """The process's returncode (negative: the signal that ended it) as soon as it has exited,
    whatever still holds its pipes open."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (an old kernel), or it is reaped already
        return await _polled(proc)
    try:
        await _readable(pidfd)
        status = _status(pidfd)
    finally:
        os.close(pidfd)
    # the event loop's child watcher reaps it and records its returncode: wait for that (it is
    # prompt), so nothing else (closing the transport polls the process) reaps it in its stead
    recorded = await _polled(proc, limit=SETTLE)
    return recorded if recorded is not None else status


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _status(pidfd: int) -> int | None:
    """How the process ended, read without reaping it; None when the child watcher reaped it first."""
    try:
        info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
    except (ChildProcessError, OSError, AttributeError):
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status  # CLD_KILLED, CLD_DUMPED: the signal's number


async def _polled(proc: Watched, limit: float | None = None) -> int | None:
    waited = 0.0
    while proc.returncode is None and (limit is None or waited < limit):
        await asyncio.sleep(POLL)
        waited += POLL
    return proc.returncode

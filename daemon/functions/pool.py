"""A function's execution environments: at most `concurrency` processes, each serving one call at a time.

Lambda's reserved concurrency is the model: one function never has more calls running than its
limit, and never takes anything from another function (each has its own pool; a call waits on
the event loop, never in a thread). A call that finds every process busy waits for one only
while fewer calls than `concurrency` are already waiting (`acquire(wait=True)`); otherwise it
gets None and the caller hands the request to the poll scheduler (cfn_provider.functions.function),
so a hung function holds at most twice its concurrency of the daemon's request slots.

A process that crashed, asked to be replaced (MemoryError) or was killed at a call's deadline is
dropped, and a fresh one is started in the background, so the next call finds one warm.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from ..logs import get_logger
from .process import FunctionProcess

log = get_logger("lambda")


class Pool:
    def __init__(self, name: str, concurrency: int, spawn: Callable[[], Awaitable[FunctionProcess]]):
        self.name, self.limit, self._spawn = name, concurrency, spawn
        self.idle: list[FunctionProcess] = []
        self.size = 0  # processes running or starting
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.everyone: set[FunctionProcess] = set()
        self.retiring: set[FunctionProcess] = set()  # dropped, being let go in the background
        self.closed = False
        self._background: set[asyncio.Task[None]] = set()

    async def acquire(self, wait: bool) -> FunctionProcess | None:
        """A process for one call (started now if none is idle and the limit allows), or None when
        all are busy and the call should not (or may no longer) wait."""
        while True:
            while self.idle:
                process = self.idle.pop()
                if process.alive:
                    return process
                self._forget(process)
            if self.closed:
                raise RuntimeError(f"the execution environments of {self.name} are closed")
            if self.size < self.limit:
                return await self._start()
            if not wait or len(self.waiters) >= self.limit:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)

    def release(self, process: FunctionProcess) -> None:
        """The call is over: the process serves the next one, or (broken, dead) is replaced."""
        if process.alive and not self.closed:
            self.idle.append(process)
        else:
            self._forget(process)
            if not process.exited.is_set():
                self.retiring.add(process)
                self._in_background(self._retire(process))
            if not self.closed and self.size == 0:
                self._in_background(self.warm())
        self._wake()

    async def warm(self) -> None:
        """Start one process if none runs (at start, and to replace one that was lost)."""
        if self.size or self.closed:
            return
        try:
            process = await self._start()
        except Exception as exc:  # noqa: BLE001 - FunctionLoadError, Exited, OSError, a timeout: said, tried again later
            log.error(
                "lambda.start_failed",
                function=self.name,
                error=f"{type(exc).__name__}: {exc}"[:500],
                detail="the next call tries again",
            )
            return
        self.release(process)

    async def close(self) -> None:
        """Every process let go and waited for: the pool's own, and those being retired (their
        background close is cancelled with the rest, so this close waits for them instead)."""
        self.closed = True
        everyone, self.idle, self.retiring = [*self.everyone, *self.retiring], [], set()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*(p.close() for p in everyone), return_exceptions=True)
        for waiter in self.waiters:
            if not waiter.done():
                waiter.cancel()

    async def _start(self) -> FunctionProcess:
        self.size += 1
        try:
            process = await self._spawn()
        except BaseException:
            self.size -= 1
            self._wake()
            raise
        self.everyone.add(process)
        return process

    async def _retire(self, process: FunctionProcess) -> None:
        try:
            await process.close()
        finally:
            self.retiring.discard(process)

    def _forget(self, process: FunctionProcess) -> None:
        if process in self.everyone:
            self.everyone.discard(process)
            self.size -= 1

    def _wake(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _in_background(self, job: Awaitable[None]) -> None:
        task = asyncio.ensure_future(job)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

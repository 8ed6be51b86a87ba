"""The daemon's side of every `lambda:` function: the loopback answer listener and one pool per function.

The service opens one for its run (`async with FunctionHost() as host`, then `warm`) and closes
it after the last request is settled: every function process is let go and, if it lingers,
killed. Code that calls a function without a service (a test, a bench) gets a host for its event
loop on first use (`FunctionHost.for_loop`), closed with `close_for_loop` or when the process exits.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Protocol

from ..logs import get_logger
from . import sandbox, tls
from .answers import Answers
from .pool import Pool
from .process import FunctionProcess
from .settings import FunctionSettings

log = get_logger("lambda")
_hosts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[FunctionHost]] = weakref.WeakKeyDictionary()


class Hosted(Protocol):
    """What the host needs of a function (cfn_provider.functions.function.LambdaFunction)."""

    name: str
    settings: FunctionSettings

    def spawn(self, host: FunctionHost) -> Awaitable[FunctionProcess]: ...


class FunctionHost:
    def __init__(self) -> None:
        self.tls: tls.LoopbackTls | None = None
        self.answers: Answers | None = None
        self.pools: dict[int, Pool] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> FunctionHost:
        self.tls = tls.make()
        sandbox.allow_read(self.tls.folder)  # the CA bundles its functions trust the listener with
        self.answers = Answers(self.tls)
        # in a context of its own: the listener's log lines never carry the ids of whoever started it
        await asyncio.get_running_loop().create_task(self.answers.start(), context=contextvars.Context())
        _hosts.setdefault(asyncio.get_running_loop(), _done(self))
        return self

    async def __aenter__(self) -> FunctionHost:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def pool(self, function: Hosted) -> Pool:
        pool = self.pools.get(id(function))
        if pool is None:
            spawn: Callable[[], Awaitable[FunctionProcess]] = lambda: function.spawn(self)  # noqa: E731
            pool = self.pools[id(function)] = Pool(function.name, function.settings.concurrency, spawn)
        return pool

    async def warm(self, functions: Iterable[Hosted], timeout: float = 120.0) -> None:
        """One warm process per function (in parallel), so the first request pays no cold start."""
        jobs = {asyncio.ensure_future(self.pool(f).warm()) for f in functions}
        if jobs:
            _, late = await asyncio.wait(jobs, timeout=timeout)
            if late:  # still importing: they go on, and the first call waits for them
                log.warning("lambda.slow_start", functions=len(late), after_seconds=timeout)

    def track(self, job: Awaitable[Any]) -> None:
        """Keep a call that goes on after its answer (it is killed at its deadline) until it ends."""
        task = asyncio.ensure_future(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Every process let go (killed if it lingers); calls still going on after their answer end with them."""
        await asyncio.gather(*(pool.close() for pool in self.pools.values()), return_exceptions=True)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
        if self.answers is not None:
            await self.answers.stop()
        if self.tls is not None:
            self.tls.close()
        loop = asyncio.get_running_loop()
        held = _hosts.get(loop)
        if (
            held is not None
            and held.done()
            and not held.cancelled()
            and held.exception() is None
            and held.result() is self
        ):
            del _hosts[loop]

    @classmethod
    async def for_loop(cls) -> FunctionHost:
        """The host of the running event loop (the service's), or one started now for it."""
        loop = asyncio.get_running_loop()
        held = _hosts.get(loop)
        if held is None:
            held = _hosts[loop] = loop.create_future()
            try:
                host = await cls().start()
            except BaseException as exc:
                del _hosts[loop]
                held.set_exception(exc)
                held.exception()  # retrieved: the caller gets it raised
                raise
            if not held.done():
                held.set_result(host)
        return await asyncio.shield(held)


def _done(host: FunctionHost) -> asyncio.Future[FunctionHost]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(host)
    return future


async def close_for_loop() -> None:
    """Close the running loop's host, if one was started (tests and benches that call functions directly)."""
    held = _hosts.get(asyncio.get_running_loop())
    if held is not None and held.done() and held.exception() is None:
        await held.result().close()

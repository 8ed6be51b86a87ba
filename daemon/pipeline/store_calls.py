"""Store calls as the worker makes them: retried with the same write token while the store
cannot be reached, awaited to their end through a shutdown's cancel, and an outage said once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from ..logs import get_logger
from ..stores.base import Store, transient
from .retries import first_try_then

log = get_logger("worker")
T = TypeVar("T")
STORE_RETRY_MAX = 10.0  # seconds, at most, between tries of a store call that failed transiently


class StoreHealth:
    """Whether the store answers, said once when that changes ("store.unreachable", "store.back"),
    not once per message or per retry. A blip (a failure the next try gets past, as when an
    answer was lost) is no outage: the store is called unreachable after OUTAGE_FAILURES failures
    in a row (across all calls) spanning OUTAGE_SECONDS, or when one call has failed that often
    over that long while others get through (a full disk fails the write that needs room, not the
    lease extension beside it). It is back once a call succeeds and no call is still retrying."""

    OUTAGE_FAILURES, OUTAGE_SECONDS = 3, 1.0

    def __init__(self) -> None:
        self.down_since: float | None = None  # logged as unreachable since
        self.failing_since: float | None = None
        self.failures = 0  # in a row
        self.retrying = 0  # calls between a failed try and their next

    def failed(self, exc: BaseException, attempts: int = 1, since: float | None = None) -> None:
        """`exc` failed a call; `attempts` tries of that call have failed since `since` (monotonic)."""
        now = time.monotonic()
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now
        in_a_row = self.failures >= self.OUTAGE_FAILURES and now - self.failing_since >= self.OUTAGE_SECONDS
        one_call = since is not None and attempts >= self.OUTAGE_FAILURES and now - since >= self.OUTAGE_SECONDS
        if self.down_since is None and (in_a_row or one_call):
            self.down_since = min(self.failing_since, since if since is not None else now)
            log.warning(
                "store.unreachable",
                error=f"{type(exc).__name__}: {exc}"[:300],
                detail="store calls are retried with backoff; their messages stay hidden meanwhile",
            )

    def ok(self) -> None:
        if self.down_since is not None and self.retrying == 0:
            log.warning(
                "store.back", down_seconds=round(time.monotonic() - self.down_since, 1), failed_calls=self.failures
            )
            self.down_since = None
        self.failing_since = None
        self.failures = 0


class StoreCalls:
    """The worker's way of calling its store. `stopping` says whether the daemon's grace period
    is over (then a failing call is raised rather than retried, and a cancel is reported)."""

    def __init__(self, store: Store, stopping: Callable[[], bool]) -> None:
        self.store, self.stopping = store, stopping
        self.health = StoreHealth()

    async def call(self, call: Callable[[], Awaitable[T]]) -> T:
        """A store call, tried again (the same call: the same token) while it fails with a
        connection error, a timeout or throttling: the store recognises a try that was applied
        although its answer was lost. Backs off up to STORE_RETRY_MAX between tries, while the
        message stays hidden (the heartbeat); an outage is logged once, by `health`; once the
        daemon is stopping, the next failure is raised."""
        first_failed: list[float] = []  # when this call first failed, once it has

        def failed(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if exc is not None:
                if not first_failed:
                    first_failed.append(time.monotonic())
                    self.health.retrying += 1
                self.health.failed(exc, state.attempt_number, first_failed[0])

        try:
            result = await first_try_then(
                call,
                lambda: AsyncRetrying(  # tenacity only after a failure
                    retry=retry_if_exception(transient),
                    wait=wait_random_exponential(multiplier=0.2, max=STORE_RETRY_MAX),
                    stop=lambda _: self.stopping(),
                    before_sleep=failed,
                    reraise=True,
                ),
            )
        finally:
            if first_failed:
                self.health.retrying -= 1
        self.health.ok()
        return result

    async def settle(self, aw: Awaitable[T]) -> tuple[T, bool]:
        """Await a store write to its end even if the grace period's cancel lands meanwhile (a write
        whose outcome is unknown is worse than a late one); say whether that cancel came."""
        task = asyncio.ensure_future(aw)
        try:
            return await asyncio.shield(task), False
        except asyncio.CancelledError:
            if not self.stopping():
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return await task, True

    async def write(self, call: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """A store write, retried (`call`) and settled (`settle`)."""
        return await self.settle(self.call(call))

    async def extend(self, key: str, token: str, lease_seconds: int) -> None:
        """The heartbeat's lease extension; an outage is said once (`health`), not per beat."""
        try:
            await self.store.extend(key, token, lease_seconds)
        except Exception as exc:
            if not transient(exc):
                raise
            self.health.failed(exc)
            return
        self.health.ok()

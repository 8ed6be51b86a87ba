"""The poll scheduler: runs the steps of long-running actions when they come due.

Beside the queue poller, each daemon looks in the store for due polls (`due_polls`) every
`interval` seconds, and on time for the polls it scheduled itself. It takes each with one
conditional write (`take_poll`: one fleet member runs each step) and runs the step
(cfn_provider.pipeline.poll_steps) under one of its `concurrency` slots only while the step runs,
keeping the poll's lease alive meanwhile. A waiting request holds nothing (no queue message, no
slot, no lease): a thousand of them cost one store query a look (a few on DynamoDB: one per
index shard).

A daemon killed mid-step leaves a lease that lapses; then any daemon takes the poll again from
the stored progress. A stopping daemon takes no new step, lets the running ones finish within
the grace period, and lets go of the rest (lease 0) so that another daemon takes them at once.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from typing import Any

from ..logs import get_logger
from ..pipeline.poll_steps import Polls
from ..pipeline.store_calls import StoreHealth
from ..stores.base import Record, Store, new_token, transient

log = get_logger("polling")
DEFAULT_INTERVAL = 5.0  # seconds between looks in the store (`run --poll-interval`)
SETTLE_SECONDS = 5.0  # after the grace period: time for cancelled steps to let go of their leases
LOOK_ERROR_EVERY = 600.0  # a look that keeps failing the same way is logged this often


class PollScheduler:
    """`await run()` until `stop()`; then `await drain(grace)`. `look()` is one look (tests, benches)."""

    def __init__(
        self,
        polls: Polls,
        store: Store,
        *,
        owner: str,
        concurrency: int,
        lease_seconds: float,
        interval: float = DEFAULT_INTERVAL,
    ):
        self.polls, self.store, self.owner = polls, store, owner
        self.concurrency, self.lease_seconds, self.interval = concurrency, lease_seconds, interval
        self.free = concurrency  # slots: a step holds one only while it runs
        self.running: dict[str, asyncio.Task[None]] = {}  # key -> its step
        self.steps = 0  # steps run, for the health of the loop
        self._soon: list[float] = []  # heap: when the polls this daemon scheduled come due
        self._backlog = False  # the last look found more due than it had slots for: look again as one frees
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._health = StoreHealth()
        self._said: tuple[str, float] | None = None  # the last failed look logged (error, when)
        polls.wake, polls.take_now = self.wake, self.take_now

    def wake(self, when: float) -> None:
        """A poll this daemon stored is due at `when` (epoch seconds): look then, not at the next interval."""
        heapq.heappush(self._soon, when)
        self._changed.set()

    def take_now(self, key: str) -> None:
        """A poll this daemon just stored due at once (a web request it accepted): take it and run its step
        here while a slot is free, without a look (a fleet table's index may not show it yet); else a look will."""
        if self.free > 0 and key not in self.running and not self._stop.is_set():
            self.free -= 1
            self.running[key] = asyncio.create_task(self._take_and_run(key), name="poll-step")

    async def _take_and_run(self, key: str) -> None:
        token, record = new_token(), None
        try:
            record = await self._take(key, token)
        finally:
            if record is None:  # another daemon's, or stopping: the slot back (a lease taken unknowingly lapses)
                self.running.pop(key, None)
                self.free += 1
                self._changed.set()
        if record is not None:
            await self._run(key, token, record)

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()

    async def run(self) -> None:
        log.info("polls.watching", interval=self.interval, concurrency=self.concurrency)
        next_look = 0.0
        while not self._stop.is_set():
            now = time.time()
            local = bool(self._soon) and self._soon[0] <= now
            if (local or self._backlog or time.monotonic() >= next_look) and self.free > 0:
                while self._soon and self._soon[0] <= now:
                    heapq.heappop(self._soon)
                await self.look()
                next_look = time.monotonic() + self.interval
                continue
            timeout = max(0.0, next_look - time.monotonic())
            if self._soon:
                timeout = min(timeout, max(0.0, self._soon[0] - now))
            if self.free <= 0:
                timeout = self.interval  # a slot that frees sets _changed
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.02, timeout))
            except TimeoutError:
                pass

    async def look(self) -> int:
        """Take and start the due polls there are free slots for; how many were started."""
        if self.free <= 0:
            return 0
        limit = self.free + len(self.running)
        try:
            keys = await self.store.due_polls(time.time(), limit)
        except Exception as exc:  # noqa: BLE001 - looked at again next interval
            self._look_failed(exc)
            return 0
        self._health.ok()
        started = 0
        for key in keys:
            if self._stop.is_set() or self.free <= 0:
                break
            if key in self.running:
                continue
            token = new_token()
            record = await self._take(key, token)
            if record is None:
                continue
            self.free -= 1
            task = asyncio.create_task(self._run(key, token, record), name="poll-step")
            self.running[key] = task
            started += 1
        # more may be due than were taken (not after a look that took nothing: a stale index's keys)
        self._backlog = started > 0 and (len(keys) >= limit or self.free <= 0)
        return started

    async def _take(self, key: str, token: str) -> Record | None:
        """take_poll, tried again once (same token) when its answer was lost; None if not ours."""
        for attempt in (1, 2):
            try:
                return await self.store.take_poll(key, self.owner, self.lease_seconds, token=token)
            except Exception as exc:  # noqa: BLE001 - a lease taken but not known lapses, then it is retaken
                if attempt == 2 or not transient(exc):
                    self._look_failed(exc)
                    return None
        return None

    async def _run(self, key: str, token: str, record: Record) -> None:
        beating = asyncio.create_task(self._beat(key, token))
        try:
            await self.polls.step(record, token)
            self.steps += 1
        except asyncio.CancelledError:  # stopping: another daemon takes the step up at once
            await self._let_go(key, token, record)
        except Exception:  # noqa: BLE001 - one poll must never take the scheduler down
            log.exception("poll.crashed", detail="its lease lapses and the step is tried again")
        finally:
            beating.cancel()
            self.running.pop(key, None)
            self.free += 1
            self._changed.set()

    async def _beat(self, key: str, token: str) -> None:
        """Keep the step's lease alive while it runs (the worker's heartbeat, for a poll)."""
        while True:
            await asyncio.sleep(max(0.5, self.lease_seconds / 3))
            try:
                await self.store.extend(key, token, self.lease_seconds)
            except Exception as exc:  # noqa: BLE001 - a missed beat is tried again on the next
                log.warning("poll.heartbeat_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    async def _let_go(self, key: str, token: str, record: Record) -> None:
        """The step's progress as it was taken, due now and with no lease (or, past it, the lease let go)."""

        async def let_go() -> None:
            if not await self.store.save_progress(key, token, record.progress or "", time.time()):
                await self.store.extend(key, token, 0)

        try:
            await asyncio.wait_for(asyncio.shield(let_go()), SETTLE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - then the lease simply lapses
            log.warning("poll.release_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    def _look_failed(self, exc: BaseException) -> None:
        if transient(exc):
            self._health.failed(exc)  # an outage is said once, when it starts
            return
        error, now = f"{type(exc).__name__}: {exc}"[:300], time.monotonic()
        if self._said is None or self._said[0] != error or now - self._said[1] >= LOOK_ERROR_EVERY:
            self._said = (error, now)
            log.error(
                "polls.look_failed",
                error=error,
                detail="long-running requests cannot be polled until this is fixed (a DynamoDB table "
                "made before polling needs its index: run `cfn-provider bootstrap --dynamodb-table`)",
            )

    async def drain(self, grace: float) -> None:
        """After stop(): let running steps finish within `grace` seconds, then cut them short."""
        self.stop()
        if not self.running:
            return
        log.info("polls.draining", running=len(self.running), grace_period=grace)
        pending = set(self.running.values())
        if grace > 0:
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=SETTLE_SECONDS + 1)


def scheduler_for(
    worker: Any, store: Store, *, owner: str, concurrency: int, lease_seconds: float, interval: float
) -> PollScheduler:
    """The scheduler of `worker`'s polls (Worker.polls)."""
    return PollScheduler(
        worker.polls, store, owner=owner, concurrency=concurrency, lease_seconds=lease_seconds, interval=interval
    )

"""The poll scheduler (cfn_provider.intake.poll_scheduler) on a real SQLite store, with stand-in steps.

A thousand waiting requests cost one query a look and are never touched; due polls run under
the scheduler's slots only while their step runs; a stopping scheduler hands its step over.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from cfn_provider.intake.poll_scheduler import PollScheduler
from cfn_provider.stores.base import POLLING
from cfn_provider.stores.sqlite import SQLiteStore


class Steps:
    """Stand-in for pipeline.poll_steps.Polls: records the steps run; each waits for `release` (or raises)."""

    def __init__(self, raises: bool = False) -> None:
        self.ran: list[str] = []
        self.release = asyncio.Event()
        self.raises = raises
        self.wake = lambda when: None

    async def step(self, record, token) -> str:
        self.ran.append(record.key)
        if self.raises:
            raise RuntimeError("a broken step")
        await self.release.wait()
        return "waiting"


async def fill(store: SQLiteStore, waiting: int, due: int) -> list[str]:
    now, due_keys = time.time(), []
    for i in range(waiting + due):
        key = f"key-{i}"
        assert (await store.claim(key, "w", "d", 60, token=f"t{i}")).acquired
        assert await store.save_progress(key, f"t{i}", "{}", now - 1 if i < due else now + 3600, "{}")
        if i < due:
            due_keys.append(key)
    return due_keys


async def test_waiting_polls_cost_one_query_and_due_ones_run_under_the_slots(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    try:
        due = await fill(store, waiting=1000, due=5)
        steps = Steps()
        scheduler = PollScheduler(steps, store, owner="me", concurrency=2, lease_seconds=60)
        started = time.perf_counter()
        assert await scheduler.look() == 2  # two slots
        assert time.perf_counter() - started < 1.0
        assert await scheduler.look() == 0 and scheduler.free == 0  # no slot: not even a query
        await asyncio.sleep(0)
        assert len(steps.ran) == 2 and set(steps.ran) <= set(due)
        steps.release.set()
        await asyncio.wait(set(scheduler.running.values()))
        assert scheduler.free == 2
        assert await scheduler.look() == 2
        await asyncio.wait(set(scheduler.running.values()))
        assert await scheduler.look() == 1
        await asyncio.wait(set(scheduler.running.values()))
        assert sorted(steps.ran) == sorted(due)  # each due poll once; none of the 1000 waiting
    finally:
        await store.close()


async def test_a_step_that_raises_frees_its_slot(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    try:
        await fill(store, waiting=0, due=1)
        scheduler = PollScheduler(Steps(raises=True), store, owner="me", concurrency=1, lease_seconds=60)
        assert await scheduler.look() == 1
        await asyncio.wait(set(scheduler.running.values()))
        assert scheduler.free == 1 and not scheduler.running
    finally:
        await store.close()


async def test_a_draining_scheduler_hands_its_step_over_due_at_once(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    try:
        [key] = await fill(store, waiting=0, due=1)
        steps = Steps()
        scheduler = PollScheduler(steps, store, owner="me", concurrency=1, lease_seconds=600)
        running = asyncio.create_task(scheduler.run())
        while not steps.ran:
            await asyncio.sleep(0.01)
        record = await store.get(key)
        assert record.owner == "me" and record.leased(time.time())
        await scheduler.drain(grace=0.1)  # the step never finishes: cut short, let go
        running.cancel()
        record = await store.get(key)
        assert record.state == POLLING and not record.leased(time.time())
        assert await store.due_polls(time.time(), 10) == [key]  # another daemon takes it at once
    finally:
        await store.close()


async def test_more_due_than_slots_run_as_slots_free_not_an_interval_later(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    try:
        due = await fill(store, waiting=0, due=6)
        steps = Steps()
        steps.release.set()  # every step ends at once
        scheduler = PollScheduler(steps, store, owner="me", concurrency=2, lease_seconds=60, interval=300)
        running = asyncio.create_task(scheduler.run())
        try:
            for _ in range(500):
                if len(steps.ran) == 6:
                    break
                await asyncio.sleep(0.01)
            assert sorted(steps.ran) == sorted(due)  # within seconds, though the next interval is 5 minutes off
        finally:
            scheduler.stop()
            await running
    finally:
        await store.close()


async def test_take_now_runs_a_poll_without_a_look_and_gives_the_slot_back_if_another_has_it(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    try:
        [key] = await fill(store, waiting=0, due=1)
        steps = Steps()
        steps.release.set()
        scheduler = PollScheduler(steps, store, owner="me", concurrency=1, lease_seconds=60, interval=300)
        scheduler.take_now(key)
        assert scheduler.free == 0
        await asyncio.wait(set(scheduler.running.values()))
        assert steps.ran == [key] and scheduler.free == 1 and not scheduler.running
        record = await store.get(key)
        assert (record.owner, record.state) == ("me", POLLING)
        scheduler.take_now(key)  # leased by the step that ran: not ours to take again
        await asyncio.wait(set(scheduler.running.values()))
        assert steps.ran == [key] and scheduler.free == 1 and not scheduler.running
    finally:
        await store.close()


class SlowAnswers:
    """The store, except that a save_progress answer arrives `delay` seconds after the write was
    applied: a step cut short meanwhile has its progress write in flight."""

    def __init__(self, store: SQLiteStore, delay: float) -> None:
        self.store, self.delay = store, delay
        self.applied = asyncio.Event()

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    async def save_progress(self, *args, **kwargs):
        result = await self.store.save_progress(*args, **kwargs)
        self.applied.set()
        await asyncio.sleep(self.delay)
        return result


class Advances:
    """A step that stores the next progress, as pipeline.poll_steps' `_again` does (the handler moved on)."""

    def __init__(self, store) -> None:
        self.store = store
        self.wake = lambda when: None

    async def step(self, record, token) -> str:
        await self.store.save_progress(record.key, token, '{"step":2}', time.time() + 30)
        return "waiting"


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_a_step_cut_short_while_its_progress_write_is_in_flight_never_moves_progress_back(tmp_path):
    """The stop's let-go rewrites the progress the step was given: it must lose to the newer
    progress the step already stored (its token no longer holds the poll), never replace it."""
    store = SQLiteStore(tmp_path / "state.db")
    try:
        assert (await store.claim("key", "w", "d", 60, token="t0")).acquired
        assert await store.save_progress("key", "t0", '{"step":1}', time.time() - 1, "{}")
        slow = SlowAnswers(store, delay=5)
        scheduler = PollScheduler(Advances(slow), slow, owner="me", concurrency=1, lease_seconds=600)
        assert await scheduler.look() == 1
        await slow.applied.wait()  # the new progress is written; its answer is still on its way
        await scheduler.drain(grace=0)
        record = await store.get("key")
        assert record.progress == '{"step":2}', "the stop's let-go moved the progress backwards"
        assert record.state == POLLING and not record.leased(time.time())
    finally:
        await store.close()

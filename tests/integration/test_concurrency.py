"""Concurrency: never work on more than `concurrency` messages, never receive more than there are
free slots; sync handlers really run in parallel."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import queue_counts, response_of


def sample_in_flight(sqs: Any, queue_url: str, stop: threading.Event, samples: list[int]) -> None:
    while not stop.is_set():
        samples.append(queue_counts(sqs, queue_url)[1])
        time.sleep(0.05)


async def test_never_works_on_more_messages_than_concurrency(run_daemon, stack: Stack, provider: Provider) -> None:
    requests = [
        stack.request("Create", f"R{i}", resource_type="Custom::Test", properties={"SleepSeconds": "2"})
        for i in range(6)
    ]
    for request in requests:
        stack.publish(request)
    stop, samples = threading.Event(), []
    sampler = asyncio.create_task(
        asyncio.to_thread(sample_in_flight, provider.emulator.client("sqs"), provider.queue_url, stop, samples)
    )
    try:
        daemon = await run_daemon(concurrency=2)
        answers = await asyncio.gather(*(response_of(stack, r, timeout=40) for r in requests))
    finally:
        stop.set()
        await sampler

    assert all(a is not None and a["Status"] == "SUCCESS" for a in answers)
    assert all(handlers.count(r["RequestId"]) == 1 for r in requests)
    assert handlers.running["peak"] == 2, "--concurrency 2: two handlers at once, never more"
    # SQS's in-flight count is the messages worked on (<= 2) plus answered ones whose batched
    # delete is still on its way (<= 2 here: each slot's handler takes 2 s, a delete waits at most 50 ms)
    assert len(samples) >= 20
    assert max(samples) <= 4, f"received more messages than there were free slots: {max(samples)} in flight"
    assert await daemon.stop() == 0
    sqs = provider.emulator.client("sqs")
    assert await asyncio.to_thread(queue_counts, sqs, provider.queue_url) == (0, 0)


async def test_sync_handlers_run_concurrently(run_daemon, stack: Stack) -> None:
    requests = [
        stack.request("Create", f"S{i}", resource_type="Custom::Test", properties={"SleepSeconds": "2"})
        for i in range(4)
    ]
    for request in requests:
        stack.publish(request)
    started = time.monotonic()
    daemon = await run_daemon(concurrency=4)
    answers = await asyncio.gather(*(response_of(stack, r, timeout=30) for r in requests))
    elapsed = time.monotonic() - started

    assert all(a is not None and a["Status"] == "SUCCESS" for a in answers)
    assert all(handlers.count(r["RequestId"]) == 1 for r in requests)
    assert elapsed < 7, f"4 sync handlers of 2 s each took {elapsed:.1f} s: they ran one after another"
    assert await daemon.stop() == 0

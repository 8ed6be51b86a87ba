"""cfn_provider.intake.poller.Poller over a real SqsQueue on the moto server: slots, receives side by
side, pause, stop.

Nothing of boto is mocked: the SQS calls the client really makes are observed through botocore's
events, and the worker is a small double of our own `Worker` interface.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cfn_provider.intake import poller as poller_module
from cfn_provider.intake.poller import Poller
from cfn_provider.local.emulator import Provider
from cfn_provider.pipeline.deletes import DeleteBatcher
from cfn_provider.pipeline.disposition import Disposition
from cfn_provider.pipeline.heartbeat import Heartbeat
from cfn_provider.transports.queue import Message, SqsQueue
from tests.support.aws import queue_counts


class FakeWorker:
    """Sleeps `seconds` per message and answers DELETE; records what it saw and how many ran at once."""

    def __init__(self, seconds: float = 0.0):
        self.stopping = False
        self.seconds = seconds
        self.seen: list[str] = []
        self.now = self.peak = 0
        self.seen_all = asyncio.Event()
        self.expect: int | None = None

    async def process(self, message: Message, heartbeat: Heartbeat) -> Disposition:
        self.seen.append(message.id)
        if self.expect is not None and len(self.seen) >= self.expect:
            self.seen_all.set()
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.now -= 1
        return Disposition.DELETE


class Calls:
    """The SQS calls the client actually made, observed through botocore's events.

    Receives: what each asked for, how many were in flight at once, and the slots they held
    (asked for, still out) next to the work in progress, checked as each receive is built."""

    def __init__(self, client: Any, worker: FakeWorker, concurrency: int):
        self.worker, self.concurrency = worker, concurrency
        self.asked: list[int] = []  # MaxNumberOfMessages per ReceiveMessage
        self.got: list[int] = []  # messages per finished ReceiveMessage
        self.started: list[float] = []  # monotonic, at before-call
        self.ended: list[float] = []  # monotonic, at after-call
        self.in_flight = self.peak_in_flight = 0
        self.outstanding = 0  # slots asked for by receives not yet back
        self.overbooked: list[tuple[int, int]] = []  # (asked for, in progress) beyond concurrency
        self.delete_batches = self.delete_singles = 0
        events = client.meta.events
        events.register("before-parameter-build.sqs.ReceiveMessage", self._build)
        events.register("before-call.sqs.ReceiveMessage", self._start)
        events.register("after-call.sqs.ReceiveMessage", self._end)
        events.register("after-call-error.sqs.ReceiveMessage", self._fail)
        events.register("before-call.sqs.DeleteMessageBatch", self._batch)
        events.register("before-call.sqs.DeleteMessage", self._single)

    def _build(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        asked = params["MaxNumberOfMessages"]
        self.asked.append(asked)
        context["test_asked"] = asked
        self.outstanding += asked
        if self.outstanding + self.worker.now > self.concurrency:
            self.overbooked.append((self.outstanding, self.worker.now))

    def _start(self, **_: Any) -> None:
        self.started.append(time.monotonic())
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _end(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        self.ended.append(time.monotonic())
        self.got.append(len(parsed.get("Messages", [])))
        self.in_flight -= 1
        self.outstanding -= context.get("test_asked", 0)

    def _fail(self, context: dict[str, Any], **_: Any) -> None:
        self.in_flight -= 1
        self.outstanding -= context.get("test_asked", 0)

    def _batch(self, **_: Any) -> None:
        self.delete_batches += 1

    def _single(self, **_: Any) -> None:
        self.delete_singles += 1


def send(provider: Provider, count: int) -> list[str]:
    """Put `count` messages on the queue; their ids."""
    sqs = provider.emulator.client("sqs")
    ids: list[str] = []
    for start in range(0, count, 10):
        resp = sqs.send_message_batch(
            QueueUrl=provider.queue_url,
            Entries=[{"Id": str(i), "MessageBody": f"message {i}"} for i in range(start, min(count, start + 10))],
        )
        assert not resp.get("Failed")
        ids += [entry["MessageId"] for entry in resp["Successful"]]
    return ids


def make_poller(queue: SqsQueue, worker: FakeWorker, concurrency: int, wait_seconds: int = 1) -> Poller:
    return Poller(
        queue, worker, concurrency=concurrency, visibility_timeout=30, wait_seconds=wait_seconds, grace_period=5
    )


async def stop(poller: Poller, task: asyncio.Task) -> None:
    poller.stop()
    await asyncio.wait_for(task, 30)


async def run_until_seen(poller: Poller, worker: FakeWorker, count: int) -> None:
    """Run the poller until the worker has seen `count` messages, then stop it."""
    worker.expect = count
    task = asyncio.create_task(poller.run())
    try:
        await asyncio.wait_for(worker.seen_all.wait(), 30)
    finally:
        await stop(poller, task)


async def test_a_busy_queue_is_received_side_by_side_up_to_the_concurrency(
    provider: Provider, client: Any, queue: SqsQueue
):
    ids = send(provider, 60)
    worker = FakeWorker(seconds=0.8)
    calls = Calls(client, worker, concurrency=32)
    poller = make_poller(queue, worker, concurrency=32)
    assert poller.receivers == 4
    await run_until_seen(poller, worker, len(ids))

    assert sorted(worker.seen) == sorted(ids)  # every message, each exactly once
    assert poller.handled == len(ids)
    assert 20 <= worker.peak <= 32  # well beyond one batch of ten, never beyond the concurrency
    assert calls.overbooked == []  # slots asked for + work in progress never above the concurrency
    assert 2 <= calls.peak_in_flight <= poller.receivers  # receives side by side, within the limit
    assert max(calls.asked) <= 10
    assert calls.delete_singles == 0 and calls.delete_batches >= 1
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_receives_side_by_side_are_capped_at_max_receivers(provider: Provider, client: Any, queue: SqsQueue):
    ids = send(provider, 100)
    worker = FakeWorker(seconds=0.5)
    calls = Calls(client, worker, concurrency=100)
    poller = make_poller(queue, worker, concurrency=100)
    assert poller.receivers == poller_module.MAX_RECEIVERS == 4  # slots for ten receives, but four at most
    await run_until_seen(poller, worker, len(ids))

    assert sorted(worker.seen) == sorted(ids)
    assert 2 <= calls.peak_in_flight <= poller.receivers
    assert calls.overbooked == []
    assert max(calls.asked) <= 10
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_an_idle_queue_gets_one_long_poll_at_a_time(provider: Provider, client: Any, queue: SqsQueue):
    worker = FakeWorker()
    calls = Calls(client, worker, concurrency=32)
    poller = make_poller(queue, worker, concurrency=32, wait_seconds=1)
    assert poller.receivers == 4  # side by side would be allowed, were the queue busy
    task = asyncio.create_task(poller.run())
    await asyncio.sleep(3.5)
    await stop(poller, task)

    assert calls.peak_in_flight == 1
    assert 2 <= len(calls.asked) <= 5  # it kept polling, each poll waiting out wait_seconds
    assert calls.asked == [10] * len(calls.asked)
    assert worker.seen == []


async def test_receives_never_ask_for_more_than_the_free_slots(provider: Provider, client: Any, queue: SqsQueue):
    ids = send(provider, 12)
    worker = FakeWorker(seconds=0.3)
    calls = Calls(client, worker, concurrency=3)
    poller = make_poller(queue, worker, concurrency=3)
    assert poller.receivers == 1
    await run_until_seen(poller, worker, len(ids))

    assert sorted(worker.seen) == sorted(ids)
    assert worker.peak == 3
    assert max(calls.asked) <= 3
    assert calls.overbooked == []
    assert calls.peak_in_flight == 1
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_a_slot_frees_when_the_work_is_done_not_after_the_delete(
    provider: Provider, client: Any, queue: SqsQueue
):
    ids = send(provider, 5)
    worker = FakeWorker()
    calls = Calls(client, worker, concurrency=1)
    held: list[bool] = []  # per DeleteMessageBatch: did the worker see every message while it was held?

    async def hold_deletes(**_: Any) -> None:
        """Keep each delete batch from being sent until the worker has seen every message (10 s at most)."""
        try:
            await asyncio.wait_for(worker.seen_all.wait(), 10)
            held.append(True)
        except TimeoutError:
            held.append(False)

    client.meta.events.register("before-call.sqs.DeleteMessageBatch", hold_deletes)
    poller = make_poller(queue, worker, concurrency=1)
    await run_until_seen(poller, worker, len(ids))

    assert sorted(worker.seen) == sorted(ids)
    assert worker.peak == 1
    assert calls.asked and max(calls.asked) == 1
    # the first message's delete was still held back when the last message was worked on
    assert held and all(held)
    assert calls.delete_batches >= 1 and calls.delete_singles == 0  # through poller.deletes
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


class StaggeredWorker(FakeWorker):
    """Each message takes a little longer than the one before (as PUTs come back one by one)."""

    async def process(self, message: Message, heartbeat: Heartbeat) -> Disposition:
        self.seconds = 0.02 * (len(self.seen) % 10)
        return await super().process(message, heartbeat)


async def test_the_messages_of_one_receive_are_deleted_in_one_call(provider: Provider, client: Any, queue: SqsQueue):
    """They finish apart (20 ms each after the one before), and each frees its slot at once, but
    their deletes go together: one DeleteMessageBatch for the receive, as a loop that deletes each
    receive's batch makes (before, the first went alone and the rest as they came)."""
    ids = send(provider, 10)
    worker = StaggeredWorker()
    calls = Calls(client, worker, concurrency=10)
    sizes: list[int] = []
    client.meta.events.register(
        "before-parameter-build.sqs.DeleteMessageBatch", lambda params, **_: sizes.append(len(params["Entries"]))
    )
    poller = make_poller(queue, worker, concurrency=10)
    poller.deletes = DeleteBatcher(queue, linger=30)  # (the daemon's waits 1 s at most: this test is not about that)
    await run_until_seen(poller, worker, len(ids))

    assert sorted(worker.seen) == sorted(ids)
    assert calls.got[0] == 10  # one receive brought them all
    assert sizes == [10] and calls.delete_singles == 0
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_a_part_full_receive_pauses_the_next(provider: Provider, client: Any, queue: SqsQueue):
    ids = send(provider, 3)
    worker = FakeWorker()
    worker.expect = len(ids)
    calls = Calls(client, worker, concurrency=32)
    poller = make_poller(queue, worker, concurrency=32)
    task = asyncio.create_task(poller.run())
    try:
        await asyncio.wait_for(worker.seen_all.wait(), 30)
        for _ in range(300):  # until the receive after the part-full one has started
            if len(calls.started) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await stop(poller, task)

    assert sorted(worker.seen) == sorted(ids)
    assert calls.got[0] == 3 and calls.asked[0] == 10  # part full
    assert len(calls.started) >= 2
    assert calls.started[1] - calls.ended[0] >= 0.049  # RECEIVE_PAUSE: 50 ms for a trickle to gather


async def test_stop_lets_the_long_poll_finish_and_hands_back_what_it_brings(
    provider: Provider, client: Any, queue: SqsQueue
):
    worker = FakeWorker()
    calls = Calls(client, worker, concurrency=32)
    poller = make_poller(queue, worker, concurrency=32, wait_seconds=3)
    task = asyncio.create_task(poller.run())
    for _ in range(500):
        if calls.in_flight:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the long poll is at the server now
    assert calls.in_flight == 1 and len(calls.started) == 1
    poller.stop()
    await asyncio.to_thread(send, provider, 1)  # arrives while that poll is still open (3 s)
    await asyncio.wait_for(task, 30)

    assert len(calls.started) == 1  # no receive after stop
    assert calls.got == [1]  # the poll was let finish and brought the message...
    assert worker.seen == []  # ...which was not worked on...
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (
        1,
        0,
    )  # ...but handed back, visible at once


class DeferringWorker(FakeWorker):
    """Defers each message once, asking for `hide` seconds (as the worker does with the time left
    on a blocking lease), then deletes it; records when it saw each message and its receive count."""

    def __init__(self, hide: float):
        super().__init__()
        self.hide = hide
        self.visits: list[tuple[float, int]] = []

    async def process(self, message: Message, heartbeat: Heartbeat) -> Disposition:
        await super().process(message, heartbeat)
        self.visits.append((time.monotonic(), message.receive_count))
        if len(self.visits) == 1:
            heartbeat.defer(self.hide)
            return Disposition.DEFER
        return Disposition.DELETE


async def test_a_deferred_message_stays_hidden_as_long_as_the_worker_asked(provider: Provider, queue: SqsQueue):
    """Not the old fixed 2-4-8 s: the message comes back once, after the time the worker gave."""
    send(provider, 1)
    worker = DeferringWorker(hide=5)
    poller = make_poller(queue, worker, concurrency=1)
    await run_until_seen(poller, worker, 2)
    (first, count1), (second, count2) = worker.visits
    assert (count1, count2) == (1, 2)  # one receive spent by the defer, no more
    assert second - first >= 4.0, f"came back after {second - first:.1f} s, asked for 5"
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


def test_defer_seconds_default_to_the_visibility_timeout_and_stay_within_sqs_limits(queue: SqsQueue):
    poller = make_poller(queue, FakeWorker(), concurrency=1)
    message = Message("m", "", "r", sent_at=None, receive_count=3)  # type: ignore[arg-type]
    assert poller.defer_seconds(message) == poller.visibility_timeout
    assert poller.defer_seconds(message, 0.2) == 1
    assert poller.defer_seconds(message, 41.3) == 42
    assert poller.defer_seconds(message, 10**9) == 12 * 3600


async def test_a_message_received_again_is_logged_with_its_receive_count(provider: Provider, queue: SqsQueue):
    """SQS leaves a message being received again and again out of the age of the oldest message:
    the template's ReceivedAgain metric filter counts these lines instead (deploy/provider.yaml)."""
    from structlog.testing import capture_logs

    send(provider, 1)
    worker = DeferringWorker(hide=1)
    poller = make_poller(queue, worker, concurrency=1)
    with capture_logs() as logs:
        await run_until_seen(poller, worker, 2)
    again = [e for e in logs if e["event"] == "message.received_again"]
    assert [e["receive_count"] for e in again] == [2], again  # the first delivery is not logged

"""cfn_provider.pipeline.deletes.DeleteBatcher over a real SqsQueue on the moto server: batches,
per-entry failures, close."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from cfn_provider.local.emulator import Emulator
from cfn_provider.pipeline.deletes import DeleteBatcher, DeleteFailed
from cfn_provider.transports.queue import Message, SqsQueue
from tests.support.aws import queue_counts


class Calls:
    """The SQS delete requests the client actually made, observed through botocore's events."""

    def __init__(self, client: Any):
        self.batches: list[int] = []  # entries per DeleteMessageBatch
        self.singles = 0  # DeleteMessage calls
        client.meta.events.register("before-parameter-build.sqs.DeleteMessageBatch", self._batch)
        client.meta.events.register("before-call.sqs.DeleteMessage", self._single)

    def _batch(self, params: dict[str, Any], **_: Any) -> None:
        self.batches.append(len(params["Entries"]))

    def _single(self, **_: Any) -> None:
        self.singles += 1


async def received(emulator: Emulator, queue: SqsQueue, count: int) -> list[Message]:
    """Send `count` messages and receive them all (in flight for 30 s)."""
    sqs = emulator.client("sqs")
    for i in range(count):
        sqs.send_message(QueueUrl=queue.url, MessageBody=f"message {i}")
    messages: list[Message] = []
    for _ in range(20):
        if len(messages) >= count:
            break
        messages += await queue.receive(10, 1, 30)
    assert len(messages) == count
    return messages


async def test_concurrent_deletes_go_in_full_batches(emulator: Emulator, client: Any, queue: SqsQueue):
    messages = await received(emulator, queue, 25)
    calls = Calls(client)
    batcher = DeleteBatcher(queue)
    await asyncio.wait_for(asyncio.gather(*(batcher.delete(m) for m in messages)), 10)
    assert calls.batches == [10, 10, 5] and calls.singles == 0
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 0)


async def test_a_lone_delete_does_not_wait_for_company(emulator: Emulator, client: Any, queue: SqsQueue):
    [message] = await received(emulator, queue, 1)
    calls = Calls(client)
    await asyncio.wait_for(DeleteBatcher(queue, linger=30).delete(message), 5)  # not after the 30 s linger
    assert calls.batches == [1]
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 0)


async def test_deletes_gather_while_a_batch_is_on_its_way(emulator: Emulator, client: Any, queue: SqsQueue):
    first, *rest = await received(emulator, queue, 6)
    calls = Calls(client)
    batcher = DeleteBatcher(queue, linger=30)
    sending = asyncio.create_task(batcher.delete(first))
    await asyncio.sleep(0)  # the first batch (of one) is on its way
    gathered = [asyncio.create_task(batcher.delete(m)) for m in rest]
    await asyncio.wait_for(asyncio.gather(sending, *gathered), 5)  # sent when the first returned, not at 30 s
    assert calls.batches == [1, 5]
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 0)


async def test_a_refused_entry_fails_only_its_own_caller(emulator: Emulator, queue: SqsQueue):
    messages = await received(emulator, queue, 4)
    bad = dataclasses.replace(messages[2], receipt="bogus-handle")
    batcher = DeleteBatcher(queue)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(batcher.delete(bad if i == 2 else m) for i, m in enumerate(messages)), return_exceptions=True),
        10,
    )
    assert [o is None for o in outcomes] == [True, True, False, True]
    assert isinstance(outcomes[2], DeleteFailed) and "ReceiptHandleIsInvalid" in str(outcomes[2])
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 1)  # only the refused one is still in flight


async def test_a_failed_call_reaches_every_waiting_caller(emulator: Emulator, client: Any, queue: SqsQueue):
    messages = await received(emulator, queue, 3)
    batcher = DeleteBatcher(SqsQueue(client, queue.url + "-missing"))
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(batcher.delete(m) for m in messages), return_exceptions=True), 10
    )
    assert all(isinstance(o, client.exceptions.QueueDoesNotExist) for o in outcomes)
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 3)


async def test_close_sends_what_is_waiting_at_once(emulator: Emulator, queue: SqsQueue):
    messages = await received(emulator, queue, 3)
    batcher = DeleteBatcher(queue, linger=30, eager=False)
    waiting = [asyncio.create_task(batcher.delete(m)) for m in messages]
    await asyncio.sleep(0.2)
    assert not any(t.done() for t in waiting)  # lingering for company
    await asyncio.wait_for(batcher.close(), 5)
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 0)  # close waited for the batch it sent
    await asyncio.wait_for(asyncio.gather(*waiting), 1)  # and the callers have their answers


async def test_abandon_drops_waiting_deletes_at_once(emulator: Emulator, client: Any, queue: SqsQueue):
    """A second stop signal: nothing waits for a delete; the messages come back later instead."""
    messages = await received(emulator, queue, 3)
    calls = Calls(client)
    batcher = DeleteBatcher(queue, linger=30, eager=False)
    waiting = [asyncio.create_task(batcher.delete(m)) for m in messages]
    await asyncio.sleep(0.2)
    batcher.abandon()
    outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
    await asyncio.wait_for(batcher.close(), 5)  # nothing left to send
    assert calls.batches == [] and queue_counts(emulator.client("sqs"), queue.url) == (0, 3)


async def test_the_deletes_of_one_receive_go_in_one_call_though_its_messages_finish_apart(
    emulator: Emulator, client: Any, queue: SqsQueue
):
    """Messages of one receive finish at different times (their PUTs return apart): each delete waits
    for the rest of its receive (never past the linger), so the receive costs one DeleteMessageBatch."""
    messages = await received(emulator, queue, 6)
    calls = Calls(client)
    batcher = DeleteBatcher(queue, linger=30)
    batcher.expect(messages)
    first = [asyncio.create_task(batcher.delete(m)) for m in messages[:2]]
    await asyncio.sleep(0.2)
    assert calls.batches == [] and not any(t.done() for t in first)  # the other four are still worked on
    rest = [asyncio.create_task(batcher.delete(m)) for m in messages[2:5]]
    await asyncio.sleep(0.2)
    assert calls.batches == []
    batcher.done(messages[5])  # the last one ends without a delete (say, handed back): nothing left to wait for
    await asyncio.wait_for(asyncio.gather(*first, *rest), 5)
    assert calls.batches == [5] and calls.singles == 0
    assert queue_counts(emulator.client("sqs"), queue.url) == (0, 1)  # only the one not deleted is still in flight


async def test_a_delete_waits_for_the_rest_of_its_receive_no_longer_than_its_company_time(
    emulator: Emulator, client: Any, queue: SqsQueue
):
    messages = await received(emulator, queue, 3)
    calls = Calls(client)
    batcher = DeleteBatcher(queue, linger=0.05, company=0.5)
    batcher.expect(messages)  # the other two never finish (a handler that runs for minutes)
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(batcher.delete(messages[0]), 5)
    assert asyncio.get_running_loop().time() - started >= 0.45  # it waited for the rest of its receive, 0.5 s
    assert calls.batches == [1]
    batcher.done(messages[1])  # done twice, or after the batch went: nothing changes
    batcher.done(messages[1])
    await asyncio.wait_for(batcher.delete(messages[2]), 5)
    assert calls.batches == [1, 1]


async def test_a_receive_done_with_meanwhile_does_not_hold_another_receives_deletes(
    emulator: Emulator, client: Any, queue: SqsQueue
):
    messages = await received(emulator, queue, 4)
    calls = Calls(client)
    batcher = DeleteBatcher(queue, linger=30)
    batcher.expect(messages[:2])
    batcher.expect(messages[2:])
    one = asyncio.create_task(batcher.delete(messages[0]))  # waits for messages[1]
    two = asyncio.create_task(batcher.delete(messages[2]))  # waits for messages[3]
    await asyncio.sleep(0.1)
    assert calls.batches == []
    batcher.done(messages[1])
    await asyncio.sleep(0.1)
    assert calls.batches == []  # the second receive still has one being worked on
    three = asyncio.create_task(batcher.delete(messages[3]))
    await asyncio.wait_for(asyncio.gather(one, two, three), 5)
    assert calls.batches == [3]

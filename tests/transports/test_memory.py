"""cfn_provider.transports.memory.MemoryQueue keeps SQS's rules: visibility, receipts, receive counts,
long polls and the redrive policy (the pipeline's tests rely on them: tests/pipeline/test_worker.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cfn_provider.transports.memory import MemoryQueue, ReceiptHandleInvalid


async def test_a_received_message_is_hidden_for_its_visibility_timeout_then_comes_back_counted():
    queue = MemoryQueue()
    sent = queue.send("hello")
    (first,) = await queue.receive(10, 0, 1)
    assert (first.id, first.body, first.receive_count) == (sent, "hello", 1)
    assert await queue.receive(10, 0, 1) == []  # hidden
    assert queue.in_flight() == [sent] and queue.visible() == []
    (again,) = await queue.receive(10, 2, 1)  # a long poll that outlasts the visibility timeout
    assert (again.id, again.receive_count) == (sent, 2)
    assert again.receipt != first.receipt


async def test_only_the_latest_receipt_deletes_or_changes_visibility():
    queue = MemoryQueue()
    queue.send("x")
    (old,) = await queue.receive(1, 0, 0)
    (new,) = await queue.receive(1, 0, 30)
    with pytest.raises(ReceiptHandleInvalid):
        await queue.delete(old)
    with pytest.raises(ReceiptHandleInvalid):
        await queue.set_visibility(old, 0)
    failed = await queue.delete_batch([old, new])
    assert list(failed) == [0] and "not the latest" in failed[0]
    assert len(queue) == 0 and queue.deleted == [new.id]


async def test_delete_batch_reports_each_entry_that_failed():
    queue = MemoryQueue()
    for body in ("a", "b", "c"):
        queue.send(body)
    a, b, c = await queue.receive(10, 0, 30)
    await queue.delete(b)
    failed = await queue.delete_batch([a, b, c])
    assert list(failed) == [1] and failed[1].startswith("ReceiptHandleIsInvalid")
    assert queue.deleted == [b.id, a.id, c.id] and len(queue) == 0


async def test_a_long_poll_returns_as_soon_as_a_message_arrives_or_is_released():
    queue = MemoryQueue()
    started = time.monotonic()
    polling = asyncio.create_task(queue.receive(10, 20, 30))
    await asyncio.sleep(0.05)
    sent = queue.send("late")
    (message,) = await asyncio.wait_for(polling, 5)
    assert message.id == sent and time.monotonic() - started < 5  # not the 20 s long poll

    polling = asyncio.create_task(queue.receive(10, 20, 30))
    await asyncio.sleep(0.05)
    await queue.set_visibility(message, 0)  # handed back for another worker
    (back,) = await asyncio.wait_for(polling, 5)
    assert (back.id, back.receive_count) == (sent, 2)


async def test_receives_never_return_more_than_asked_and_keep_the_order_sent():
    queue = MemoryQueue()
    ids = [queue.send(str(n)) for n in range(15)]
    first = await queue.receive(10, 0, 30)
    second = await queue.receive(10, 0, 30)
    assert [m.id for m in first] == ids[:10] and [m.id for m in second] == ids[10:]


async def test_past_max_receive_count_a_message_moves_to_the_dead_letter_queue():
    dead = MemoryQueue("dead")
    queue = MemoryQueue("main", dead_letter=dead, max_receive_count=2)
    assert await queue.has_dead_letter_queue() is True and await dead.has_dead_letter_queue() is False
    sent = queue.send("poison")
    for count in (1, 2):
        (message,) = await queue.receive(1, 0, 30)
        assert message.receive_count == count
        await queue.set_visibility(message, 0)
    assert await queue.receive(1, 0, 30) == []  # the third receive moves it instead
    (moved,) = await dead.receive(1, 0, 30)
    assert (moved.id, moved.body, moved.receive_count) == (sent, "poison", 3)
    assert len(queue) == 0


def test_a_dead_letter_queue_needs_a_receive_budget():
    with pytest.raises(ValueError, match="max_receive_count"):
        MemoryQueue(dead_letter=MemoryQueue(), max_receive_count=0)

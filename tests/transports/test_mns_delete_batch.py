"""MnsQueue.delete_batch (one DELETE per message, failures by index) and DeleteBatcher over MNS, on the local server."""

from __future__ import annotations

import asyncio
import dataclasses
from contextlib import AsyncExitStack

import pytest

from cfn_provider.pipeline.deletes import DeleteBatcher
from cfn_provider.transports.mns import Credentials, MnsQueue
from cfn_provider.transports.queue import Message
from tests.dialects.conftest import QUEUE
from tests.support.mns_server import MnsServer


@pytest.fixture
async def queue(mns: MnsServer):
    async with AsyncExitStack() as stack:
        yield await MnsQueue.open(
            mns.endpoint, QUEUE, Credentials(mns.access_key_id, mns.secret), stack, allow_http=True
        )


async def received(mns: MnsServer, queue: MnsQueue, count: int) -> list[Message]:
    for i in range(count):
        mns.send(QUEUE, f"message {i}")
    messages: list[Message] = []
    for _ in range(10):
        if len(messages) >= count:
            break
        messages += await queue.receive(16, 1, 30)
    assert len(messages) == count
    return messages


async def test_delete_batch_deletes_them_all(mns: MnsServer, queue: MnsQueue):
    messages = await received(mns, queue, 5)
    assert await queue.delete_batch(messages) == {}
    assert mns.queue(QUEUE).live == [] and mns.count("delete") == 5


async def test_a_bad_handle_fails_only_its_own_index(mns: MnsServer, queue: MnsQueue):
    messages = await received(mns, queue, 4)
    messages[1] = dataclasses.replace(messages[1], receipt="bogus-handle")
    failed = await queue.delete_batch(messages)
    assert list(failed) == [1] and "ReceiptHandleError" in failed[1]
    assert [m.body for m in mns.queue(QUEUE).live] == ["message 1"]


async def test_delete_batch_uses_the_handle_of_a_visibility_change_in_flight(mns: MnsServer, queue: MnsQueue):
    [message] = await received(mns, queue, 1)
    change = asyncio.ensure_future(queue.set_visibility(message, 60))  # a new handle is on its way
    assert await queue.delete_batch([message]) == {}
    await change
    assert mns.queue(QUEUE).live == []


async def test_delete_batcher_over_mns(mns: MnsServer, queue: MnsQueue):
    messages = await received(mns, queue, 20)
    batcher = DeleteBatcher(queue)
    await asyncio.wait_for(asyncio.gather(*(batcher.delete(m) for m in messages)), 10)
    assert mns.queue(QUEUE).live == [] and mns.count("delete") == 20

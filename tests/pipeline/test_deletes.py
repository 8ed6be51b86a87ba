"""cfn_provider.pipeline.deletes.DeleteBatcher over a real SqsQueue on the moto server: batches,
per-entry failures, close; and the daemon's own loop (Poller, Worker, SQLiteStore) deleting a
receive's messages in one call, each only once its answer is stored and delivered."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp

from cfn_provider.intake.poller import Poller
from cfn_provider.local.emulator import Emulator, Provider
from cfn_provider.pipeline.deletes import DeleteBatcher, DeleteFailed
from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.pipeline.responder import Responder
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.worker import Policy, Worker
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.transports.queue import Message, SqsQueue
from cfn_provider.trust.urls import ResponseUrlPolicy
from tests.support.aws import queue_counts
from tests.support.stub_s3 import StubS3


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


class Staggered:
    """A handler whose n-th create takes 30 ms longer than the one before (its receive's answers come back apart)."""

    def __init__(self) -> None:
        self.created: list[str] = []

    async def create(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.created.append(event["RequestId"])
        await asyncio.sleep(0.03 * len(self.created))
        return {"PhysicalResourceId": f"thing-{event['RequestId']}"}

    async def update(self, event: dict[str, Any], context: Any) -> None:
        return None

    async def delete(self, event: dict[str, Any], context: Any) -> None:
        return None


async def test_the_daemons_loop_deletes_a_receive_in_one_call_and_only_what_is_answered_and_stored(
    tmp_path: Path, stub_s3: StubS3, provider: Provider, client: Any, queue: SqsQueue
):
    """Ten requests in one receive, answered 30 ms apart by the real Worker (SQLite store, PUTs to a
    StubS3), under the daemon's Poller: one DeleteMessageBatch of ten, and when it is made every
    entry's answer is stored (SENT, in the file) and delivered once."""
    requests = [
        {
            "RequestType": "Create",
            "ResponseURL": stub_s3.url(f"responses/{request_id}"),
            "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/s/{uuid.uuid4()}",
            "RequestId": request_id,
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Thing",
            "ResourceProperties": {"ServiceToken": "arn:aws:sns:us-east-1:123456789012:t"},
        }
        for request_id in (str(uuid.uuid4()) for _ in range(10))
    ]
    resp = provider.emulator.client("sqs").send_message_batch(
        QueueUrl=queue.url, Entries=[{"Id": str(i), "MessageBody": json.dumps(r)} for i, r in enumerate(requests)]
    )
    assert not resp.get("Failed")
    bodies: dict[str, dict[str, Any]] = {}  # receipt handle -> the request it carries
    batches: list[list[str]] = []  # per DeleteMessageBatch, the RequestIds deleted
    unanswered: list[str] = []  # RequestIds whose delete was asked for before their answer was stored and sent
    state = tmp_path / "state.db"

    def received(parsed: dict[str, Any], **_: Any) -> None:
        for m in parsed.get("Messages", []):
            bodies[m["ReceiptHandle"]] = json.loads(m["Body"])

    def deleting(params: dict[str, Any], **_: Any) -> None:
        batch = [bodies[e["ReceiptHandle"]] for e in params["Entries"]]
        batches.append([r["RequestId"] for r in batch])
        with closing(sqlite3.connect(state)) as db:  # a reader of its own, as another process would be
            for r in batch:
                row = db.execute(
                    "SELECT state, status FROM records WHERE key = ?", (idempotency_key(r["StackId"], r["RequestId"]),)
                ).fetchone()
                if row != ("SENT", "SUCCESS") or len(stub_s3.bodies(f"responses/{r['RequestId']}")) != 1:
                    unanswered.append(r["RequestId"])

    client.meta.events.register("after-call.sqs.ReceiveMessage", received)
    client.meta.events.register("before-parameter-build.sqs.DeleteMessageBatch", deleting)
    client.meta.events.register("before-call.sqs.DeleteMessage", lambda **_: batches.append(["(single)"]))
    handler, store, executor = Staggered(), SQLiteStore(state), ThreadPoolExecutor(max_workers=2)
    try:
        async with aiohttp.ClientSession() as http:
            worker = Worker(
                router=Router([("Custom::Thing", handler)], use_entry_points=False),
                store=store,
                responder=Responder(http, max_backoff=0.1),
                url_policy=ResponseUrlPolicy((stub_s3.base_url,)),
                verifier=None,
                policy=Policy(verify_signatures=False, lease_seconds=60),
                executor=executor,
                owner="worker-under-test",
            )
            poller = Poller(queue, worker, concurrency=10, visibility_timeout=30, wait_seconds=1, grace_period=5)
            # the daemon waits 1 s at most for the rest of a receive; a loaded test machine may take longer
            poller.deletes = DeleteBatcher(queue, company=30)
            running = asyncio.create_task(poller.run())
            try:
                for _ in range(1500):  # 30 s at most
                    if sum(map(len, batches)) >= 10:
                        break
                    await asyncio.sleep(0.02)
            finally:
                poller.stop()
                await asyncio.wait_for(running, 30)
    finally:
        await store.close()
        executor.shutdown(wait=False)

    assert sorted(handler.created) == sorted(r["RequestId"] for r in requests)  # each handled once
    assert [sorted(b) for b in batches] == [sorted(r["RequestId"] for r in requests)]  # one call, all ten
    assert unanswered == []
    assert queue_counts(provider.emulator.client("sqs"), queue.url) == (0, 0)  # nothing lost, nothing left

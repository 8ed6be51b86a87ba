"""cfn_provider.pipeline.worker.Worker on its own: one test per Disposition, each in well under a second.

The message comes from a MemoryQueue (cfn_provider.transports.memory: a real queue, in memory),
the idempotency store is a real SQLite file, the answer is a real HTTP PUT to a StubS3; what
the worker returns is what the poller would do with the message. Requests arrive by raw
delivery with signature checks off (the signature path has its own tests, tests/trust).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cfn_provider.intake.poller import Poller
from cfn_provider.pipeline.disposition import Disposition
from cfn_provider.pipeline.heartbeat import Heartbeat
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.responder import Responder
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.worker import Policy, Worker
from cfn_provider.stores.base import CLAIMED, SENT, new_token, url_digest
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.transports.memory import MemoryQueue
from cfn_provider.transports.queue import Message
from cfn_provider.trust.urls import ResponseUrlPolicy
from tests.support.stub_s3 import StubS3

VISIBILITY = 30


class Thing:
    """A handler whose create the test can hold (`hold`), and run a step of its own inside (`during`)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.started = asyncio.Event()
        self.hold: asyncio.Event | None = None
        self.during: Any = None

    async def create(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.created.append(event["RequestId"])
        self.started.set()
        if self.during is not None:
            await self.during(event)
        if self.hold is not None:
            await self.hold.wait()
        return {
            "PhysicalResourceId": f"thing-{len(self.created)}",
            "Data": {"Size": event["ResourceProperties"]["Size"]},
        }

    async def update(self, event: dict[str, Any], context: Any) -> None:
        return None

    async def delete(self, event: dict[str, Any], context: Any) -> None:
        return None


class Clock:
    """The store's clock, moved by the test (leases run out without waiting for them)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class Setup:
    def __init__(
        self, queue: MemoryQueue, store: SQLiteStore, clock: Clock, worker: Worker, thing: Thing, s3: StubS3
    ) -> None:
        self.queue, self.store, self.clock, self.worker, self.thing, self.s3 = queue, store, clock, worker, thing, s3

    def request(self, **fields: Any) -> dict[str, Any]:
        request_id = str(uuid.uuid4())
        return {
            "RequestType": "Create",
            "ResponseURL": self.s3.url(f"responses/{request_id}"),
            "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/s/{uuid.uuid4()}",
            "RequestId": request_id,
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Thing",
            "ResourceProperties": {"ServiceToken": "arn:aws:sns:us-east-1:123456789012:t", "Size": "3"},
            **fields,
        }

    async def receive(self, body: str) -> tuple[Message, Heartbeat]:
        self.queue.send(body)
        (message,) = await self.queue.receive(1, 0, VISIBILITY)
        return message, Heartbeat(self.queue, message, VISIBILITY)

    async def process(self, body: str) -> tuple[Disposition, Heartbeat]:
        message, heartbeat = await self.receive(body)
        return await self.worker.process(message, heartbeat), heartbeat

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        (body,) = self.s3.bodies(f"responses/{request['RequestId']}")
        return json.loads(body)


@pytest.fixture
async def setup(tmp_path: Path, stub_s3: StubS3) -> AsyncIterator[Setup]:
    clock, thing = Clock(), Thing()
    store = SQLiteStore(tmp_path / "state.db", clock=clock)
    executor = ThreadPoolExecutor(max_workers=2)
    async with aiohttp.ClientSession() as http:
        worker = Worker(
            router=Router([("Custom::Thing", thing)], use_entry_points=False),
            store=store,
            responder=Responder(http, max_backoff=0.1),
            url_policy=ResponseUrlPolicy((stub_s3.base_url,)),
            verifier=None,
            policy=Policy(verify_signatures=False, lease_seconds=60),
            executor=executor,
            owner="worker-under-test",
        )
        yield Setup(MemoryQueue(), store, clock, worker, thing, stub_s3)
    await store.close()
    executor.shutdown(wait=False)


async def test_delete_once_the_answer_is_delivered_and_for_a_copy_already_answered(setup: Setup):
    request = setup.request()
    disposition, _ = await setup.process(json.dumps(request))
    assert disposition is Disposition.DELETE
    answer = setup.answer(request)
    assert (answer["Status"], answer["PhysicalResourceId"], answer["Data"]) == ("SUCCESS", "thing-1", {"Size": "3"})
    record = await setup.store.get(parse(json.dumps(request)).key)
    assert record is not None and record.state == SENT

    again, _ = await setup.process(json.dumps(request))  # SQS's at-least-once: the same message twice
    assert again is Disposition.DELETE
    assert setup.thing.created == [request["RequestId"]]  # never run twice
    assert len(setup.s3.bodies(f"responses/{request['RequestId']}")) == 1  # nor answered twice


async def test_reject_bad_input_and_a_forged_response_url_without_running_or_answering(setup: Setup):
    not_json, _ = await setup.process("{not json")
    assert not_json is Disposition.REJECT
    forged = setup.request(ResponseURL="http://169.254.169.254/latest/meta-data/")
    security, _ = await setup.process(json.dumps(forged))
    assert security is Disposition.REJECT
    assert setup.thing.created == []
    assert setup.s3.requests == []


async def test_defer_a_request_another_worker_holds_when_the_daemon_is_draining(setup: Setup):
    request = setup.request()
    key = parse(json.dumps(request)).key
    held = await setup.store.claim(key, "other-worker", url_digest(request["ResponseURL"]), 60, token=new_token())
    assert held.acquired
    setup.worker.drain()  # stopping: do not wait here for the other worker's lease to run out
    disposition, heartbeat = await setup.process(json.dumps(request))
    assert disposition is Disposition.DEFER
    assert heartbeat.defer_seconds is not None and 50 < heartbeat.defer_seconds <= 60  # hidden until that lease ends
    assert setup.thing.created == []
    record = await setup.store.get(key)
    assert record is not None and (record.state, record.owner) == (CLAIMED, "other-worker")


async def test_release_a_request_cut_off_by_the_grace_period_with_time_to_hand_it_over(setup: Setup):
    setup.thing.hold = asyncio.Event()  # the handler is still running when the grace period ends
    request = setup.request()
    message, heartbeat = await setup.receive(json.dumps(request))
    processing = asyncio.create_task(setup.worker.process(message, heartbeat))
    await asyncio.wait_for(setup.thing.started.wait(), 5)
    setup.worker.stopping = True  # what the poller does when the grace period is over, then it cancels
    processing.cancel()
    assert await processing is Disposition.RELEASE
    record = await setup.store.get(parse(json.dumps(request)).key)
    assert record is None or not record.leased(time.time())  # another worker may take it at once
    assert setup.s3.requests == []  # no FAILED: its deadline is an hour away


async def test_leave_when_another_worker_took_the_request_over_while_the_handler_ran(setup: Setup):
    request = setup.request()
    key, digest = parse(json.dumps(request)).key, url_digest(request["ResponseURL"])

    async def lease_lapses_and_is_taken_over(event: dict[str, Any]) -> None:
        setup.clock.offset += 120  # past our 60 s lease (no heartbeat beats in this test)
        taken = await setup.store.claim(key, "other-worker", digest, 60, token=new_token())
        assert taken.acquired

    setup.thing.during = lease_lapses_and_is_taken_over
    disposition, _ = await setup.process(json.dumps(request))
    assert disposition is Disposition.LEAVE  # the new holder answers; this copy comes back on its own
    assert setup.s3.requests == []  # not sent by a worker that no longer holds the claim
    record = await setup.store.get(key)
    assert record is not None and (record.state, record.owner) == (CLAIMED, "other-worker")


async def test_the_poller_carries_out_the_workers_dispositions_on_a_memory_queue(setup: Setup):
    """The daemon's loop (Poller, Heartbeat, DeleteBatcher) on the MemoryQueue: answered messages
    are deleted, a bad one is deleted too (the queue has no dead-letter queue), nothing is left."""
    requests = [setup.request() for _ in range(3)]
    for request in requests:
        setup.queue.send(json.dumps(request))
    setup.queue.send("not a request")
    poller = Poller(setup.queue, setup.worker, concurrency=4, visibility_timeout=VISIBILITY, wait_seconds=1)
    running = asyncio.create_task(poller.run())
    try:
        for _ in range(200):
            if len(setup.queue) == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        poller.stop()
        await asyncio.wait_for(running, 10)
    assert len(setup.queue) == 0 and len(setup.queue.deleted) == 4
    assert sorted(setup.thing.created) == sorted(r["RequestId"] for r in requests)
    assert all(setup.answer(r)["Status"] == "SUCCESS" for r in requests)

"""Long-running resources (the poll contract) through the real path: SNS -> SQS -> daemon -> S3.

- A handler that returns InProgress is polled until done; its queue message is deleted as soon
  as the progress is stored (no receive is spent while it waits), and no slot is held.
- `create` is called exactly once across a SIGKILL of the daemon mid-poll and across a fleet
  takeover (DynamoDB): the survivor resumes from the stored progress.
- The deadline holds: a poll that never finishes is answered FAILED "timed out" before its
  ServiceTimeout, with the PhysicalResourceId the action gave.
- A handler that returns InProgress without a poll function is answered FAILED saying so.
- An SDK Resource (cfn_provider.Resource) polls through its poll_create the same way.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import boto3
import pytest

from cfn_provider.dialects.base import CLOUDFORMATION
from cfn_provider.local.emulator import REGION, Emulator, Provider, Stack
from cfn_provider.ops.bootstrap import Bootstrap
from cfn_provider.pipeline.request import stored_parts
from cfn_provider.stores.sqlite import SQLiteStore
from tests.support.aws import queue_counts, response_of
from tests.support.daemons import (
    TEST_HANDLERS,
    fleet_member,
    recorded_calls,
    stop_gracefully,
    wait_for_event,
    wait_until,
)
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic

POLL_HANDLERS = TEST_HANDLERS + (
    ("Custom::Poll", "tests.support.polling_handlers"),
    ("Custom::NoPoll", "tests.support.polling_handlers:no_poll"),
    ("Custom::SdkPoll", "tests.support.polling_handlers:sdk_poll"),
)
POLL_ARGS = ("--handler", "Custom::Poll=tests.support.polling_handlers", "--poll-interval", "0.5")


def calls_of(calls_file: Path, request: dict) -> Counter:
    return Counter(
        line.split(" ", 1)[1].split(" ")[0]
        for line in recorded_calls(calls_file)
        if line.startswith(request["RequestId"] + " ")
    )


# ---------------------------------------------------------------------------------- in process
async def test_a_polling_create_is_answered_when_done_and_holds_no_message_meanwhile(
    run_daemon, stack: Stack, provider: Provider, tmp_path: Path, calls_file: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CFN_TEST_CALLS_FILE", str(calls_file))
    await run_daemon(handlers=POLL_HANDLERS, poll_interval=0.5, concurrency=1)
    request = stack.request(
        "Create", "Snapshot", resource_type="Custom::Poll", properties={"Polls": "3", "AfterSeconds": "1"}
    )
    stack.publish(request)
    store = SQLiteStore(tmp_path / "state.db")
    try:
        key = json.dumps([request["StackId"], request["RequestId"]])

        async def polling() -> bool:
            record = await store.get(key)
            return record is not None and record.state == "POLLING"

        deadline = time.monotonic() + 20
        while not await polling():
            assert time.monotonic() < deadline, "never POLLING"
            await asyncio.sleep(0.05)
        # the message is gone while it waits: no receive is spent, nothing is in flight
        sqs = provider.emulator.client("sqs")
        await asyncio.sleep(0.3)
        assert queue_counts(sqs, provider.queue_url) == (0, 0)
        # and the one slot (--concurrency 1) is free: another request is answered meanwhile
        other = stack.request("Create", "Quick", resource_type="Custom::Test")
        stack.publish(other)
        assert (await response_of(stack, other))["Status"] == "SUCCESS"
        assert await polling(), "the quick request was answered only after the long one"

        answer = await response_of(stack, request, timeout=30)
        assert answer["Status"] == "SUCCESS", answer
        assert answer["PhysicalResourceId"] == f"op-{request['RequestId'][:8]}"
        assert answer["Data"] == {"Polls": 3}
        record = await store.get(key)
        assert record.state == "SENT" and record.request
        wire, dialect = stored_parts(record.request)  # kept with the dialect it came in with
        assert wire["RequestId"] == request["RequestId"] and dialect is CLOUDFORMATION
    finally:
        await store.close()
    assert calls_of(calls_file, request) == Counter({"Create": 1, "poll-start": 3, "poll-done": 3})
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_an_sdk_resource_is_polled_through_its_poll_create(
    run_daemon, stack: Stack, provider: Provider, calls_file: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CFN_TEST_CALLS_FILE", str(calls_file))
    await run_daemon(handlers=POLL_HANDLERS, poll_interval=0.5)
    request = stack.request(
        "Create", "SdkSnapshot", resource_type="Custom::SdkPoll", properties={"Polls": "3", "AfterSeconds": "1"}
    )
    stack.publish(request)
    answer = await response_of(stack, request, timeout=30)
    assert answer["Status"] == "SUCCESS", answer
    assert answer["PhysicalResourceId"] == f"sdk-{request['RequestId'][:8]}"  # the id create's InProgress gave
    assert answer["Data"] == {"Polls": 3, "PollsType": "int"}  # poll_create got the properties converted
    assert calls_of(calls_file, request) == Counter({"Create": 1, "poll-done": 3})
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


async def test_a_raising_poll_fails_with_the_id_the_action_gave(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=POLL_HANDLERS, poll_interval=0.5)
    request = stack.request(
        "Create",
        "Broken",
        resource_type="Custom::Poll",
        properties={"PollRaise": "the snapshot failed", "AfterSeconds": "1"},
    )
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "FAILED"
    assert answer["Reason"] == "RuntimeError: the snapshot failed (traceback in the provider's log: handler.raised)"
    assert answer["PhysicalResourceId"] == f"op-{request['RequestId'][:8]}"  # the rollback Delete can clean up


async def test_in_progress_without_a_poll_function_is_failed_saying_so(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=POLL_HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Unpollable", resource_type="Custom::NoPoll")
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "FAILED"
    assert "returned InProgress" in answer["Reason"] and "poll_create or is_complete" in answer["Reason"]
    assert answer["PhysicalResourceId"] == "never-polled"


async def test_the_deadline_holds_for_a_poll_that_never_finishes(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=POLL_HANDLERS, poll_interval=0.5)
    request = stack.request(
        "Create",
        "Forever",
        resource_type="Custom::Poll",
        properties={"Polls": "100000", "AfterSeconds": "1", "ServiceTimeout": "6"},
    )
    published = time.time()
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert time.time() - published < 6, "answered after the ServiceTimeout"
    assert answer["Status"] == "FAILED" and "timed out" in answer["Reason"]
    assert answer["PhysicalResourceId"] == f"op-{request['RequestId'][:8]}"


# ---------------------------------------------------------------------------------- SIGKILL
@pytest.mark.slow
def test_polling_resumes_after_sigkill_mid_poll_and_create_runs_once(
    spawn, stack: Stack, provider: Provider, calls_file: Path
) -> None:
    first = spawn("first", *POLL_ARGS, "--visibility-timeout", "5")
    request = stack.request(
        "Create",
        "Slow",
        resource_type="Custom::Poll",
        properties={"Polls": "3", "AfterSeconds": "1", "PollSleepSeconds": "2"},
    )
    stack.publish(request)
    wait_until(lambda: calls_of(calls_file, request)["poll-start"] >= 2, 30, "the second poll to start")
    first.kill()  # mid-poll: its progress says one poll done; the lease lapses after 5 s
    assert calls_of(calls_file, request)["poll-done"] == 1, "the test means to kill mid-poll"

    second = spawn("second", *POLL_ARGS, "--visibility-timeout", "5")
    answer = stack.response(request, timeout=40)
    assert answer is not None and answer["Status"] == "SUCCESS", answer
    assert answer["Data"] == {"Polls": 3}  # resumed from the stored progress: polls 2 and 3 ran again here
    assert answer["PhysicalResourceId"] == f"op-{request['RequestId'][:8]}"
    event = wait_for_event(second, event="request", request_id=request["RequestId"], outcome="answered")
    assert event["polls"] >= 2
    assert stop_gracefully(second) == 0
    calls = calls_of(calls_file, request)
    assert calls["Create"] == 1, calls
    assert calls["poll-done"] == 3 and calls["poll-start"] == 4, calls  # the killed poll is the one re-run
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


@pytest.mark.slow
def test_a_stopping_daemon_hands_its_poll_over(spawn, stack: Stack, calls_file: Path) -> None:
    first = spawn("first", *POLL_ARGS, "--visibility-timeout", "30", "--grace-period", "1")
    request = stack.request(
        "Create",
        "HandedOver",
        resource_type="Custom::Poll",
        properties={"Polls": "3", "AfterSeconds": "1", "PollSleepSeconds": "3"},
    )
    stack.publish(request)
    wait_until(lambda: calls_of(calls_file, request)["poll-start"] >= 1, 30, "the first poll to start")
    assert stop_gracefully(first) == 0  # SIGTERM: the running step is cut at the grace period, its lease let go
    second = spawn("second", *POLL_ARGS, "--visibility-timeout", "30")
    started = time.monotonic()
    answer = stack.response(request, timeout=40)
    assert answer is not None and answer["Status"] == "SUCCESS" and answer["Data"] == {"Polls": 3}
    assert time.monotonic() - started < 20, "the poll waited for its 30 s lease: it was not handed over"
    assert stop_gracefully(second) == 0
    assert calls_of(calls_file, request)["Create"] == 1


# ---------------------------------------------------------------------------------- fleet
@pytest.mark.slow
def test_a_fleet_takes_over_the_poll_of_a_killed_member_and_create_runs_once(
    emulator: Emulator, tmp_path: Path, calls_file: Path
) -> None:
    make_dynamodb_writes_atomic()
    name = f"polls-{uuid.uuid4().hex[:10]}"
    table = f"{name}-state"
    outcome = Bootstrap(boto3.Session(region_name=REGION), name=name, dynamodb_table=table, visibility_timeout=10).run()
    emulator.client("s3").create_bucket(Bucket=name)
    provider = Provider(emulator, name, outcome.topic_arn, outcome.queue_url, name, outcome.dlq_url)
    stack = Stack(provider)
    members = [
        fleet_member(
            emulator,
            provider,
            table,
            tmp_path / f"m{i}.log",
            env={"CFN_TEST_CALLS_FILE": str(calls_file)},
            extra_args=[*POLL_ARGS, "--visibility-timeout", "5"],
        ).start()
        for i in range(2)
    ]
    try:
        owners = {wait_for_event(m, event="started")["owner"]: m for m in members}
        request = stack.request(
            "Create",
            "Fleet",
            resource_type="Custom::Poll",
            properties={"Polls": "3", "AfterSeconds": "1", "PollSleepSeconds": "2"},
        )
        stack.publish(request)
        ddb = emulator.client("dynamodb")
        pk = {"pk": {"S": json.dumps([request["StackId"], request["RequestId"]])}}

        def stepping() -> str | None:  # the member running a poll step right now
            item = ddb.get_item(TableName=table, Key=pk, ConsistentRead=True).get("Item") or {}
            live = float(item.get("lease_until", {}).get("N", 0)) > time.time()
            return item["owner"]["S"] if item.get("state", {}).get("S") == "POLLING" and live else None

        wait_until(lambda: calls_of(calls_file, request)["poll-start"] >= 1, 30, "a poll to start")
        victim = owners[wait_until(stepping, 10, "a member to hold a poll step")]
        victim.kill()
        survivor = next(m for m in members if m is not victim)
        answer = stack.response(request, timeout=45)
        assert answer is not None and answer["Status"] == "SUCCESS" and answer["Data"] == {"Polls": 3}, answer
        wait_for_event(survivor, event="request", request_id=request["RequestId"], outcome="answered")
        survivor.signal(signal.SIGTERM)
        assert survivor.wait(30) == 0
        assert calls_of(calls_file, request)["Create"] == 1
        item = ddb.get_item(TableName=table, Key=pk, ConsistentRead=True)["Item"]
        assert item["state"]["S"] == "SENT" and "poll_shard" not in item  # out of the index once answered
        assert queue_counts(emulator.client("sqs"), provider.queue_url) == (0, 0)
        assert queue_counts(emulator.client("sqs"), provider.dlq_url) == (0, 0)
    finally:
        for m in members:
            m.stop()

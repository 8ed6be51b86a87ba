"""Fleet mode: several daemons on one queue and one DynamoDB table act as one provider.

Real daemon subprocesses (`python -m cfn_provider run --state dynamodb://TABLE`), all on one moto
server: topic, queue, DLQ and table made by `cfn-provider bootstrap`'s own code; answers PUT
to presigned URLs of a versioned S3 bucket, so a second PUT of any answer would show as a
second version.

- Every request published twice, N requests, three daemons: each handler runs once per
  request and each request is answered exactly once.
- The daemon running a handler is SIGKILLed: a survivor takes its lease over once it lapses
  (log field `took_over_from`), runs the handler, and answers once.

N is 300 under `CFN_CHAOS=full` (`make chaos`), smaller in `make test`.

A copy that meets its request held by another attempt (CLAIMED, or RESPONSE_READY while the
owner's lease lives and it is still delivering) waits for it in process, so every request is
PUT exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from cfn_provider.local.emulator import REGION, Emulator, Provider, Stack, key_of
from cfn_provider.ops.bootstrap import Bootstrap
from tests.support.aws import queue_counts
from tests.support.daemons import SubprocessDaemon, fleet_member, recorded_calls, wait_for_event, wait_until
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic

pytestmark = pytest.mark.slow

FULL = os.environ.get("CFN_CHAOS") == "full"
REQUESTS = 300 if FULL else 40
FLEET = 3
TERMINAL = ("answered", "duplicate", "replayed")  # outcomes after which a message is deleted


@pytest.fixture
def fleet_provider(emulator: Emulator) -> tuple[Provider, str]:
    """Topic, queue + DLQ, queue policy, subscription and table, as `cfn-provider bootstrap` makes them."""
    make_dynamodb_writes_atomic()
    name = f"fleet-{uuid.uuid4().hex[:10]}"
    table = f"{name}-state"
    outcome = Bootstrap(boto3.Session(region_name=REGION), name=name, dynamodb_table=table, visibility_timeout=10).run()
    s3 = emulator.client("s3")
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return Provider(emulator, name, outcome.topic_arn, outcome.queue_url, name, outcome.dlq_url), table


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.txt"


@pytest.fixture
def spawn(
    emulator: Emulator, fleet_provider: tuple[Provider, str], tmp_path: Path, calls_file: Path
) -> Iterator[Callable[..., SubprocessDaemon]]:
    """Start fleet members on the one queue and table; every one is killed at teardown."""
    provider, table = fleet_provider
    started: list[SubprocessDaemon] = []

    def start(name: str, *extra_args: str) -> SubprocessDaemon:
        daemon = fleet_member(
            emulator,
            provider,
            table,
            tmp_path / f"{name}.log",
            extra_args=list(extra_args),
            env={"CFN_TEST_CALLS_FILE": str(calls_file)},
        )
        started.append(daemon)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in started:
            daemon.stop()


def versions_by_key(s3: Any, bucket: str) -> Counter:
    counts: Counter = Counter()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            counts[version["Key"]] += 1
    return counts


def request_events(daemons: list[SubprocessDaemon]) -> list[dict[str, Any]]:
    return [dict(e, daemon=i) for i, d in enumerate(daemons) for e in d.events() if e.get("event") == "request"]


def stop_gracefully(daemons: list[SubprocessDaemon]) -> list[int]:
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    return [daemon.wait(60) for daemon in daemons]


# ---------------------------------------------------------------------------------- tests
def test_fleet_answers_every_request_once_although_each_is_published_twice(
    spawn, fleet_provider, emulator: Emulator, calls_file: Path
) -> None:
    provider, _ = fleet_provider
    stack = Stack(provider)
    daemons = [spawn(f"member{i}", "--concurrency", "16", "--visibility-timeout", "10") for i in range(FLEET)]
    requests = [
        stack.request(
            "Create",
            f"R{i}",
            resource_type="Custom::Test",
            properties={
                "SleepSeconds": str((i % 4) * 0.1),  # 0 to 0.3 s: some copies meet a claim in progress
                "ReturnJson": json.dumps({"PhysicalResourceId": f"phys-{i}", "Data": {"I": i}}),
            },
        )
        for i in range(REQUESTS)
    ]
    started = time.monotonic()
    for request in requests:
        body = json.dumps(request)
        stack.publish(body)
        stack.publish(body)  # at-least-once delivery: every request twice, back to back

    s3, sqs = emulator.client("s3"), emulator.client("sqs")
    wait_until(lambda: len(versions_by_key(s3, provider.bucket)) >= REQUESTS, 60 + REQUESTS, "every answer in S3")
    answered_after = time.monotonic() - started
    # the second copies: deleted at once, or deferred while the first was in flight and then deleted
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, 0), 90, "the queue to drain")
    assert stop_gracefully(daemons) == [0] * FLEET

    # each handler ran once per request
    calls = Counter(recorded_calls(calls_file))
    assert calls == Counter({f"{r['RequestId']} Create": 1 for r in requests}), {
        k: v for k, v in calls.items() if v != 1
    }
    # each request answered, with its own answer; every PUT of one request carried the same bytes
    versions = versions_by_key(s3, provider.bucket)
    assert set(versions) == {key_of(r["ResponseURL"])[1] for r in requests}
    for key, count in versions.items():
        if count > 1:
            listing = s3.list_object_versions(Bucket=provider.bucket, Prefix=key)["Versions"]
            bodies = {
                s3.get_object(Bucket=provider.bucket, Key=key, VersionId=v["VersionId"])["Body"].read() for v in listing
            }
            assert len(bodies) == 1, f"{key}: different answers were PUT: {bodies}"
    for i in (0, REQUESTS // 2, REQUESTS - 1):
        answer = stack.response(requests[i], timeout=5)
        assert answer["Status"] == "SUCCESS" and answer["RequestId"] == requests[i]["RequestId"]
        assert answer["PhysicalResourceId"] == f"phys-{i}" and answer["Data"] == {"I": i}

    # the log agrees: 2N messages, each ended once; N of them by running the handler
    events = request_events(daemons)
    outcomes = Counter(e["outcome"] for e in events)
    terminal = [e for e in events if e["outcome"] in TERMINAL]
    assert len(terminal) == 2 * REQUESTS, outcomes
    assert outcomes["answered"] == REQUESTS, outcomes
    assert set(outcomes) <= set(TERMINAL), outcomes
    assert set(Counter(e["request_id"] for e in terminal).values()) == {2}
    answered_by = Counter(e["daemon"] for e in events if e["outcome"] == "answered")
    assert len(answered_by) >= 2, f"one daemon did all the work, the test shows no sharing: {answered_by}"
    assert queue_counts(sqs, provider.dlq_url) == (0, 0)
    print(
        f"\n{REQUESTS} requests x2 on {FLEET} daemons: answered in {answered_after:.1f} s; "
        f"outcomes {dict(outcomes)}; answered per daemon {dict(sorted(answered_by.items()))}"
    )

    # Exactly one PUT per request: a copy waits while the first copy's owner is still delivering
    assert {k: n for k, n in versions.items() if n != 1} == {}
    assert outcomes["replayed"] == 0, outcomes


def test_lease_of_a_killed_member_is_taken_over_by_a_survivor(
    spawn, fleet_provider, emulator: Emulator, calls_file: Path
) -> None:
    provider, table = fleet_provider
    stack = Stack(provider)
    daemons = [spawn(f"member{i}", "--visibility-timeout", "5") for i in range(FLEET)]
    owners = {wait_for_event(d, event="started")["owner"]: d for d in daemons}

    request = stack.request(
        "Create",
        "Slow",
        resource_type="Custom::Test",
        properties={"SleepSeconds": "6", "ReturnJson": json.dumps({"PhysicalResourceId": "slow-1"})},
    )
    stack.publish(request)

    # Who holds it? The store says so: a consistent read of the claim.
    ddb = emulator.client("dynamodb")
    pk = {"pk": {"S": json.dumps([request["StackId"], request["RequestId"]])}}

    def holder() -> str | None:
        item = ddb.get_item(TableName=table, Key=pk, ConsistentRead=True).get("Item")
        return item["owner"]["S"] if item and item["state"]["S"] == "CLAIMED" else None

    first_owner = wait_until(holder, 30, "a member to claim the request")
    victim = owners[first_owner]
    time.sleep(1.0)  # the handler is now sleeping
    victim.kill()  # SIGKILL: no release, no answer; the lease just stops being renewed
    assert recorded_calls(calls_file) == [], "the handler finished before the kill; the test proves nothing"
    survivors = [d for d in daemons if d is not victim]

    answer = stack.response(request, timeout=45)
    assert answer is not None, "no answer after the kill"
    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "slow-1"

    # the request's log line is written after the PUT and the SENT mark: wait for it, not only for S3
    def takeovers() -> list[dict[str, Any]]:
        return [e for e in request_events(survivors) if e.get("took_over_from") == first_owner]

    wait_until(takeovers, 30, "the survivor's request line")
    taken = takeovers()
    assert len(taken) == 1, request_events(survivors)
    assert taken[0]["outcome"] == "answered" and taken[0]["request_id"] == request["RequestId"]
    assert (
        holder() is None and ddb.get_item(TableName=table, Key=pk, ConsistentRead=True)["Item"]["state"]["S"] == "SENT"
    )

    sqs, s3 = emulator.client("sqs"), emulator.client("s3")
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, 0), 30, "the queue to drain")
    assert stop_gracefully(survivors) == [0] * (FLEET - 1)
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]  # re-run once, completed once
    bucket, key = key_of(request["ResponseURL"])
    assert versions_by_key(s3, bucket) == Counter({key: 1})  # exactly one PUT reached S3
    assert queue_counts(sqs, provider.dlq_url) == (0, 0)

"""Chaos suite, lying-network leg: parked answers while the network lies (issue 21, item 2).

A long-running request whose answer cannot be delivered (its ResponseURL answers 403) is parked:
out of the DynamoDB table's `polls` index, no lease held. Before, it stayed in the index under a
30-day lease, and DynamoDB applies a query's Limit before its filter, so once a shard held more
parked entries than the scheduler asks for, no due poll on that shard was ever seen again.

A fleet on one queue and one table, every call to DynamoDB, SQS and S3 through the fault proxy of
tests/chaos/test_network_lies.py (the same schedule of lies), the table on dynalite:
1. long-running Creates whose ResponseURL answers 403, more in every shard of the index than the
   scheduler's query limit (the members' --concurrency), each published twice: all polled, their
   answers tried once and parked, the second copies deleted (not held for a lease);
2. the fleet restarts after the parked entries' next poll has passed (where they used to starve
   the index); good long-running Creates, each published twice, with SIGKILLs meanwhile: every
   one answered SUCCESS once, in time.

Figures (`make chaos` prints them): parked, parked left in the index, good requests unanswered,
conflicting, late, not SUCCESS, create re-runs, dead-lettered, faults injected per service.
"""

from __future__ import annotations

import json
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from cfn_provider.local.emulator import REGION, Emulator, Provider, key_of
from cfn_provider.ops.bootstrap import Bootstrap
from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.stores.dynamodb_items import POLL_INDEX, POLL_SHARDS, shard
from tests.chaos.conftest import Figures, scale
from tests.chaos.test_network_lies import (
    DYNAMODB_FAULTS,
    S3_FAULTS,
    SEED,
    SQS_FAULTS,
    ProxiedStack,
    first_answer_times,
    schedule,
)
from tests.support.aws import bodies_by_key, publish_all, queue_counts
from tests.support.daemons import SubprocessDaemon, fleet_member, recorded_calls, wait_until
from tests.support.dynalite import Dynalite
from tests.support.fault_proxy import FaultProxy
from tests.support.stub_s3 import StubS3

# `dynalite` (tests/chaos/conftest.py) is the fixture the lying-network suite uses: one dynalite per test
pytestmark = pytest.mark.slow

FLEET = 2
CONCURRENCY = 4  # the scheduler asks the store for (free + running) slots' worth of due polls: 4
PARKED_PER_SHARD = scale(CONCURRENCY + 2, 30)  # more than the query limit in every shard
GOOD = scale(20, 100)
KILLS = scale(1, 4)
KILL_GAP = (3, 8)
VISIBILITY = 20  # seconds: the lease; a parked entry's next poll passes this long after it was taken
SERVICE_TIMEOUT = 300
SETTLE = scale(150, 420)
RESOURCE_TYPE = "Custom::Poll"
HANDLER = f"{RESOURCE_TYPE}=tests.support.polling_handlers"


@pytest.fixture
def parked_fleet(emulator: Emulator, dynalite: Dynalite, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Queue + DLQ and the table as bootstrap makes them, a versioned bucket, fault proxies in front of
    DynamoDB (dynalite), SQS and S3 (moto), and a stub S3 that answers 403 for the parked requests."""
    name = f"parked-{uuid.uuid4().hex[:8]}"
    outcome = Bootstrap(boto3.Session(region_name=REGION), name=name, visibility_timeout=VISIBILITY).run()
    table = f"{name}-state"
    dynalite.create_table(table)
    s3 = emulator.client("s3")
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    moto_port = int(emulator.endpoint.rsplit(":", 1)[1])
    proxies = {
        "dynamodb": FaultProxy("dynamodb", dynalite.port, schedule("parked-dynamodb", DYNAMODB_FAULTS)),
        "sqs": FaultProxy("sqs", moto_port, schedule("parked-sqs", SQS_FAULTS)),
        "s3": FaultProxy("s3", moto_port, schedule("parked-s3", S3_FAULTS)),
    }
    for proxy in proxies.values():
        proxy.start()
    try:
        with StubS3() as forbidden:
            yield {
                "provider": Provider(emulator, name, outcome.topic_arn, outcome.queue_url, name, outcome.dlq_url),
                "table": table,
                "proxies": proxies,
                "forbidden": forbidden,
            }
    finally:
        for proxy in proxies.values():
            proxy.stop()


def parked_requests(stack: ProxiedStack, forbidden: StubS3, rng: random.Random) -> list[dict[str, Any]]:
    """Long-running Creates whose ResponseURL answers 403, PARKED_PER_SHARD or more in every shard."""
    out: list[dict[str, Any]] = []
    counts = [0] * POLL_SHARDS
    while min(counts) < PARKED_PER_SHARD:
        req = stack.request(
            "Create",
            f"P{len(out):04d}",
            resource_type=RESOURCE_TYPE,
            properties={"Polls": "1", "AfterSeconds": "1", "ServiceTimeout": str(SERVICE_TIMEOUT)},
            request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        )
        key = f"parked/{req['RequestId']}"
        forbidden.fail_with(403, key=key)
        req["ResponseURL"] = forbidden.url(key)
        counts[int(shard(idempotency_key(req["StackId"], req["RequestId"])))] += 1
        out.append(req)
    return out


def in_poll_index(dynalite: Dynalite, table: str) -> set[str]:
    """The keys the `polls` index lists now."""
    client, keys = dynalite.client(), set()
    for part in range(POLL_SHARDS):
        for page in client.get_paginator("query").paginate(
            TableName=table,
            IndexName=POLL_INDEX,
            KeyConditionExpression="poll_shard = :s",
            ExpressionAttributeValues={":s": {"S": str(part)}},
        ):
            keys |= {item["pk"]["S"] for item in page.get("Items", [])}
    return keys


def test_parked_answers_starve_no_poll_while_the_network_lies(
    parked_fleet: dict[str, Any],
    dynalite: Dynalite,
    emulator: Emulator,
    tmp_path: Path,
    calls_file: Path,
    figures: Figures,
) -> None:
    began = time.monotonic()
    rng = random.Random(f"{SEED}:parked")
    provider: Provider = parked_fleet["provider"]
    proxies: dict[str, FaultProxy] = parked_fleet["proxies"]
    forbidden: StubS3 = parked_fleet["forbidden"]
    table: str = parked_fleet["table"]
    stack = ProxiedStack(provider, proxies["s3"].url)
    s3, sqs = emulator.client("s3"), emulator.client("sqs")
    env = {
        "AWS_ENDPOINT_URL_SQS": proxies["sqs"].url,
        "AWS_ENDPOINT_URL_DYNAMODB": proxies["dynamodb"].url,
        "CFN_TEST_CALLS_FILE": str(calls_file),
    }
    members: list[SubprocessDaemon] = []
    generation: Counter = Counter()

    def start(slot: int) -> SubprocessDaemon:
        generation[slot] += 1
        daemon = fleet_member(
            emulator,
            provider,
            table,
            tmp_path / f"m{slot}-g{generation[slot]}.log",
            extra_args=[
                "--handler",
                HANDLER,
                "--allow-response-url",
                proxies["s3"].url + "/",
                "--allow-response-url",
                forbidden.base_url,
                "--poll-interval",
                "1",
                "--visibility-timeout",
                str(VISIBILITY),
                "--concurrency",
                str(CONCURRENCY),
            ],
            env=env,
        )
        members.append(daemon)
        return daemon.start()

    def stop_all(running: dict[int, SubprocessDaemon]) -> list[int]:
        for daemon in running.values():
            daemon.signal(signal.SIGTERM)
        return [daemon.wait(60) for daemon in running.values()]

    parked = parked_requests(stack, forbidden, rng)
    parked_keys = {idempotency_key(r["StackId"], r["RequestId"]) for r in parked}
    exits: list[int] = []
    try:
        # ---- 1. the parked answers: polled, tried (403), parked; their second copies deleted
        publish_all(stack, [r for r in parked for _ in range(2)])
        running = {slot: start(slot) for slot in range(FLEET)}
        try:
            wait_until(
                lambda: (
                    all(forbidden.requests_for(f"parked/{r['RequestId']}") for r in parked)
                    and queue_counts(sqs, provider.queue_url) == (0, 0)
                ),
                SETTLE,
                "every parked answer tried",
            )
        except AssertionError:
            pass  # measured below
        exits += stop_all(running)
        time.sleep(VISIBILITY + 2)  # every parked entry's next poll has passed: where they used to starve the index

        # ---- 2. good requests, after a restart, with SIGKILLs
        good = [
            stack.request(
                "Create",
                f"G{i:04d}",
                resource_type=RESOURCE_TYPE,
                properties={"Polls": "2", "AfterSeconds": "1", "ServiceTimeout": str(SERVICE_TIMEOUT)},
                request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            )
            for i in range(GOOD)
        ]
        by_key = {key_of(r["ResponseURL"])[1]: r for r in good}
        published_at = time.time()
        publish_all(stack, [r for r in good for _ in range(2)])
        running = {slot: start(slot) for slot in range(FLEET)}
        kills = 0
        for _ in range(KILLS):
            time.sleep(rng.uniform(*KILL_GAP))
            slot = rng.randrange(FLEET)
            running[slot].kill()
            kills += 1
            running[slot] = start(slot)
        try:
            wait_until(
                lambda: (
                    len(first_answer_times(s3, provider.bucket, f"{stack.name}/")) >= GOOD
                    and queue_counts(sqs, provider.queue_url) == (0, 0)
                ),
                SETTLE,
                "every good request answered",
            )
        except AssertionError:
            pass  # measured below
        exits += stop_all(running)
    finally:
        for daemon in members:
            daemon.stop()

    bodies = bodies_by_key(s3, provider.bucket, f"{stack.name}/")
    unanswered = sorted(r["RequestId"] for k, r in by_key.items() if k not in bodies)
    conflicting = sorted(by_key[k]["RequestId"] for k, bs in bodies.items() if k in by_key and len(set(bs)) > 1)
    not_success = sorted(
        by_key[k]["RequestId"]
        for k, bs in bodies.items()
        if k in by_key and json.loads(bs[-1]).get("Status") != "SUCCESS"
    )
    late = sorted(
        by_key[k]["RequestId"]
        for k, t in first_answer_times(s3, provider.bucket, f"{stack.name}/").items()
        if k in by_key and t > published_at + SERVICE_TIMEOUT
    )
    parked_tries = [len(forbidden.requests_for(f"parked/{r['RequestId']}")) for r in parked]
    left_in_index = len(in_poll_index(dynalite, table) & parked_keys)
    creates = Counter(line.split(" ", 1)[0] for line in recorded_calls(calls_file) if line.endswith(" Create"))
    dead = sum(queue_counts(sqs, provider.dlq_url))

    figures.set("seed", SEED)
    figures.set("members", FLEET)
    figures.set("query_limit", CONCURRENCY)
    figures.set("parked", len(parked))
    figures.set("parked_per_shard_min", PARKED_PER_SHARD)
    figures.set("parked_never_tried", sum(1 for n in parked_tries if n == 0))
    figures.set("parked_put_tries_max", max(parked_tries, default=0))
    figures.set("parked_left_in_poll_index", left_in_index)
    figures.set("good_requests", GOOD)
    figures.set("kills", kills)
    figures.set("unanswered", len(unanswered))
    figures.set("conflicting_bodies", len(conflicting))
    figures.set("answered_not_success", len(not_success))
    figures.set("late_answers", len(late))
    figures.set("create_reruns", sum(n - 1 for n in creates.values() if n > 1))
    figures.set("dlq_messages", dead)
    for service, proxy in proxies.items():
        figures.set(f"faults_{service}", dict(sorted((f, n) for f, n in proxy.faults().items() if f != "pass")))
    figures.set("seconds", round(time.monotonic() - began, 1))
    print(
        f"\nparked answers: {len(parked)} parked ({PARKED_PER_SHARD}+ per shard, query limit {CONCURRENCY}), "
        f"{GOOD} good x2, {kills} kills: unanswered {len(unanswered)}, conflicting {len(conflicting)}, "
        f"late {len(late)}, parked left in the index {left_in_index}"
    )

    problems = []
    if unanswered:
        problems.append(f"{len(unanswered)} good request(s) never answered: {unanswered[:5]}")
    if conflicting:
        problems.append(f"{len(conflicting)} answered with two different bodies: {conflicting[:5]}")
    if not_success:
        problems.append(f"{len(not_success)} answered other than SUCCESS: {not_success[:5]}")
    if late:
        problems.append(f"{len(late)} answered after their deadline: {late[:5]}")
    if any(n == 0 for n in parked_tries):
        problems.append(f"{sum(1 for n in parked_tries if n == 0)} parked request(s) never polled")
    if left_in_index:
        problems.append(f"{left_in_index} parked answer(s) still in the poll index")
    if dead:
        problems.append(f"{dead} message(s) dead-lettered")
    if any(code != 0 for code in exits):
        problems.append(f"members exited {exits} after SIGTERM")
    assert not problems, "\n".join(problems)

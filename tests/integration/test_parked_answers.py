"""Parked answers starve nothing (issue 21, item 2), through the real path: SNS -> SQS -> daemon ->
S3, the store on dynalite (an independent DynamoDB, whose queries apply Limit before the filter as
DynamoDB does) or SQLite.

A long-running request whose answer cannot be delivered (its ResponseURL answers 403) is parked:
it leaves the `polls` index and holds no lease. So:
- more parked answers than the scheduler's query limit, in every shard of the index, do not hide
  the polls that are due: those requests are still answered;
- a later copy of a parked request (an older release parked with a 30-day lease) never waits in
  the daemon for that lease: it is answered from the store (a FAILED re-sent to a new URL) or,
  for the URL that cannot be reached, deleted, within its own deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider, Stack
from cfn_provider.pipeline.poll_steps import PollState
from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.stores.base import url_digest
from cfn_provider.stores.dynamodb import DynamoDBStore
from cfn_provider.stores.dynamodb_items import POLL_SHARDS, shard
from cfn_provider.stores.sqlite import SQLiteStore
from tests.support.aws import queue_counts, response_of
from tests.support.daemons import TEST_HANDLERS
from tests.support.dynalite import Dynalite, DynaliteMissing, make_table
from tests.support.stub_s3 import StubS3

POLL_HANDLERS = TEST_HANDLERS + (("Custom::Poll", "tests.support.polling_handlers"),)
CONCURRENCY = 2  # the scheduler asks the store for (free + running) slots' worth of due polls: 2
LEASE = 3  # seconds (the visibility timeout): a parked answer's next poll passes after it


@pytest.fixture(scope="module")
def dynalite() -> Iterator[Dynalite]:
    try:
        db = Dynalite()
    except DynaliteMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    with db:
        yield db


@pytest.fixture
def dynamodb_state(dynalite: Dynalite, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh fleet table on dynalite, made by bootstrap's code; the daemon's DynamoDB endpoint."""
    table = f"parked-{time.monotonic_ns()}"
    make_table(dynalite.client(), table)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynalite.endpoint)
    return table


def forbidden(s3: StubS3, key: str) -> str:
    """A ResponseURL that answers every PUT with 403 AccessDenied."""
    s3.fail_with(403, key=key)
    return s3.url(key)


def parked_requests(stack: Stack, s3: StubS3, per_shard: int) -> list[dict[str, Any]]:
    """Long-running Creates whose ResponseURL answers 403, at least `per_shard` in every shard of
    the `polls` index."""
    out: list[dict[str, Any]] = []
    counts = [0] * POLL_SHARDS
    while min(counts) < per_shard:
        req = stack.request(
            "Create", f"Parked{len(out)}", resource_type="Custom::Poll", properties={"Polls": "1", "AfterSeconds": "1"}
        )
        req["ResponseURL"] = forbidden(s3, f"parked/{req['RequestId']}")
        counts[int(shard(idempotency_key(req["StackId"], req["RequestId"])))] += 1
        out.append(req)
    return out


async def test_more_parked_answers_than_the_query_limit_do_not_starve_due_polls(
    run_daemon, stack: Stack, provider: Provider, stub_s3: StubS3, dynamodb_state: str
) -> None:
    await run_daemon(
        handlers=POLL_HANDLERS,
        poll_interval=0.5,
        concurrency=CONCURRENCY,
        visibility_timeout=LEASE,
        state=f"dynamodb://{dynamodb_state}",
        allow_response_urls=(provider.emulator.endpoint + "/", stub_s3.base_url),
    )
    parked = parked_requests(stack, stub_s3, per_shard=CONCURRENCY + 3)
    for req in parked:
        stack.publish(req)
    deadline = time.monotonic() + 90
    while any(not stub_s3.requests_for(f"parked/{r['RequestId']}") for r in parked):
        assert time.monotonic() < deadline, "polls hidden behind parked answers: some requests were never polled"
        await asyncio.sleep(0.2)
    await asyncio.sleep(LEASE + 2)  # every parked answer's next poll has passed by now

    good = [
        stack.request(
            "Create", f"Good{i}", resource_type="Custom::Poll", properties={"Polls": "2", "AfterSeconds": "1"}
        )
        for i in range(4)
    ]
    for req in good:
        stack.publish(req)
    answers = await asyncio.gather(*(response_of(stack, req, timeout=45) for req in good))
    unanswered = [req["LogicalResourceId"] for req, answer in zip(good, answers, strict=True) if answer is None]
    assert not unanswered, f"due polls hidden behind {len(parked)} parked answers: {unanswered} never answered"
    assert all(answer["Status"] == "SUCCESS" and answer["Data"] == {"Polls": 2} for answer in answers)
    assert all(len(stub_s3.requests_for(f"parked/{r['RequestId']}")) == 1 for r in parked)  # parked: never again


def legacy_parked(request: dict[str, Any], status: str) -> Callable[[Any], Awaitable[None]]:
    """The store calls an older release made for a polled answer whose PUT got 403: the answer
    leased for 30 days (still listed in the poll index, its next poll a minute away)."""
    key, token = idempotency_key(request["StackId"], request["RequestId"]), "step-token"
    body = json.dumps(
        {
            "Status": status,
            "Reason": "" if status == "SUCCESS" else "the snapshot failed",
            "PhysicalResourceId": "op-parked",
            "StackId": request["StackId"],
            "RequestId": request["RequestId"],
            "LogicalResourceId": request["LogicalResourceId"],
        }
    ).encode()
    progress = PollState({"polls": 1}, "op-parked", time.time() + 3000, 1, time.time()).dumps()

    async def calls(store: Any) -> None:
        assert (
            await store.claim(
                key, "old-daemon", url_digest(request["ResponseURL"]), 60, token="claim", request=json.dumps(request)
            )
        ).acquired
        assert await store.save_progress(key, "claim", progress, time.time())
        assert await store.take_poll(key, "old-daemon", 60, token=token) is not None
        assert await store.save_response(key, token, status, body)
        assert await store.extend(key, token, 30 * 24 * 3600)

    return calls


@pytest.mark.parametrize("backend", ["sqlite", "dynamodb"])
async def test_a_later_copy_of_a_parked_request_never_waits_for_its_lease(
    backend: str,
    request: pytest.FixtureRequest,
    run_daemon,
    stack: Stack,
    provider: Provider,
    stub_s3: StubS3,
    tmp_path: Path,
) -> None:
    if backend == "dynamodb":
        table = request.getfixturevalue("dynamodb_state")
        state, store = f"dynamodb://{table}", DynamoDBStore(table)
    else:
        state, store = f"sqlite://{tmp_path}/state.db", SQLiteStore(tmp_path / "state.db")
    unreachable = stack.request("Create", "Unreachable", resource_type="Custom::Poll")
    unreachable["ResponseURL"] = forbidden(stub_s3, "unreachable")
    retried = stack.request("Create", "Retried", resource_type="Custom::Poll")
    first_try = {**retried, "ResponseURL": forbidden(stub_s3, "retried-first")}
    try:
        await legacy_parked(unreachable, "SUCCESS")(store)
        await legacy_parked(first_try, "FAILED")(store)
    finally:
        await store.close()

    with capture_logs() as logs:
        await run_daemon(
            handlers=POLL_HANDLERS,
            poll_interval=0.5,
            state=state,
            allow_response_urls=(provider.emulator.endpoint + "/", stub_s3.base_url),
        )
        stack.publish(unreachable)  # a copy for the URL that answers 403
        stack.publish(retried)  # CloudFormation asking again, with a new URL
        answer = await response_of(stack, retried, timeout=20)
        assert answer is not None, "the copy with a new URL waited for the 30-day lease"
        assert answer["Status"] == "FAILED" and answer["PhysicalResourceId"] == "op-parked"  # from the store
        sqs = provider.emulator.client("sqs")
        deadline = time.monotonic() + 20
        while queue_counts(sqs, provider.queue_url) != (0, 0):
            assert time.monotonic() < deadline, "the copy for the unreachable URL waited for the 30-day lease"
            await asyncio.sleep(0.2)
    outcomes = {e["response_url"].split("/")[3].split("?")[0]: e for e in logs if e["event"] == "request"}
    assert outcomes["unreachable"]["outcome"] == "replayed" and outcomes["unreachable"]["delivered"] is False
    assert outcomes[retried["ResponseURL"].split("/")[3].split("?")[0]]["outcome"] == "replayed"
    assert len(stub_s3.requests_for("unreachable")) == 1  # one try at the stored answer: final 403

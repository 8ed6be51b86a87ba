"""At-least-once delivery in, exactly one answer out: StackId + RequestId is the key."""

from __future__ import annotations

import asyncio
import json

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import queue_counts, response_of


async def test_duplicate_delivery_runs_the_handler_once(run_daemon, stack: Stack, provider: Provider) -> None:
    daemon = await run_daemon()
    req = stack.request("Create", "Dup", resource_type="Custom::Test", properties={"SleepSeconds": "0.5"})
    stack.publish(req)
    stack.publish(req)  # SNS/SQS at-least-once: the same request twice
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "SUCCESS"
    # copies that arrived while the first was in flight are deferred briefly, then seen as answered
    sqs = provider.emulator.client("sqs")
    for _ in range(300):
        if queue_counts(sqs, provider.queue_url) == (0, 0):
            break
        await asyncio.sleep(0.1)
    assert queue_counts(sqs, provider.queue_url) == (0, 0)
    await daemon.stop()
    assert handlers.count(req["RequestId"]) == 1


async def test_redelivery_resends_the_stored_body_without_rerunning(run_daemon, stack: Stack, emulator) -> None:
    """The first PUT fails for good (bucket missing: a final 4xx); the stored body is re-sent later."""
    await run_daemon()
    late_bucket = f"{stack.provider.bucket}-late"
    req = stack.request(
        "Create",
        "Late",
        resource_type="Custom::Test",
        properties={"ReturnJson": json.dumps({"Data": {"Token": "abc"}})},
    )
    req["ResponseURL"] = stack.response_url(f"late/{req['RequestId']}", bucket=late_bucket)
    stack.publish(req)
    for _ in range(100):
        if handlers.count(req["RequestId"]):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # the 404 is final: the message is deleted, the body stays stored
    emulator.client("s3").create_bucket(Bucket=late_bucket)
    stack.publish(req)  # CloudFormation-side redelivery of the same request
    resp = await response_of(stack, req)
    assert resp["Status"] == "SUCCESS" and resp["Data"] == {"Token": "abc"}
    assert handlers.count(req["RequestId"]) == 1


async def test_same_request_new_url_resends_a_stored_success(run_daemon, stack: Stack) -> None:
    await run_daemon()
    first = stack.request(
        "Create",
        "Again",
        resource_type="Custom::Test",
        properties={"ReturnJson": json.dumps({"PhysicalResourceId": "p-1"})},
    )
    stack.publish(first)
    assert (await response_of(stack, first))["Status"] == "SUCCESS"
    retry = dict(first, ResponseURL=stack.response_url(f"retry/{first['RequestId']}"))
    stack.publish(retry)
    resp = await response_of(stack, retry)
    assert resp == await response_of(stack, first)
    assert handlers.count(first["RequestId"]) == 1


async def test_same_request_new_url_reruns_after_a_stored_failure(run_daemon, stack: Stack) -> None:
    await run_daemon()
    first = stack.request("Create", "Flaky", resource_type="Custom::Test", properties={"Raise": "not yet"})
    stack.publish(first)
    assert (await response_of(stack, first))["Status"] == "FAILED"
    retry = dict(first, ResponseURL=stack.response_url(f"retry/{first['RequestId']}"))
    stack.publish(retry)
    resp = await response_of(stack, retry)
    assert resp["Status"] == "FAILED" and resp["Reason"].startswith("RuntimeError: not yet")
    assert handlers.started.count((first["RequestId"], "Create")) == 2  # re-run for the new URL
    stack.publish(first)  # the first URL again: already answered there, so not run a third time
    await asyncio.sleep(2.0)
    assert handlers.started.count((first["RequestId"], "Create")) == 2

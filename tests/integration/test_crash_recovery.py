"""A daemon killed outright (SIGKILL, power loss) loses nothing a user relies on.

- Killed after the response was stored but before CloudFormation got it: the next daemon
  re-sends the very same stored body and does NOT run the handler again.
- Killed while the handler runs: the next daemon takes the request over once the lease and
  the message's visibility lapse, runs the handler, and answers exactly once.

Real daemon subprocesses, real moto SNS -> SQS, real presigned S3 URLs. The "S3 that is
down" is tests.support.stub_s3.StubS3, a real HTTP server on 127.0.0.1 that answers 503
until told to serve PUTs again, and then keeps what was PUT for the test to read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cfn_provider.local.emulator import Provider, Stack, key_of
from tests.support.aws import queue_counts
from tests.support.daemons import recorded_calls, stop_gracefully, wait_for_event, wait_until
from tests.support.stub_s3 import StubS3

pytestmark = pytest.mark.slow

VISIBILITY = "5"  # seconds; so a killed daemon's message comes back quickly


@pytest.fixture
def daemon_args() -> tuple[str, ...]:
    return ("--visibility-timeout", VISIBILITY)


def test_crash_after_response_stored_is_resent_without_rerunning_handler(
    spawn, stack: Stack, provider: Provider, stub_s3: StubS3, calls_file: Path
) -> None:
    stub_s3.fail_with(503)  # S3 is down: every PUT gets 503 SlowDown until pass_through()
    first = spawn("first", "--allow-response-url", stub_s3.base_url)
    request = stack.request(
        "Create",
        "Crashy",
        resource_type="Custom::Test",
        properties={
            "ReturnJson": json.dumps({"PhysicalResourceId": "crashy-1", "Data": {"Token": "t-123"}}),
        },
    )
    key = f"responses/{request['RequestId']}"
    request["ResponseURL"] = stub_s3.url(key, expires_in=7200, sigv2=True)  # like the real ones: SigV2, 2 h

    def failed_puts() -> list[bytes]:
        return [r.body for r in stub_s3.requests_for(key, "PUT") if r.action == "fail"]

    stack.publish(request)

    # The first PUT attempt means the handler ran and its answer is stored (stored before any PUT).
    attempted = wait_until(failed_puts, 30, "a first PUT attempt")
    first.kill()  # SIGKILL, mid-retry
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]
    before_crash = attempted[0]
    assert all(body == before_crash for body in failed_puts())

    stub_s3.pass_through()
    second = spawn("second", "--allow-response-url", stub_s3.base_url)
    wait_until(lambda: stub_s3.bodies(key), 30, "the response to be re-sent")
    event = wait_for_event(second, event="request", request_id=request["RequestId"], timeout=15)
    assert stop_gracefully(second) == 0

    delivered = stub_s3.bodies(key)
    assert delivered == [before_crash]  # byte for byte what was attempted before the crash, once
    assert stub_s3.put_count(key) == len(failed_puts()) + 1  # and no other PUT since S3 came back
    answer = json.loads(delivered[0])
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == "crashy-1" and answer["Data"] == {"Token": "t-123"}
    assert answer["RequestId"] == request["RequestId"] and answer["StackId"] == request["StackId"]
    # the handler was not run again
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]
    assert event["outcome"] == "replayed" and event["delivered"] is True
    # CloudFormation reads it from S3
    assert json.loads(stub_s3.body(key)) == answer
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


def test_crash_during_handler_reruns_it_once_lease_lapses(
    spawn, stack: Stack, provider: Provider, calls_file: Path
) -> None:
    s3 = provider.emulator.client("s3")
    s3.put_bucket_versioning(Bucket=provider.bucket, VersioningConfiguration={"Status": "Enabled"})
    sqs = provider.emulator.client("sqs")
    first = spawn("first")
    first_owner = wait_for_event(first, event="started")["owner"]

    request = stack.request(
        "Create",
        "Slow",
        resource_type="Custom::Test",
        properties={"SleepSeconds": "6", "ReturnJson": json.dumps({"PhysicalResourceId": "slow-1"})},
    )
    stack.publish(request)
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, 1), 30, "the first daemon to take the message")
    time.sleep(2)  # the claim is written right after receipt; the handler is now sleeping
    first.kill()
    assert recorded_calls(calls_file) == [], "the handler finished before the kill; the test proves nothing"

    second = spawn("second")
    answer = stack.response(request, timeout=35)
    assert answer is not None, "no response after the crash"
    event = wait_for_event(second, event="request", request_id=request["RequestId"], outcome="answered", timeout=15)
    assert stop_gracefully(second) == 0

    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "slow-1"
    assert event["took_over_from"] == first_owner  # a lapsed lease was taken over
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]  # re-run, completed once
    bucket, key = key_of(request["ResponseURL"])
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    assert len(versions.get("Versions", [])) == 1  # exactly one PUT reached S3
    assert queue_counts(sqs, provider.queue_url) == (0, 0)

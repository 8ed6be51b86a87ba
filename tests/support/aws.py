"""Reading what the daemon did, from the emulator's side."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from typing import Any

from cfn_provider.local.emulator import Provider, Stack


async def response_of(stack: Stack, request: dict[str, Any], timeout: float = 20.0) -> dict[str, Any] | None:
    return await asyncio.to_thread(stack.response, request, timeout)


def queue_counts(sqs: Any, queue_url: str) -> tuple[int, int]:
    """(visible, in flight) messages on a queue."""
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def exhaust(provider: Provider, bodies: list[str]) -> None:
    """Send `bodies` to the queue and spend their receives (no daemon runs yet), so that SQS
    moves them to the dead-letter queue, as after a handler that crashed the process each time."""
    sqs = provider.emulator.client("sqs")
    before = queue_counts(sqs, provider.dlq_url)[0]
    for body in bodies:
        sqs.send_message(QueueUrl=provider.queue_url, MessageBody=body)
    deadline = time.monotonic() + 30
    while queue_counts(sqs, provider.dlq_url)[0] < before + len(bodies):
        assert time.monotonic() < deadline, "the redrive policy did not move the messages"
        sqs.receive_message(QueueUrl=provider.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0, WaitTimeSeconds=0)
    assert queue_counts(sqs, provider.queue_url) == (0, 0)


async def assert_still_serving(stack: Stack) -> None:
    """The daemon answers the next good message after whatever came before."""
    good = stack.request("Create", "StillServing", properties={"Colour": "after"})
    stack.publish(good)
    resp = await response_of(stack, good)
    assert resp is not None, "the daemon stopped serving"
    assert resp["Status"] == "SUCCESS"


def s3_keys(provider: Any) -> list[str]:
    listing = provider.emulator.client("s3").list_objects_v2(Bucket=provider.bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def send_raw(provider: Provider, body: str) -> str:
    """Put a body straight on the queue, as a forger with SendMessage rights would."""
    return provider.emulator.client("sqs").send_message(QueueUrl=provider.queue_url, MessageBody=body)["MessageId"]


async def wait_for_event(logs: list[dict[str, Any]], event: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
    for _ in range(int(timeout / 0.05)):
        for entry in logs:
            if entry.get("event") == event and all(entry.get(k) == v for k, v in match.items()):
                return entry
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {event} {match} in {[e.get('event') for e in logs]}")


async def wait_until_queue_empty(provider: Provider, timeout: float = 15.0) -> None:
    sqs = provider.emulator.client("sqs")
    for _ in range(int(timeout / 0.1)):
        if queue_counts(sqs, provider.queue_url) == (0, 0):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"queue not empty: {queue_counts(sqs, provider.queue_url)}")


def publish_all(stack: Stack, requests: list[dict[str, Any]]) -> None:
    """Publish the whole burst before any daemon runs: moto's SQS DeleteMessage rebuilds the
    queue's message list without a lock, so a message arriving during a delete can be dropped (and
    a deleted one can come back: a delete lost that way shows as a later `duplicate`)."""
    sns = stack.provider.emulator.client("sns")
    for i in range(0, len(requests), 10):
        sns.publish_batch(
            TopicArn=stack.provider.topic_arn,
            PublishBatchRequestEntries=[
                {"Id": str(n), "Message": json.dumps(r)} for n, r in enumerate(requests[i : i + 10])
            ],
        )


def answered_keys(s3: Any, bucket: str, prefix: str) -> set[str]:
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.update(o["Key"] for o in page.get("Contents", []))
    return keys


def bodies_by_key(s3: Any, bucket: str, prefix: str) -> dict[str, list[bytes]]:
    """Every version of every response object, the latest last."""
    versions: dict[str, list[tuple[Any, str]]] = defaultdict(list)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            versions[v["Key"]].append((v["IsLatest"], v["LastModified"], v["VersionId"]))
    return {
        key: [s3.get_object(Bucket=bucket, Key=key, VersionId=vid)["Body"].read() for _, _, vid in sorted(vs)]
        for key, vs in versions.items()
    }

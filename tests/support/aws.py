"""Reading what the daemon did, from the emulator's side."""
from __future__ import annotations

import asyncio
from typing import Any

from daemon.emulator import Provider, Stack


async def response_of(stack: Stack, request: dict[str, Any], timeout: float = 20.0) -> dict[str, Any] | None:
    return await asyncio.to_thread(stack.response, request, timeout)


def queue_counts(sqs: Any, queue_url: str) -> tuple[int, int]:
    """(visible, in flight) messages on a queue."""
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


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

"""A request that runs longer than the visibility timeout stays with its worker.

While the handler runs, the daemon keeps pushing the message's visibility out, so another
consumer of the same queue (another daemon, or anything else polling it) never sees it, and
the request is answered once, by one handler run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from cfn_provider.local.emulator import Provider, Stack, key_of
from tests.support import handlers
from tests.support.aws import queue_counts, response_of

VISIBILITY = 5
HANDLER_SECONDS = 18  # over 3x the visibility timeout


async def wait_until_in_flight(sqs: Any, queue_url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(queue_counts, sqs, queue_url) != (0, 1):
        assert time.monotonic() < deadline, "the daemon never took the message"
        await asyncio.sleep(0.05)


def watch_queue(sqs: Any, queue_url: str, stop: threading.Event, seen: list[dict], polls: list[float]) -> None:
    """A second consumer: long-poll (1 s) the queue until told to stop, keeping whatever it receives."""
    while not stop.is_set():
        resp = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1, MaxNumberOfMessages=10, VisibilityTimeout=1)
        polls.append(time.monotonic())
        seen.extend(resp.get("Messages", []))


async def test_long_handler_keeps_message_hidden_from_other_consumers(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    s3, sqs = provider.emulator.client("s3"), provider.emulator.client("sqs")
    s3.put_bucket_versioning(Bucket=provider.bucket, VersioningConfiguration={"Status": "Enabled"})
    daemon = await run_daemon(visibility_timeout=VISIBILITY)
    request = stack.request(
        "Create",
        "Long",
        resource_type="Custom::Test",
        properties={
            "SleepSeconds": str(HANDLER_SECONDS),
            "ReturnJson": json.dumps({"PhysicalResourceId": "long-1"}),
        },
    )
    stack.publish(request)
    await wait_until_in_flight(sqs, provider.queue_url)

    stop, seen, polls = threading.Event(), [], []
    watched_from = time.monotonic()
    watcher = asyncio.create_task(
        asyncio.to_thread(watch_queue, provider.emulator.client("sqs"), provider.queue_url, stop, seen, polls)
    )
    try:
        answer = await response_of(stack, request, timeout=HANDLER_SECONDS + 25)
    finally:
        stop.set()
        await watcher
    watched = time.monotonic() - watched_from

    assert answer is not None and answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "long-1"
    assert watched > 3 * VISIBILITY, f"watched only {watched:.1f} s: the test did not outlast the visibility timeout"
    assert len(polls) >= 5
    assert seen == [], "another consumer received the in-flight message"
    assert handlers.count(request["RequestId"]) == 1
    bucket, key = key_of(request["ResponseURL"])
    versions = await asyncio.to_thread(s3.list_object_versions, Bucket=bucket, Prefix=key)
    assert len(versions.get("Versions", [])) == 1  # answered once

    assert await daemon.stop() == 0
    assert await asyncio.to_thread(queue_counts, sqs, provider.queue_url) == (0, 0)

"""Stopping during a long poll strands nothing: what that poll brings back is handed back at once."""

from __future__ import annotations

import asyncio

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import response_of


async def test_message_received_while_stopping_is_visible_again_at_once(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    daemon = await run_daemon(wait_seconds=5)
    await asyncio.sleep(0.5)  # the daemon is now inside a 5 s long poll
    daemon.service.stop()
    req = stack.request("Create", "Late", resource_type="Custom::Test")
    stack.publish(req)  # arrives during that poll, after the stop
    assert await asyncio.wait_for(daemon.task, 30) == 0
    sqs = provider.emulator.client("sqs")
    got = sqs.receive_message(QueueUrl=provider.queue_url, WaitTimeSeconds=0).get("Messages", [])
    assert len(got) == 1, "the message should be visible for another worker right away"
    assert req["RequestId"] not in [request_id for request_id, _ in handlers.started]  # never run here
    assert await response_of(stack, req, timeout=0.5) is None

"""Graceful stop (SIGTERM), as systemd or a container runtime sends it.

- in-flight work within the grace period is finished and answered; nothing new is taken;
- work still running when the grace period ends is handed back to the queue at once
  (visibility 0) when another worker still has time to do it, or answered FAILED when its
  deadline is too near to hand it off;
- a second signal stops at once.

Real daemon subprocesses (`python -m cfn_provider run`), real moto SNS -> SQS, real presigned S3 URLs.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.emulator import Provider, Stack
from tests.support.aws import queue_counts
from tests.support.daemons import exit_code, recorded_calls, stop_gracefully, wait_for_event, wait_until

pytestmark = pytest.mark.slow

ASYNC_HANDLER = ("--handler", "Custom::AsyncTest=tests.support.handlers:async_handler")


@pytest.fixture
def daemon_args() -> tuple[str, ...]:
    return ASYNC_HANDLER


@pytest.fixture
def sqs(provider: Provider) -> Any:
    return provider.emulator.client("sqs")


def wait_in_flight(sqs: Any, provider: Provider, count: int = 1) -> None:
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, count), 30, f"{count} message(s) in flight")


def publish_and_let_run(stack: Stack, sqs: Any, provider: Provider, request: dict[str, Any]) -> None:
    """Publish `request` and return once a daemon has taken it and its handler has run for a second."""
    stack.publish(request)
    wait_in_flight(sqs, provider)
    time.sleep(1)  # the handler is running


def test_sigterm_finishes_in_flight_request_and_stops_receiving(
    spawn, stack: Stack, provider: Provider, sqs: Any, calls_file: Path
) -> None:
    daemon = spawn("d", "--grace-period", "20")
    in_flight = stack.request(
        "Create",
        "Busy",
        resource_type="Custom::Test",
        properties={"SleepSeconds": "5", "ReturnJson": json.dumps({"PhysicalResourceId": "busy-1"})},
    )
    publish_and_let_run(stack, sqs, provider, in_flight)

    daemon.signal(signal.SIGTERM)
    wait_for_event(daemon, event="stopping", timeout=10)
    time.sleep(2.5)  # past any long poll that was already open when the signal came (--wait-seconds 1)
    late = stack.request("Create", "Late", resource_type="Custom::Test")
    stack.publish(late)

    assert exit_code(daemon, 30, "after SIGTERM with a 5 s handler and a 20 s grace period") == 0
    answer = stack.response(in_flight, timeout=2)
    assert answer is not None and answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "busy-1"
    assert recorded_calls(calls_file) == [f"{in_flight['RequestId']} Create"]
    # the in-flight message was deleted; the one published after SIGTERM was never taken
    assert queue_counts(sqs, provider.queue_url) == (1, 0)
    assert stack.response(late, timeout=0) is None
    assert wait_for_event(daemon, event="stopped", timeout=1)["handled"] == 1


def test_grace_period_over_hands_request_back_and_exits_promptly(
    spawn, stack: Stack, provider: Provider, sqs: Any
) -> None:
    """A sync handler (the common, Lambda-ported kind) still running when the grace period ends:
    the message is released at once and the daemon exits, even though the thread cannot be killed."""
    daemon = spawn("d", "--grace-period", "1")
    request = stack.request("Create", "Long", resource_type="Custom::Test", properties={"SleepSeconds": "30"})
    publish_and_let_run(stack, sqs, provider, request)
    signalled = time.monotonic()
    daemon.signal(signal.SIGTERM)

    # back on the queue within seconds, not after the 60 s visibility timeout
    got = wait_until(
        lambda: sqs.receive_message(QueueUrl=provider.queue_url, WaitTimeSeconds=1, VisibilityTimeout=2).get(
            "Messages"
        ),
        20,
        "the message to be visible again",
    )
    released_after = time.monotonic() - signalled
    assert json.loads(json.loads(got[0]["Body"])["Message"])["RequestId"] == request["RequestId"]
    assert released_after < 20
    assert wait_for_event(daemon, event="request", outcome="released", timeout=1)

    # the 30 s handler thread must not hold the process: grace 1 s + settling, far below 30 s
    assert exit_code(daemon, 15, "after its grace period (1 s) with a 30 s sync handler still running") == 0
    assert stack.response(request, timeout=0) is None
    # the thread left running is logged with what really became of its request
    orphaned = wait_for_event(daemon, event="handler.orphaned", timeout=1)
    assert "handed back to the queue" in orphaned["detail"] and "answer" not in orphaned["detail"]


def test_released_request_is_answered_by_the_next_daemon(
    spawn, stack: Stack, provider: Provider, sqs: Any, calls_file: Path
) -> None:
    first = spawn("first", "--grace-period", "1")
    request = stack.request(
        "Create",
        "Handoff",
        resource_type="Custom::AsyncTest",
        properties={"SleepSeconds": "10", "ReturnJson": json.dumps({"PhysicalResourceId": "handoff-1"})},
    )
    publish_and_let_run(stack, sqs, provider, request)
    first.signal(signal.SIGTERM)
    assert exit_code(first, 20, "after its grace period (1 s)") == 0
    assert wait_for_event(first, event="request", outcome="released", timeout=1)
    assert stack.response(request, timeout=0) is None  # nothing was sent
    # visible again at once (visibility 0), not after the 60 s visibility timeout
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (1, 0), 10, "the message to be visible again")

    second = spawn("second")
    answer = stack.response(request, timeout=30)
    assert answer is not None and answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "handoff-1"
    wait_for_event(second, event="request", request_id=request["RequestId"], outcome="answered", timeout=10)
    assert stop_gracefully(second, 30, "after SIGTERM when idle") == 0
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]  # the cancelled run never completed
    assert queue_counts(sqs, provider.queue_url) == (0, 0)


@pytest.mark.parametrize("resource_type", ["Custom::AsyncTest", "Custom::Test"])
def test_grace_period_over_near_deadline_answers_failed(
    spawn, stack: Stack, provider: Provider, sqs: Any, calls_file: Path, resource_type: str
) -> None:
    """With under HANDOFF_MARGIN (60 s) left before the deadline, no other worker could finish
    in time: answer FAILED now rather than let the stack hang until ServiceTimeout."""
    daemon = spawn("d", "--grace-period", "1")
    request = stack.request(
        "Create", "Tight", resource_type=resource_type, properties={"SleepSeconds": "30", "ServiceTimeout": "50"}
    )
    publish_and_let_run(stack, sqs, provider, request)
    daemon.signal(signal.SIGTERM)

    assert exit_code(daemon, 25, "after its grace period (1 s)") == 0
    answer = stack.response(request, timeout=2)
    assert answer is not None and answer["Status"] == "FAILED"
    assert "shutting down" in answer["Reason"]
    assert answer["RequestId"] == request["RequestId"] and answer["LogicalResourceId"] == "Tight"
    # the Create was cut short, not refused: its rollback Delete must reach the handler's delete
    assert answer["PhysicalResourceId"].startswith("cfn-provider-timed-out-")
    assert recorded_calls(calls_file) == []
    assert queue_counts(sqs, provider.queue_url) == (0, 0)  # answered, so deleted
    if resource_type == "Custom::Test":  # a thread cannot be stopped: it is left running, and says so truly
        orphaned = wait_for_event(daemon, event="handler.orphaned", timeout=1)
        assert "answered FAILED (provider shutting down)" in orphaned["detail"]


@pytest.mark.parametrize("resource_type", ["Custom::Test", "Custom::AsyncTest"])
def test_second_sigterm_stops_at_once(spawn, stack: Stack, provider: Provider, sqs: Any, resource_type: str) -> None:
    daemon = spawn("d", "--grace-period", "20")
    request = stack.request("Create", "Stuck", resource_type=resource_type, properties={"SleepSeconds": "30"})
    publish_and_let_run(stack, sqs, provider, request)
    daemon.signal(signal.SIGTERM)
    wait_for_event(daemon, event="stopping", timeout=10)
    daemon.signal(signal.SIGTERM)

    # well before the 20 s grace period, let alone the 30 s handler
    code = exit_code(daemon, 12, "after a second SIGTERM")
    assert code != 0
    assert stack.response(request, timeout=0) is None
    assert wait_for_event(daemon, event="stopping_now", timeout=1)
    if resource_type == "Custom::Test":  # a thread cannot be stopped: it is left running, and says so truly
        orphaned = wait_for_event(daemon, event="handler.orphaned", timeout=1)
        assert "neither answered nor handed back" in orphaned["detail"]


def test_grace_period_starts_at_the_signal_not_after_the_open_long_poll(
    spawn, stack: Stack, provider: Provider, sqs: Any
) -> None:
    """With SQS's full 20 s long poll (the default), the poll opened after the message was taken is
    still open at SIGTERM: the grace period is not kept waiting for it to return."""
    daemon = spawn("d", "--grace-period", "2", "--wait-seconds", "20")
    request = stack.request("Create", "Long", resource_type="Custom::Test", properties={"SleepSeconds": "40"})
    publish_and_let_run(stack, sqs, provider, request)
    signalled = time.monotonic()
    daemon.signal(signal.SIGTERM)

    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (1, 0), 15, "the message to be handed back")
    handed_back_after = time.monotonic() - signalled
    assert handed_back_after < 12, f"handed back {handed_back_after:.1f} s after SIGTERM, grace period 2 s"
    events = {e["event"]: e for e in daemon.events()}
    assert "grace_period_over" in events and events["draining"]["seconds_left"] <= 2
    # the open poll still ends before the process does (what it brings is handed back), within its 20 s
    assert exit_code(daemon, 40, "after the long poll open at SIGTERM ended") == 0
    assert wait_for_event(daemon, event="request", outcome="released", timeout=1)

"""A Create cut short may still create its resource afterwards (its thread runs on): its FAILED
answer carries a timed-out marker, and CloudFormation's rollback Delete with that marker reaches
the handler's `delete` with the Create's properties, after the Create's thread has ended, so
nothing leaks. The marker is attacker-chosen text on a Delete: only one this provider gave, for
this very stack, resource and properties, ever makes the daemon call `delete`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from cfn_provider.local.emulator import Stack
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.response import FAILED_CREATE_PREFIX, TIMED_OUT_PREFIX, timed_out_marker
from tests.support.aws import response_of


class Leaky:
    """Create takes CreateSeconds in its thread and then "creates" its resource; delete records."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[str] = []
        self.deletes: list[dict[str, Any]] = []

    def create(self, event: Mapping[str, Any]) -> Any:
        time.sleep(float(event["ResourceProperties"].get("CreateSeconds", 0)))
        with self.lock:
            self.order.append(f"created {event['ResourceProperties']['Name']}")
        return {"PhysicalResourceId": f"leaky-{event['ResourceProperties']['Name']}"}

    def delete(self, event: Mapping[str, Any]) -> Any:
        with self.lock:
            self.order.append(f"delete {event['ResourceProperties']['Name']}")
            self.deletes.append(json.loads(json.dumps(event)))
        return True  # ported Lambda code returns such things: ignored on a Delete

    update = delete


def marker_for(delete: dict[str, Any], create_request_id: str) -> str:
    """The marker an attacker can compute for `delete` (no secret is involved)."""
    marker = timed_out_marker(parse(json.dumps(delete)), create_request_id)
    assert marker is not None
    return marker


async def test_rollback_delete_of_a_timed_out_create_reaches_delete_after_the_create_ended(run_daemon, stack: Stack):
    leaky = Leaky()
    await run_daemon(handlers=(("Custom::Leaky", leaky),))
    props = {"Name": "r1", "ServiceTimeout": "6", "CreateSeconds": "6.5"}
    create = stack.request("Create", "Thing", resource_type="Custom::Leaky", properties=props)
    stack.publish(create)
    answer = await response_of(stack, create, timeout=30)
    assert answer is not None and answer["Status"] == "FAILED" and "timed out" in answer["Reason"]
    marker = answer["PhysicalResourceId"]
    assert marker.startswith(TIMED_OUT_PREFIX), marker
    assert leaky.order == []  # the Create's thread is still running: it creates after the answer

    rollback = stack.request("Delete", "Thing", resource_type="Custom::Leaky", properties=props, physical_id=marker)
    stack.publish(rollback)
    done = await response_of(stack, rollback, timeout=30)
    assert done is not None and done["Status"] == "SUCCESS" and done["PhysicalResourceId"] == marker
    assert leaky.order == ["created r1", "delete r1"]  # delete waited for the Create's thread
    seen = leaky.deletes[0]
    assert seen["PhysicalResourceId"] == marker
    assert seen["ResourceProperties"] == create["ResourceProperties"]  # the Create's own properties


async def test_a_hostile_marker_never_reaches_delete(run_daemon, stack: Stack, provider):
    leaky = Leaky()
    await run_daemon(handlers=(("Custom::Leaky", leaky),))
    props = {"Name": "mine", "ServiceTimeout": "4", "CreateSeconds": "4.5"}
    create = stack.request("Create", "Thing", resource_type="Custom::Leaky", properties=props)
    stack.publish(create)
    marker = (await response_of(stack, create, timeout=30))["PhysicalResourceId"]
    assert marker.startswith(TIMED_OUT_PREFIX)

    # a Create that succeeded: its RequestId has a record, but no timed-out answer
    ok_props = {"Name": "fine"}
    ok = stack.request("Create", "Fine", resource_type="Custom::Leaky", properties=ok_props)
    stack.publish(ok)
    assert (await response_of(stack, ok))["Status"] == "SUCCESS"

    other_stack = Stack(provider)
    hostile = [
        # the real marker, someone else's properties (what delete would act on)
        stack.request(
            "Delete",
            "Thing",
            resource_type="Custom::Leaky",
            physical_id=marker,
            properties={**props, "Name": "someone-elses"},
        ),
        # the real marker, another logical id / another stack
        stack.request("Delete", "Other", resource_type="Custom::Leaky", physical_id=marker, properties=props),
        other_stack.request("Delete", "Thing", resource_type="Custom::Leaky", physical_id=marker, properties=props),
    ]
    # self-consistent markers an attacker computed: for a RequestId never seen, and for a Create that succeeded
    for create_id, logical, p in (
        ("f0f0f0f0-0000-4000-8000-00000000dead", "Ghost", {"Name": "victim"}),
        (ok["RequestId"], "Fine", ok_props),
    ):
        forged = stack.request("Delete", logical, resource_type="Custom::Leaky", properties=p, physical_id="x")
        forged["PhysicalResourceId"] = marker_for(forged, create_id)
        hostile.append(forged)
    for request in hostile:
        stack.publish(request)
    for request in hostile:
        answer = await response_of(stack, request, timeout=30)
        assert answer is not None and answer["Status"] == "SUCCESS"  # nothing of ours: nothing to delete
    assert leaky.deletes == []


async def test_a_create_that_simply_fails_keeps_the_failed_create_marker(run_daemon, stack: Stack):
    await run_daemon()
    create = stack.request("Create", "Broken", resource_type="Custom::Test", properties={"Raise": "no"})
    stack.publish(create)
    answer = await response_of(stack, create)
    assert answer["Status"] == "FAILED" and answer["PhysicalResourceId"].startswith(FAILED_CREATE_PREFIX)


class Stubborn:
    """An async Create that ignores its cancellation and runs on for RunSeconds."""

    def __init__(self) -> None:
        self.ended = False

    async def create(self, event: Mapping[str, Any]) -> Any:
        import asyncio

        end = time.monotonic() + float(event["ResourceProperties"]["RunSeconds"])
        while time.monotonic() < end:
            try:
                await asyncio.sleep(end - time.monotonic())
            except asyncio.CancelledError:
                pass  # swallowed: the daemon must answer anyway
        self.ended = True

    async def delete(self, event: Mapping[str, Any]) -> Any:
        return None

    update = delete


async def test_an_async_create_that_swallows_its_cancel_is_answered_at_the_deadline(run_daemon, stack: Stack):
    from structlog.testing import capture_logs

    stubborn = Stubborn()
    await run_daemon(handlers=(("Custom::Stubborn", stubborn),))
    create = stack.request(
        "Create", "Stubborn", resource_type="Custom::Stubborn", properties={"ServiceTimeout": "3", "RunSeconds": "25"}
    )
    with capture_logs() as logs:
        started = time.monotonic()
        stack.publish(create)
        answer = await response_of(stack, create, timeout=20)
        took = time.monotonic() - started
    assert answer is not None and answer["Status"] == "FAILED" and "timed out" in answer["Reason"]
    assert took < 15, f"answered after {took:.0f} s, past the 3 s deadline"
    assert not stubborn.ended  # it is still running, abandoned
    assert any(e["event"] == "handler.orphaned" for e in logs)


class LongCleanup:
    """A Create that overruns its deadline; a Delete that goes long-running and then fails."""

    def __init__(self) -> None:
        self.polled = 0

    def create(self, event: Mapping[str, Any]) -> Any:
        time.sleep(float(event["ResourceProperties"]["CreateSeconds"]))
        return {"PhysicalResourceId": "made-late"}

    def delete(self, event: Mapping[str, Any]) -> Any:
        from cfn_provider import InProgress

        return InProgress(progress={"deleting": True}, after=1)

    def poll_delete(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        self.polled += 1
        raise RuntimeError("could not delete the snapshot")

    update = delete


async def test_a_long_running_cleanup_that_fails_still_answers_the_rollback_delete_success(run_daemon, stack: Stack):
    """The rollback Delete of a timed-out Create goes long-running and its poll fails: answered
    SUCCESS, as a cleanup that fails at once is (the rollback must not be stuck), with the
    possible leak logged as an error."""
    from structlog.testing import capture_logs

    handler = LongCleanup()
    await run_daemon(handlers=(("Custom::LongCleanup", handler),), poll_interval=0.5)
    props = {"ServiceTimeout": "4", "CreateSeconds": "4.5"}
    create = stack.request("Create", "Snap", resource_type="Custom::LongCleanup", properties=props)
    stack.publish(create)
    marker = (await response_of(stack, create, timeout=30))["PhysicalResourceId"]
    assert marker.startswith(TIMED_OUT_PREFIX)
    rollback = stack.request(
        "Delete", "Snap", resource_type="Custom::LongCleanup", properties=props, physical_id=marker
    )
    with capture_logs() as logs:
        stack.publish(rollback)
        done = await response_of(stack, rollback, timeout=30)
    assert handler.polled == 1
    assert done is not None and done["Status"] == "SUCCESS" and done["PhysicalResourceId"] == marker, done
    failed = [e for e in logs if e["event"] == "timed_out_create.cleanup_failed"]
    assert len(failed) == 1 and failed[0]["log_level"] == "error" and "could not delete" in failed[0]["reason"]
    assert "leak" in failed[0]["detail"]

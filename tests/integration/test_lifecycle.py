"""Create / Update / Delete through the real path: SNS -> SQS -> daemon -> presigned S3 PUT."""

from __future__ import annotations

import json

import pytest

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import queue_counts, response_of


async def test_create_update_delete_round_trip(run_daemon, stack: Stack) -> None:
    await run_daemon()
    create = stack.request("Create", "Thing", properties={"Name": "thing-1", "Colour": "blue"})
    stack.publish(create)
    resp = await response_of(stack, create)
    assert resp is not None
    assert resp["Status"] == "SUCCESS"
    assert resp["PhysicalResourceId"] == "thing-1"
    assert resp["Data"] == {"Colour": "blue"}
    for key in ("StackId", "RequestId", "LogicalResourceId"):
        assert resp[key] == create[key]

    update = stack.request(
        "Update",
        "Thing",
        properties={"Name": "thing-1", "Colour": "red"},
        old_properties={"Name": "thing-1", "Colour": "blue"},
        physical_id="thing-1",
    )
    stack.publish(update)
    resp = await response_of(stack, update)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "thing-1"
    assert resp["Data"] == {"Colour": "red"}

    delete = stack.request("Delete", "Thing", properties={"Name": "thing-1"}, physical_id="thing-1")
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "thing-1"
    assert "Data" not in resp and "NoEcho" not in resp


async def test_answered_messages_are_deleted_from_the_queue(run_daemon, stack: Stack, provider: Provider) -> None:
    daemon = await run_daemon()
    req = stack.request("Create", "Thing", properties={"Colour": "blue"})
    stack.publish(req)
    assert (await response_of(stack, req))["Status"] == "SUCCESS"
    await daemon.stop()
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


@pytest.mark.parametrize("resource_type", ["Custom::Test", "Custom::AsyncTest"])
async def test_create_without_id_gets_a_deterministic_one_and_update_keeps_it(
    run_daemon, stack: Stack, resource_type: str
) -> None:
    await run_daemon()
    create = stack.request("Create", "Widget", resource_type=resource_type)
    stack.publish(create)
    resp = await response_of(stack, create)
    assert resp["Status"] == "SUCCESS"
    physical_id = resp["PhysicalResourceId"]
    assert physical_id.startswith(f"{stack.name}-Widget-")

    update = stack.request(
        "Update",
        "Widget",
        resource_type=resource_type,
        properties={"X": "1"},
        old_properties={},
        physical_id=physical_id,
    )
    stack.publish(update)
    resp = await response_of(stack, update)
    assert resp["Status"] == "SUCCESS"
    assert resp["PhysicalResourceId"] == physical_id  # the handler returned nothing: the id is kept
    assert handlers.count(update["RequestId"]) == 1


async def test_raw_message_delivery_is_served_when_verification_is_off(emulator, tmp_path) -> None:
    from tests.support.daemons import InProcessDaemon, settings_for

    provider = Provider.create(emulator, raw=True)
    stack = Stack(provider)
    daemon = await InProcessDaemon.start(settings_for(provider, tmp_path))
    try:
        req = stack.request("Create", "Raw", properties={"Colour": "raw"})
        stack.publish(req)
        resp = await response_of(stack, req)
        assert resp["Status"] == "SUCCESS" and resp["Data"] == {"Colour": "raw"}
    finally:
        assert await daemon.stop() == 0


async def test_update_with_a_new_id_is_a_replacement(run_daemon, stack: Stack) -> None:
    await run_daemon()
    update = stack.request(
        "Update",
        "R",
        resource_type="Custom::Test",
        physical_id="old-id",
        properties={"ReturnJson": json.dumps({"PhysicalResourceId": "new-id"})},
        old_properties={},
    )
    stack.publish(update)
    resp = await response_of(stack, update)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "new-id"


async def test_delete_never_changes_the_id(run_daemon, stack: Stack) -> None:
    await run_daemon()
    delete = stack.request(
        "Delete",
        "R",
        resource_type="Custom::Test",
        physical_id="keep-me",
        properties={"ReturnJson": json.dumps({"PhysicalResourceId": "other", "Data": {"a": "b"}})},
    )
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "keep-me"
    assert "Data" not in resp

"""cfn_provider.sdk.resource: properties checked and converted per schema before an action, replacement on
Update, and the plain create/update/delete the router and runner see (the schema rules themselves:
tests/sdk/test_schema.py; the Call: tests/sdk/test_call.py)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cfn_provider import Call, PropertyError, Resource
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.response import default_physical_id, success
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.runner import Context
from cfn_provider.pipeline.runner import call as run_action
from cfn_provider.sdk import resource as sdk
from tests.support.aws import response_of

STACK_ID = "arn:aws:cloudformation:eu-west-2:123456789012:stack/shop/6a1b-guid"


def event(
    kind: str = "Create",
    props: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    physical_id: str | None = "thing-1",
    request_id: str = "req-1",
) -> Any:
    doc: dict[str, Any] = {
        "RequestType": kind,
        "ResponseURL": "https://bucket.s3.amazonaws.com/key",
        "StackId": STACK_ID,
        "RequestId": request_id,
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Thing",
        "ResourceProperties": {"ServiceToken": "arn:aws:sns:eu-west-2:123456789012:p", **(props or {})},
    }
    if kind != "Create":
        doc["PhysicalResourceId"] = physical_id
    if old is not None:
        doc["OldResourceProperties"] = {"ServiceToken": "arn:aws:sns:eu-west-2:123456789012:p", **old}
    return parse(json.dumps(doc)).wire


# ---------------------------------------------------------------------------------- the class


def test_an_invalid_schema_fails_when_the_class_is_defined():
    with pytest.raises(TypeError, match="Broken.schema is not a valid JSON Schema"):

        class Broken(Resource):
            schema = {"type": "no-such-type"}


def test_replace_on_must_not_be_a_bare_string():
    with pytest.raises(TypeError, match="replace_on"):

        class Oops(Resource):
            replace_on = "Name"


# ---------------------------------------------------------------------------------- resources


class Recorder(Resource):
    """Records what each action saw; ids from Name."""

    schema = {
        "type": "object",
        "properties": {
            "Name": {"type": "string"},
            "Size": {"type": "integer", "minimum": 1},
            "Fast": {"type": "boolean"},
        },
        "required": ["Size"],
        "additionalProperties": False,
    }
    replace_on = ("Name",)

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], Any]] = []

    def create(self, props, call):
        self.seen.append(("create", props, call))
        if props.get("Name"):
            return {"PhysicalResourceId": props["Name"], "Data": {"Size": props["Size"]}}
        return None

    def update(self, props, old, call):
        self.seen.append(("update", props, call))
        return {"Data": {"Size": props["Size"], "Was": old.get("Size")}}

    def delete(self, props, call):
        self.seen.append(("delete", props, call))


def test_create_gets_validated_coerced_properties_without_cloudformations_own():
    h = Recorder.handler()
    result = h.create(event(props={"Name": "n1", "Size": "3", "Fast": "true", "ServiceTimeout": "60"}), None)
    assert result == {"PhysicalResourceId": "n1", "Data": {"Size": 3}}
    action, props, call = h.resource.seen[0]
    assert props == {"Name": "n1", "Size": 3, "Fast": True}
    assert call.request_type == "Create" and call.physical_id is None and not call.replacing


def test_create_with_bad_properties_raises_naming_them_and_does_not_run():
    h = Recorder.handler()
    with pytest.raises(PropertyError, match=r"Size: must be at least 1 \(minimum\)"):
        h.create(event(props={"Size": "0"}), None)
    with pytest.raises(PropertyError, match=r"Fast: must be of type boolean \(type\)"):
        h.create(event(props={"Size": "1", "Fast": "maybe"}), None)
    assert h.resource.seen == []


def test_update_in_place_keeps_the_id():
    h = Recorder.handler()
    result = h.update(event("Update", {"Name": "n1", "Size": "5"}, {"Name": "n1", "Size": "3"}, physical_id="n1"), None)
    assert result == {"Data": {"Size": 5, "Was": 3}}
    assert [s[0] for s in h.resource.seen] == ["update"]


def test_update_changing_a_replace_on_property_creates_a_new_resource():
    h = Recorder.handler()
    result = h.update(event("Update", {"Name": "n2", "Size": "5"}, {"Name": "n1", "Size": "5"}, physical_id="n1"), None)
    assert result == {"PhysicalResourceId": "n2", "Data": {"Size": 5}}
    action, props, call = h.resource.seen[0]
    assert action == "create" and call.replacing and call.physical_id == "n1"


def test_replacement_without_an_id_gets_a_new_one():
    h = Recorder.handler()
    ev = event("Update", {"Name": "", "Size": "5"}, {"Name": "n1", "Size": "5"}, physical_id="n1", request_id="req-2")
    result = h.update(ev, None)
    assert result["PhysicalResourceId"] == default_physical_id(parse(json.dumps(ev)))
    assert result["PhysicalResourceId"] != "n1"
    body = json.loads(success(parse(json.dumps(ev)), result).body)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == result["PhysicalResourceId"]


def test_update_validates_new_properties_but_not_old_ones():
    h = Recorder.handler()
    ok = event("Update", {"Name": "n1", "Size": "2"}, {"Name": "n1", "Size": "zero", "Legacy": "x"})
    assert h.update(ok, None) == {"Data": {"Size": 2, "Was": "zero"}}
    with pytest.raises(PropertyError, match="Size"):
        h.update(event("Update", {"Name": "n1", "Size": "-1"}, {"Name": "n1", "Size": "2"}), None)


def test_delete_is_never_validated_but_still_coerced():
    h = Recorder.handler()
    assert h.delete(event("Delete", {"Size": "0", "Fast": "false", "Unknown": "x"}), None) is None
    action, props, call = h.resource.seen[0]
    assert props == {"Size": 0, "Fast": False, "Unknown": "x"}


class CreateOnly(Resource):
    schema = {"type": "object", "properties": {"N": {"type": "integer"}}}

    def create(self, props, call):
        return {"PhysicalResourceId": f"id-{props.get('N')}-{call.request_id}"}


def test_without_update_every_change_replaces_and_no_change_keeps_the_id():
    h = CreateOnly.handler()
    assert not h.resource.updates_in_place()
    changed = h.update(event("Update", {"N": "2"}, {"N": "1"}, physical_id="id-1-req-0", request_id="r2"), None)
    assert changed == {"PhysicalResourceId": "id-2-r2"}
    same = h.update(event("Update", {"N": "1", "ServiceTimeout": "30"}, {"N": "01"}, physical_id="id-1-req-0"), None)
    assert same is None  # "01" and "1" are the same integer: nothing changed


def test_replacement_that_returns_the_old_id_is_allowed():
    class Same(Resource):
        replace_on = ("X",)

        def create(self, props, call):
            return "fixed"

    result = Same.handler().update(event("Update", {"X": "2"}, {"X": "1"}, physical_id="fixed"), None)
    assert result == {"PhysicalResourceId": "fixed"}


def test_no_schema_means_no_checks_and_no_conversion():
    class Plain(Resource):
        def create(self, props, call):
            return {"Data": props}

    assert Plain.handler().create(event(props={"A": "1", "B": ["x"]}), None) == {"Data": {"A": "1", "B": ["x"]}}


def test_base_create_says_it_is_missing():
    class Nothing(Resource):
        pass

    with pytest.raises(NotImplementedError, match="Nothing does not implement create"):
        Nothing.handler().create(event(), None)


@pytest.mark.parametrize("make_async", [False, True])
async def test_an_authors_stop_iteration_is_an_error_not_a_silent_success(make_async):
    if make_async:

        class Leaky(Resource):
            async def create(self, props, call):
                return next(iter(()))
    else:

        class Leaky(Resource):
            def create(self, props, call):
                return next(iter(()))

    action = Leaky.handler().create
    with pytest.raises((StopIteration, RuntimeError)):  # a coroutine turns it into RuntimeError
        result = action(event(), None)
        if make_async:
            await result


def test_handler_needs_a_resource():
    with pytest.raises(TypeError):
        sdk.Handler(object())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- sync and async


class AsyncThing(Resource):
    replace_on = ("Name",)

    async def create(self, props, call):
        await asyncio.sleep(0)
        return {"PhysicalResourceId": f"a-{props['Name']}"}

    async def update(self, props, old, call):
        return {"Data": {"Name": props["Name"]}}


class Mixed(Resource):
    async def create(self, props, call):
        return "async-create"

    def update(self, props, old, call):  # sync in an async class: run off the loop
        return {"Data": {"Thread": threading.current_thread() is not threading.main_thread()}}


def test_action_kinds_follow_the_methods():
    sync, a, m = Recorder.handler(), AsyncThing.handler(), Mixed.handler()
    assert not any(inspect.iscoroutinefunction(getattr(sync, n)) for n in ("create", "update", "delete"))
    assert inspect.iscoroutinefunction(a.create) and inspect.iscoroutinefunction(a.update)
    assert inspect.iscoroutinefunction(a.delete)  # the default delete of an async class too
    assert all(inspect.iscoroutinefunction(getattr(m, n)) for n in ("create", "update", "delete"))


async def test_async_actions_replace_and_update():
    h = AsyncThing.handler()
    assert await h.create(event(props={"Name": "x"}), None) == {"PhysicalResourceId": "a-x"}
    assert await h.update(event("Update", {"Name": "y"}, {"Name": "x"}), None) == {"PhysicalResourceId": "a-y"}
    assert await h.update(event("Update", {"Name": "x", "Z": "1"}, {"Name": "x"}), None) == {"Data": {"Name": "x"}}
    assert await h.delete(event("Delete", {"Name": "x"}), None) is None
    assert await Mixed.handler().update(event("Update", {"A": "1"}, {"A": "1"}), None) == {"Data": {"Thread": True}}


# ---------------------------------------------------------------------------------- the daemon's view


class Probe(Resource):
    async def create(self, props, call: Call):
        return {
            "Data": {
                "Remaining": call.remaining() > 0,
                "Region": call.region,
                "Stack": call.stack_name,
                "Logical": call.logical_id,
                "HasLog": hasattr(call.log, "info"),
                "SameSession": call.session is call.context.session,
                "Type": call.resource_type,
            }
        }


async def test_the_router_and_runner_take_an_sdk_handler_as_it_is():
    handler = Probe.handler()
    route = Router([("Custom::Probe", handler)], use_entry_points=False).route("Custom::Probe")
    assert route is not None and route.handler() is handler
    request = parse(json.dumps({**event(props={}), "ResourceType": "Custom::Probe"}))
    marker = object()
    with ThreadPoolExecutor(1) as pool:
        result = await run_action(handler, request, Context(request, time.monotonic() + 30, marker), pool)
    assert result["Data"] == {
        "Remaining": True,
        "Region": "eu-west-2",
        "Stack": "shop",
        "Logical": "Thing",
        "HasLog": True,
        "SameSession": True,
        "Type": "Custom::Probe",
    }


async def test_sync_sdk_actions_run_in_the_runners_thread_pool():
    handler = Recorder.handler()
    request = parse(json.dumps(event(props={"Size": "2"})))
    with ThreadPoolExecutor(1, thread_name_prefix="handler") as pool:
        result = await run_action(handler, request, Context(request, time.monotonic() + 30), pool)
    assert result is None
    assert handler.resource.seen[0][2].context is not None


# ---------------------------------------------------------------------------------- through the queue


class Sized(Resource):
    schema = {
        "type": "object",
        "properties": {"Size": {"type": "integer", "minimum": 1}, "On": {"type": "boolean"}},
        "required": ["Size"],
        "additionalProperties": False,
    }
    replace_on = ("On",)

    async def create(self, props, call):
        return {"Data": {"Doubled": props["Size"] * 2, "On": props.get("On", False)}}

    async def update(self, props, old, call):
        return await self.create(props, call)


sized = Sized.handler()


async def test_an_sdk_handler_through_the_real_queue(run_daemon, stack):
    await run_daemon(handlers=(("Custom::Sized", "tests.sdk.test_resource:sized"),))
    create = stack.request("Create", "Box", resource_type="Custom::Sized", properties={"Size": "21", "On": "false"})
    bad = stack.request("Create", "Bad", resource_type="Custom::Sized", properties={"Size": "big"})
    stack.publish(create)
    stack.publish(bad)
    resp = await response_of(stack, create)
    assert resp["Status"] == "SUCCESS" and resp["Data"] == {"Doubled": 42, "On": False}
    first_id = resp["PhysicalResourceId"]

    failed = await response_of(stack, bad)
    assert failed["Status"] == "FAILED"
    assert failed["Reason"] == "invalid ResourceProperties: Size: must be of type integer (type)"

    update = stack.request(
        "Update",
        "Box",
        resource_type="Custom::Sized",
        properties={"Size": "5", "On": "false"},
        old_properties={"Size": "21", "On": "false"},
        physical_id=first_id,
    )
    stack.publish(update)
    resp = await response_of(stack, update)
    assert resp["PhysicalResourceId"] == first_id and resp["Data"]["Doubled"] == 10

    replace = stack.request(
        "Update",
        "Box",
        resource_type="Custom::Sized",
        properties={"Size": "5", "On": "true"},
        old_properties={"Size": "5", "On": "false"},
        physical_id=first_id,
    )
    stack.publish(replace)
    resp = await response_of(stack, replace)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] != first_id
    assert resp["PhysicalResourceId"].startswith(f"{stack.name}-Box-") and resp["Data"]["On"] is True

    delete = stack.request(
        "Delete", "Box", resource_type="Custom::Sized", properties={"Size": "nonsense"}, physical_id=first_id
    )
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == first_id

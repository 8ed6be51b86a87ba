"""cfn_provider.sdk.resource, long-running resources: a Resource's InProgress and its poll methods
(poll_create / poll_update / poll_delete, or one is_complete) as the plain handler's poll functions,
with properties validated as for the action. Through the real queue: tests/integration/test_polling.py."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from cfn_provider import Call, InProgress, PropertyError, Resource
from cfn_provider.progress import poll_function
from tests.sdk.test_resource import event

SCHEMA = {
    "type": "object",
    "properties": {"Size": {"type": "integer"}, "Name": {"type": "string"}},
    "required": ["Size"],
}


class Snapshot(Resource):
    schema = SCHEMA
    replace_on = ("Name",)

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def create(self, props: dict[str, Any], call: Call) -> Any:
        self.seen.append(("create", props, call.replacing))
        return InProgress(progress={"n": 0}, physical_id=None if call.replacing else "snap-1", after=2)

    def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
        return InProgress(progress={"n": 0})

    def poll_create(self, props: dict[str, Any], call: Call, progress: Any) -> Any:
        self.seen.append(("poll_create", props, call.replacing, progress))
        if progress["n"] < 1:
            return InProgress(progress={"n": progress["n"] + 1})
        return {"Data": {"Size": props["Size"]}}

    def poll_update(self, props: dict[str, Any], old: dict[str, Any], call: Call, progress: Any) -> Any:
        self.seen.append(("poll_update", props, old, progress))
        return {"Data": {"From": old["Size"], "To": props["Size"]}}


def test_the_handler_has_the_poll_functions_the_resource_defines():
    handler = Snapshot.handler()
    assert poll_function(handler, "Create") == handler.poll_create
    assert poll_function(handler, "Update") == handler.poll_update
    assert poll_function(handler, "Delete") is None  # no poll_delete, no is_complete: nothing to poll a Delete with

    class Plain(Resource):
        def create(self, props: dict[str, Any], call: Call) -> Any:
            return "x"

    assert all(poll_function(Plain.handler(), kind) is None for kind in ("Create", "Update", "Delete"))


def test_create_returns_in_progress_and_poll_create_gets_validated_properties():
    handler = Snapshot.handler()
    ev = event("Create", {"Size": "3"})
    pending = handler.create(ev, None)
    assert isinstance(pending, InProgress) and pending.physical_id == "snap-1" and pending.after == 2
    again = handler.poll_create(ev, None, {"n": 0})
    assert isinstance(again, InProgress) and again.progress == {"n": 1}
    assert handler.poll_create(ev, None, {"n": 1}) == {"Data": {"Size": 3}}  # "3" became 3, as for create
    assert handler.resource.seen[1] == ("poll_create", {"Size": 3}, False, {"n": 0})
    with pytest.raises(PropertyError, match="Size"):
        handler.poll_create(event("Create", {"Size": "big"}), None, {"n": 1})


def test_update_in_place_polls_with_poll_update_and_the_old_properties():
    handler = Snapshot.handler()
    ev = event("Update", {"Size": "5", "Name": "a"}, old={"Size": "3", "Name": "a"})
    assert isinstance(handler.update(ev, None), InProgress)
    assert handler.poll_update(ev, None, {"n": 0}) == {"Data": {"From": 3, "To": 5}}


def test_a_replacing_update_polls_with_poll_create_and_carries_the_new_id():
    handler = Snapshot.handler()
    ev = event("Update", {"Size": "5", "Name": "b"}, old={"Size": "5", "Name": "a"})
    pending = handler.update(ev, None)
    assert isinstance(pending, InProgress)
    assert pending.physical_id and pending.physical_id != "thing-1"  # the new resource's, made up by the SDK
    assert pending.physical_id == Call(ev).new_physical_id()
    assert isinstance(handler.poll_update(ev, None, {"n": 0}), InProgress)
    assert handler.resource.seen[-1] == ("poll_create", {"Size": 5, "Name": "b"}, True, {"n": 0})


class Waiter(Resource):
    """One is_complete for every action; async, so the handler's actions are async too."""

    async def create(self, props: dict[str, Any], call: Call) -> Any:
        return InProgress(progress={"action": "create"}, physical_id="w-1")

    async def delete(self, props: dict[str, Any], call: Call) -> Any:
        return InProgress(progress={"action": "delete"})

    async def is_complete(self, props: dict[str, Any], call: Call, progress: Any) -> Any:
        return {"Data": {"Done": progress["action"], "Type": call.request_type, "Props": props}}


async def test_is_complete_polls_every_action_and_async_methods_stay_async():
    handler = Waiter.handler()
    for kind in ("Create", "Update", "Delete"):
        assert inspect.iscoroutinefunction(poll_function(handler, kind))
    done = await handler.poll_delete(event("Delete", {"Any": "thing"}), None, {"action": "delete"})
    assert done == {"Data": {"Done": "delete", "Type": "Delete", "Props": {"Any": "thing"}}}


def test_an_update_in_progress_without_a_way_to_poll_it_fails_saying_so():
    class CreateOnlyPoll(Resource):
        def create(self, props: dict[str, Any], call: Call) -> Any:
            return InProgress(progress={})

        def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
            return InProgress(progress={})

        def poll_create(self, props: dict[str, Any], call: Call, progress: Any) -> Any:
            return None

    handler = CreateOnlyPoll.handler()
    with pytest.raises(NotImplementedError, match="update returned InProgress.*no poll_update or is_complete"):
        handler.poll_update(event("Update", {"A": "2"}, old={"A": "1"}), None, {})

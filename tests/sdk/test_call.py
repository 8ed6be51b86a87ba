"""cfn_provider.sdk.call: what an SDK action reads of its request, and its helpers without the daemon."""

from __future__ import annotations

import json
from typing import Any

from cfn_provider import Call
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.response import default_physical_id

STACK_ID = "arn:aws:cloudformation:eu-west-2:123456789012:stack/shop/6a1b-guid"


def event(kind: str = "Create", **extra: Any) -> Any:
    doc = {
        "RequestType": kind,
        "ResponseURL": "https://bucket.s3.amazonaws.com/key",
        "StackId": STACK_ID,
        "RequestId": "req-1",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Thing",
        "ResourceProperties": {},
        **extra,
    }
    return parse(json.dumps(doc)).wire


def test_call_helpers_without_a_daemon():
    call = Call(event())
    assert call.remaining() == float("inf")
    assert call.region == "eu-west-2"
    assert call.session is not None
    assert Call({**event(), "StackId": "plain-id"}).region is None


def test_the_typed_reads_of_the_request():
    call = Call(event("Update", PhysicalResourceId="thing-1"))
    assert (call.request_type, call.resource_type, call.logical_id, call.request_id) == (
        "Update",
        "Custom::Thing",
        "Thing",
        "req-1",
    )
    assert call.stack_id == STACK_ID and call.stack_name == "shop"
    assert call.physical_id == "thing-1"
    assert Call(event()).physical_id is None  # Create: no resource yet


def test_a_new_physical_id_is_the_one_the_daemon_would_make():
    ev = event()
    assert Call(ev).new_physical_id() == default_physical_id(parse(json.dumps(ev)))


def test_the_daemons_context_is_used_when_given():
    class Context:
        session = object()
        log = object()

        def remaining(self) -> float:
            return 12.5

    ctx = Context()
    call = Call(event(), ctx)
    assert call.remaining() == 12.5 and call.session is ctx.session and call.log is ctx.log

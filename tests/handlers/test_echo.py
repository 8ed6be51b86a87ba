"""cfn_provider.handlers.echo: ResourceProperties come back as Data; Name is the id; FailWith fails."""

from __future__ import annotations

import json

import pytest

from cfn_provider.handlers import echo
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.response import success

TOKEN = "arn:aws:sns:us-east-1:123456789012:cfn-provider"


def event(kind: str = "Create", **props):
    """The read-only event exactly as the daemon hands it over."""
    doc = {
        "RequestType": kind,
        "ResponseURL": "https://bucket.s3.amazonaws.com/key",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid",
        "RequestId": "req-1",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {"ServiceToken": TOKEN, **props},
    }
    if kind != "Create":
        doc["PhysicalResourceId"] = "thing-1"
    return parse(json.dumps(doc)).wire


@pytest.mark.parametrize("action", [echo.create, echo.update])
def test_properties_come_back_as_data_without_cloudformations_own(action):
    result = action(event(Colour="blue", Size="3", ServiceTimeout="60"))
    assert result == {"Data": {"Colour": "blue", "Size": "3"}}


@pytest.mark.parametrize("action", [echo.create, echo.update])
def test_name_becomes_the_physical_id_and_is_not_echoed(action):
    result = action(event(Name="my-thing", Colour="blue"))
    assert result["PhysicalResourceId"] == "my-thing"
    assert result["Data"] == {"Colour": "blue"}


def test_non_string_name_is_stringified():
    assert echo.create(event(Name=42))["PhysicalResourceId"] == "42"


def test_empty_name_leaves_the_id_to_the_daemon():
    assert "PhysicalResourceId" not in echo.create(event(Name=""))


@pytest.mark.parametrize("action", [echo.create, echo.update])
def test_failwith_raises_with_that_reason(action):
    with pytest.raises(RuntimeError, match="^some reason$"):
        action(event(FailWith="some reason", Colour="blue"))


def test_empty_failwith_does_not_fail():
    assert echo.create(event(FailWith="", Colour="blue")) == {"Data": {"Colour": "blue"}}


def test_delete_returns_nothing_and_ignores_failwith():
    assert echo.delete(event("Delete", FailWith="boom", Name="x")) is None


def test_missing_properties_give_empty_data():
    ev = dict(event())
    del ev["ResourceProperties"]
    assert echo.create(ev) == {"Data": {}}


def test_nested_values_round_trip_through_a_response():
    ev = event(Tags=[{"Key": "k", "Value": "v"}], Settings={"Deep": {"On": "true"}})
    resp = success(parse(json.dumps({**ev, "RequestType": "Create"})), echo.create(ev))
    body = json.loads(resp.body)
    assert body["Status"] == "SUCCESS"
    assert body["Data"] == {"Tags": [{"Key": "k", "Value": "v"}], "Settings": {"Deep": {"On": "true"}}}


def test_the_event_is_not_modified():
    ev = event(Name="n", Colour="blue")
    before = json.dumps(ev, sort_keys=True)
    echo.create(ev)
    assert json.dumps(ev, sort_keys=True) == before

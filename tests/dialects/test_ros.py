"""The transport's dialect (nothing in a request changes it), its stored form, and the ROS rules for
requests and responses (pure: no network)."""

from __future__ import annotations

import json

import pytest

from cfn_provider.dialects.base import CLOUDFORMATION
from cfn_provider.dialects.ros import ROS, ResponseUrlChoice
from cfn_provider.pipeline import response as responses
from cfn_provider.pipeline.request import NotARequest, from_stored, parse, stored_form, stored_parts
from tests.dialects.conftest import ros_request

URL = "https://ros.cn-hangzhou.aliyuncs.com/callback?Signature=abc"
INTRANET = "https://ros-intranet.cn-hangzhou.aliyuncs.com/callback?Signature=abc"
ARN = "arn:aws:cloudformation:us-east-1:123456789012:stack/s/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


def ros(kind: str = "Create", **kw) -> object:
    return parse(json.dumps(ros_request(kind, URL, intranet=INTRANET, **kw)), ROS)


CFN_REQUEST = {
    "RequestType": "Update",
    "ResponseURL": URL,
    "StackId": ARN,
    "RequestId": "r-1",
    "LogicalResourceId": "Db",
    "ResourceType": "Custom::Test",
    "PhysicalResourceId": "p" * 300,
    "ResourceProperties": {"ServiceTimeout": "30", "Timeout": "900"},
}


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"StackName": "victim"},
        {"RegionId": "cn-hangzhou"},
        {"IntranetResponseURL": INTRANET},
        {
            "ResourceOwnerId": "1",
            "CallerId": "1",
            "RegionId": "cn-hangzhou",
            "StackName": "victim",
            "IntranetResponseURL": INTRANET,
        },
        {"StackId": "8acc3dcd-cf48-4fa1-863e-7c767b61fe42"},  # a plain id, as ROS's
    ],
)
def test_on_cloudformations_transport_a_request_is_cloudformations_whatever_it_carries(extra):
    """Issue 21 item 1: a ROS-only field (or a plain StackId) no longer switches the rules."""
    req = parse(json.dumps({**CFN_REQUEST, **extra}), CLOUDFORMATION)
    assert req.dialect is CLOUDFORMATION
    assert req.service_timeout == 30  # ServiceTimeout, not ROS's Timeout
    assert req.physical_id == "p" * 300 and not req.problems  # CloudFormation's 1 KB, not ROS's 255 bytes
    assert req.stack_name != "victim"  # the stack's name comes from the StackId, never StackName
    assert ResponseUrlChoice("intranet", True).urls(req) == [URL]  # IntranetResponseURL is never called
    assert req.ignored == tuple(n for n in CLOUDFORMATION.ignored_fields if n in extra)  # named in the log


@pytest.mark.parametrize("stack_id", [ARN, "8acc3dcd-cf48-4fa1-863e-7c767b61fe42"])
def test_on_ross_transport_a_request_is_ros_whatever_it_carries(stack_id):
    req = parse(json.dumps({**CFN_REQUEST, "StackId": stack_id}), ROS)  # no ROS field, maybe an ARN
    assert req.dialect is ROS and req.service_timeout == 900 and req.ignored == ()
    assert "at most 255 bytes" in req.problems[0]


def test_parse_without_a_dialect_is_cloudformation():
    """Callers of parse(text) (and every CloudFormation test) see the original rules."""
    req = parse(json.dumps(ros_request("Create", URL)))
    assert req.dialect is CLOUDFORMATION


def test_not_a_request_carries_the_transports_dialect():
    with pytest.raises(NotARequest) as exc:
        parse(json.dumps({**ros_request("Create", URL), "RequestId": 7}), CLOUDFORMATION)
    assert exc.value.dialect is CLOUDFORMATION
    with pytest.raises(NotARequest) as exc:
        parse("not json", ROS)
    assert exc.value.dialect is ROS


@pytest.mark.parametrize("dialect", [CLOUDFORMATION, ROS])
def test_a_stored_request_keeps_the_dialect_it_came_in_with(dialect):
    """What a store keeps names the transport's dialect: any reader (a poll step on any fleet member,
    whatever its transport; `cfn-provider answer`) applies the rules the request was admitted under."""
    req = parse(json.dumps(ros_request("Create", URL, stack_id=ARN)), dialect)
    text = stored_form(req)
    for reader in (CLOUDFORMATION, ROS):
        again = from_stored(text, reader)
        assert again.dialect is dialect and again.wire == req.wire
    assert stored_parts(text) == (req.wire, dialect)


def test_a_request_stored_before_dialects_were_kept_takes_the_readers():
    bare = json.dumps(ros_request("Create", URL))
    assert stored_parts(bare) == (json.loads(bare), None)
    assert from_stored(bare, ROS).dialect is ROS and from_stored(bare, CLOUDFORMATION).dialect is CLOUDFORMATION


def test_a_request_can_never_pass_for_a_stored_document():
    """A request that mimics the stored form still has a ResponseURL: it stays a bare request."""
    fake = {
        "Dialect": "ros",
        "Request": ros_request("Create", URL),
        "ResponseURL": URL,
        "StackId": ARN,
        "RequestId": "r",
        "LogicalResourceId": "L",
    }
    req = parse(json.dumps(fake), CLOUDFORMATION)
    assert from_stored(stored_form(req), ROS).dialect is CLOUDFORMATION
    assert stored_parts(json.dumps(fake))[1] is None
    with pytest.raises(NotARequest, match="unknown dialect"):
        from_stored(json.dumps({"Dialect": "klingon", "Request": {}}), CLOUDFORMATION)
    with pytest.raises(NotARequest, match="not JSON"):
        from_stored("{", CLOUDFORMATION)


def test_ros_request_fields():
    req = ros()
    assert req.dialect is ROS and not req.problems
    assert req.stack_name == "ros-stack"  # from StackName, not the id
    assert req.intranet_response_url == INTRANET
    assert req.key == json.dumps([req.stack_id, req.request_id])  # idempotency key unchanged


@pytest.mark.parametrize(
    "props, expected",
    [
        ({}, 60),
        ({"Timeout": 300}, 300),
        ({"Timeout": "900"}, 900),
        ({"Timeout": 99999}, 43200),
        ({"Timeout": 0}, 1),
        ({"Timeout": "soon"}, 60),
        ({"ServiceTimeout": 30}, 60),
    ],
)
def test_ros_timeout(props, expected):
    assert ros(props=props).service_timeout == expected


def test_cloudformation_timeout_unchanged():
    req = parse(json.dumps({**ros_request("Create", URL, stack_id=ARN), "IntranetResponseURL": None}), CLOUDFORMATION)
    assert req.dialect is CLOUDFORMATION and req.service_timeout == 3600


def test_resource_type_limit():
    assert not ros(rtype="Custom::" + "x" * 60).problems  # 68 characters
    assert "at most 68" in ros(rtype="Custom::" + "x" * 61).problems[0]


def test_physical_id_limit_on_requests():
    assert not ros("Update", physical_id="p" * 255).problems
    assert "at most 255 bytes" in ros("Update", physical_id="p" * 256).problems[0]


def body(resp: responses.Response) -> dict:
    assert len(resp.body) <= responses.MAX_BODY
    return json.loads(resp.body)


def test_update_may_not_change_the_id():
    req = ros("Update", physical_id="thing-1")
    resp = responses.success(req, {"PhysicalResourceId": "thing-2", "Data": {"A": "b"}})
    doc = body(resp)
    assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"] == "thing-1"
    assert "ROS cannot replace" in doc["Reason"] and "thing-2" in doc["Reason"] and "thing-1" in doc["Reason"]
    assert "Data" not in doc
    assert body(responses.success(req, "thing-1"))["Status"] == "SUCCESS"
    assert body(responses.success(req, None))["PhysicalResourceId"] == "thing-1"
    # CloudFormation: a new id is a replacement, as before
    cfn = parse(
        json.dumps(
            {
                k: v
                for k, v in ros_request("Update", URL, stack_id=ARN, physical_id="thing-1").items()
                if k not in ("IntranetResponseURL", "StackName", "ResourceOwnerId", "CallerId", "RegionId")
            }
        ),
        CLOUDFORMATION,
    )
    assert cfn.dialect is CLOUDFORMATION
    assert body(responses.success(cfn, "thing-2"))["PhysicalResourceId"] == "thing-2"


def test_ros_ids_and_no_echo():
    req = ros()
    default = body(responses.success(req, None))["PhysicalResourceId"]
    assert default.startswith("ros-stack-Thing-") and len(default.encode()) <= 255
    long_stack = parse(json.dumps({**ros_request("Create", URL), "StackName": "s" * 400}), ROS)
    assert len(body(responses.success(long_stack, None))["PhysicalResourceId"].encode()) == 255
    doc = body(responses.success(req, {"PhysicalResourceId": "p" * 256}))
    assert doc["Status"] == "FAILED" and "the limit is 255" in doc["Reason"]
    doc = body(responses.success(req, {"PhysicalResourceId": "id-1", "Data": {"Secret": "s"}, "NoEcho": True}))
    assert doc == {
        "Status": "SUCCESS",
        "Reason": "",
        "PhysicalResourceId": "id-1",
        "StackId": req.stack_id,
        "RequestId": req.request_id,
        "LogicalResourceId": "Thing",
        "Data": {"Secret": "s"},
    }


def test_ros_body_limit():
    req = ros()
    doc = body(responses.success(req, {"Data": {"Blob": "x" * 5000}}))
    assert doc["Status"] == "FAILED" and "4096" in doc["Reason"]
    doc = body(responses.failure(req, "why " * 3000))
    assert doc["Reason"].endswith("[...]")


@pytest.mark.parametrize(
    "mode, inside, expected",
    [
        ("public", True, [URL]),
        ("intranet", False, [INTRANET]),
        ("auto", True, [INTRANET, URL]),
        ("auto", False, [URL]),
    ],
)
def test_response_url_choice(mode, inside, expected):
    assert ResponseUrlChoice(mode, inside).urls(ros()) == expected


def test_response_url_choice_without_intranet_url_and_for_cloudformation():
    no_intranet = parse(
        json.dumps({k: v for k, v in ros_request("Create", URL).items() if k != "IntranetResponseURL"}), ROS
    )
    assert ResponseUrlChoice("intranet", True).urls(no_intranet) == [URL]
    cfn = parse(
        json.dumps(
            {
                "RequestType": "Create",
                "ResponseURL": URL,
                "StackId": ARN,
                "RequestId": "r",
                "LogicalResourceId": "L",
                "ResourceType": "Custom::X",
                "IntranetResponseURL": INTRANET,
            }
        ),
        CLOUDFORMATION,
    )
    assert ResponseUrlChoice("intranet", True).urls(cfn) == [URL]


def test_headers():
    assert CLOUDFORMATION.headers() == {"Content-Type": ""}
    headers = ROS.headers()
    assert headers["Content-Type"] == "application/json" and headers["Date"].endswith(" GMT")

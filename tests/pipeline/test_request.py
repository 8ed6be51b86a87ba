"""cfn_provider.pipeline.request: unanswerable messages vs answerable-but-invalid requests, and the read-only event."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cfn_provider.pipeline.request import ID_LIMITS, FrozenDict, NotARequest, Request, json_size, parse

STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/my-stack/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


def wire(**overrides):
    doc = {
        "RequestType": "Create",
        "ServiceToken": "arn:aws:sns:us-east-1:123456789012:cfn-provider",
        "ResponseURL": "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=x",
        "StackId": STACK_ID,
        "RequestId": "0c6bb5b3-4b10-4c3f-9a51-1f0b2b6f6f51",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Echo",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:sns:us-east-1:123456789012:cfn-provider",
            "Tags": [{"Key": "k", "Value": "v"}],
            "Nested": {"Deep": {"x": 1}},
        },
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def parse_doc(**overrides) -> Request:
    return parse(json.dumps(wire(**overrides)))


# --- a good request ---------------------------------------------------------------------


def test_valid_request_has_no_problems_and_exposes_its_fields():
    req = parse_doc()
    assert req.problems == ()
    assert req.request_type == "Create"
    assert req.resource_type == "Custom::Echo"
    assert req.response_url == wire()["ResponseURL"]
    assert req.stack_id == STACK_ID
    assert req.request_id == wire()["RequestId"]
    assert req.logical_id == "Thing"
    assert json.loads(json.dumps(req.wire)) == wire()  # exactly the wire document, unknown fields included
    assert req.wire["ServiceToken"] == wire()["ServiceToken"]


def test_update_with_physical_id_and_old_properties_is_valid():
    req = parse_doc(RequestType="Update", PhysicalResourceId="thing-1", OldResourceProperties={"a": "b"})
    assert req.problems == ()
    assert req.physical_id == "thing-1"


# --- NotARequest: nothing can be answered ---------------------------------------------


@pytest.mark.parametrize("text", ["", "nope", "{", "[" * 100_000])
def test_not_json_is_not_a_request(text):
    with pytest.raises(NotARequest, match="not JSON"):
        parse(text)


@pytest.mark.parametrize("text", ["[]", '"x"', "1", "null"])
def test_json_non_object_is_not_a_request(text):
    with pytest.raises(NotARequest, match="not an object"):
        parse(text)


@pytest.mark.parametrize("field", ["ResponseURL", "StackId", "RequestId", "LogicalResourceId"])
def test_missing_answerable_field_is_not_a_request(field):
    doc = wire()
    del doc[field]
    with pytest.raises(NotARequest, match=field):
        parse(json.dumps(doc))


@pytest.mark.parametrize("field", ["ResponseURL", "StackId", "RequestId", "LogicalResourceId"])
@pytest.mark.parametrize("value", ["", 12, None, ["x"], {"x": "y"}, True])
def test_non_string_or_empty_answerable_field_is_not_a_request(field, value):
    doc = wire()
    doc[field] = value
    with pytest.raises(NotARequest, match=field):
        parse(json.dumps(doc))


@pytest.mark.parametrize("field, limit", sorted(ID_LIMITS.items()))
def test_oversize_answerable_field_is_not_a_request(field, limit):
    with pytest.raises(NotARequest, match=f"oversized {field}"):
        parse_doc(**{field: "a" * (limit + 1)})


@pytest.mark.parametrize("field, limit", sorted(ID_LIMITS.items()))
def test_answerable_field_at_its_limit_is_accepted(field, limit):
    assert parse_doc(**{field: "a" * limit}).problems == ()


@pytest.mark.parametrize("field, limit", sorted(ID_LIMITS.items()))
def test_size_limits_count_utf8_bytes_not_characters(field, limit):
    too_long = "é" * (limit // 2 + 1)  # fewer characters than the limit, more bytes
    with pytest.raises(NotARequest, match=field):
        parse_doc(**{field: too_long})


def test_all_unanswerable_fields_are_named_together():
    with pytest.raises(NotARequest) as info:
        parse(json.dumps({"RequestType": "Create"}))
    for field in ("ResponseURL", "StackId", "RequestId", "LogicalResourceId"):
        assert field in str(info.value)


# --- problems: answerable, so FAILED naming what is wrong -------------------------------


@pytest.mark.parametrize("field", ["RequestType", "ResourceType"])
def test_missing_request_or_resource_type_is_a_problem(field):
    req = parse_doc(**{field: None})
    assert any("missing" in p and field in p for p in req.problems)


def test_both_types_missing_are_named():
    problems = " ".join(parse_doc(RequestType=None, ResourceType=None).problems)
    assert "RequestType" in problems and "ResourceType" in problems


@pytest.mark.parametrize("kind", ["Destroy", "create", "CREATE", ""])
def test_unknown_request_type_is_a_problem(kind):
    problems = parse_doc(RequestType=kind).problems
    assert problems and any("RequestType" in p and "Create, Update, Delete" in p for p in problems)


@pytest.mark.parametrize("field", ["RequestType", "ResourceType", "PhysicalResourceId"])
@pytest.mark.parametrize("value", [5, 1.5, True, ["x"], {"x": 1}])
def test_non_string_where_a_string_belongs_is_a_problem(field, value):
    overrides = {field: value}
    if field != "PhysicalResourceId":
        overrides["PhysicalResourceId"] = "thing-1"
    problems = parse_doc(**overrides).problems
    assert any(field in p and "not a string" in p for p in problems)


@pytest.mark.parametrize("physical_id", [None, ""])
def test_update_without_physical_id_is_a_problem(physical_id):
    problems = parse_doc(RequestType="Update", PhysicalResourceId=physical_id).problems
    assert any("PhysicalResourceId" in p for p in problems)


def test_oversize_physical_id_is_a_problem():
    problems = parse_doc(RequestType="Update", PhysicalResourceId="p" * 1025).problems
    assert any("PhysicalResourceId" in p for p in problems)


@pytest.mark.parametrize("field", ["ResourceProperties", "OldResourceProperties"])
@pytest.mark.parametrize("value", ["text", 3, ["a", "b"], True])
def test_properties_not_an_object_is_a_problem(field, value):
    problems = parse_doc(**{field: value}).problems
    assert any(field in p and "not an object" in p for p in problems)


def test_properties_not_an_object_read_as_empty():
    assert dict(parse_doc(ResourceProperties=["a"]).properties) == {}


def test_unknown_request_type_text_is_clipped_in_the_problem():
    problems = parse_doc(RequestType="X" * 5000).problems
    assert problems and all(len(p) < 200 for p in problems)


# --- the read-only event handlers receive -----------------------------------------------


@pytest.fixture
def event() -> FrozenDict:
    return parse_doc().wire


MUTATIONS = [
    ("setitem", lambda d: d.__setitem__("k", 1)),
    ("delitem", lambda d: d.__delitem__(next(iter(d)))),
    ("clear", lambda d: d.clear()),
    ("pop", lambda d: d.pop(next(iter(d)))),
    ("popitem", lambda d: d.popitem()),
    ("setdefault", lambda d: d.setdefault("k", 1)),
    ("update", lambda d: d.update(k=1)),
]


@pytest.mark.parametrize("name, mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_top_level_mutation_raises_type_error(event, name, mutate):
    before = dict(event)
    with pytest.raises(TypeError, match="read-only"):
        mutate(event)
    assert dict(event) == before


def test_in_place_or_raises_type_error(event):
    target = event
    with pytest.raises(TypeError):
        target |= {"k": 1}
    assert "k" not in event


@pytest.mark.parametrize("name, mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_nested_mapping_mutation_raises_type_error(event, name, mutate):
    with pytest.raises(TypeError):
        mutate(event["ResourceProperties"])
    with pytest.raises(TypeError):
        mutate(event["ResourceProperties"]["Nested"]["Deep"])
    with pytest.raises(TypeError):
        mutate(event["ResourceProperties"]["Tags"][0])  # a mapping inside a list


def test_nested_lists_cannot_be_changed(event):
    tags = event["ResourceProperties"]["Tags"]
    with pytest.raises(TypeError):
        tags[0] = {"Key": "other"}
    with pytest.raises((TypeError, AttributeError)):
        tags.append({"Key": "more"})
    assert list(tags) == [{"Key": "k", "Value": "v"}]


def test_event_is_still_a_dict_and_json_serialisable(event):
    assert isinstance(event, dict)
    assert isinstance(event["ResourceProperties"], dict)
    assert json.loads(json.dumps(event)) == wire()


def test_copies_are_plain_mutable_dicts(event):
    for copied in (dict(event), copy.copy(event)):
        copied["k"] = 1
        assert copied["k"] == 1
        assert type(copied) is dict
    assert "k" not in event


def test_deepcopy_is_mutable_at_every_level(event):
    copied = copy.deepcopy(event)
    copied["ResourceProperties"]["Nested"]["Deep"]["x"] = 2
    copied["ResourceProperties"]["Tags"].append({"Key": "new"})
    assert event["ResourceProperties"]["Nested"]["Deep"]["x"] == 1
    assert len(event["ResourceProperties"]["Tags"]) == 1


# --- derived values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "stack_id, name",
    [
        (STACK_ID, "my-stack"),
        ("arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/cn-stack/guid", "cn-stack"),
        ("arn:aws-us-gov:cloudformation:us-gov-west-1:123456789012:stack/gov/guid", "gov"),
        ("plain-stack-id-from-ros", "plain-stack-id-from-ros"),
        (
            "arn:aws:cloudformation:us-east-1:123456789012:stack/only-two",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/only-two",
        ),
        ("a/b/c", "a/b/c"),
    ],
)
def test_stack_name(stack_id, name):
    assert parse_doc(StackId=stack_id).stack_name == name


def test_key_depends_on_stack_id_and_request_id():
    base = parse_doc()
    assert parse_doc().key == base.key
    assert parse_doc(RequestId="other").key != base.key
    assert parse_doc(StackId=STACK_ID.replace("my-stack", "other")).key != base.key
    assert parse_doc(LogicalResourceId="Other", ResponseURL="https://b.s3.amazonaws.com/other").key == base.key


def test_key_does_not_conflate_different_id_pairs():
    """Two different (StackId, RequestId) pairs are two requests, whatever characters they hold."""
    one = parse_doc(StackId="stack|a", RequestId="b")
    two = parse_doc(StackId="stack", RequestId="a|b")
    assert one.key != two.key


@pytest.mark.parametrize(
    "props, expected",
    [
        ({}, 3600),
        ({"ServiceTimeout": 120}, 120),
        ({"ServiceTimeout": "120"}, 120),
        ({"ServiceTimeout": " 90 "}, 90),
        ({"ServiceTimeout": "1"}, 1),
        ({"ServiceTimeout": "3600"}, 3600),
        ({"ServiceTimeout": 0}, 1),
        ({"ServiceTimeout": "-5"}, 1),
        ({"ServiceTimeout": 3601}, 3600),
        ({"ServiceTimeout": "99999999"}, 3600),
        ({"ServiceTimeout": "soon"}, 3600),
        ({"ServiceTimeout": ""}, 3600),
        ({"ServiceTimeout": None}, 3600),
        ({"ServiceTimeout": True}, 3600),
        ({"ServiceTimeout": ["60"]}, 3600),
        ({"ServiceTimeout": {"s": 60}}, 3600),
    ],
)
def test_service_timeout(props, expected):
    assert parse_doc(ResourceProperties=props).service_timeout == expected


def test_service_timeout_defaults_when_properties_are_missing_or_not_an_object():
    assert parse_doc(ResourceProperties=None).service_timeout == 3600
    assert parse_doc(ResourceProperties="ServiceTimeout=5").service_timeout == 3600


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_json_size_is_what_the_text_takes_inside_a_json_body(text: str):
    """The fast path for plain ids (no escapes) and json.dumps's count agree on every text."""
    assert json_size(text) == len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2

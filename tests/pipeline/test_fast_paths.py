"""The pipeline's fast paths in admission (issue 32) decide exactly as the rules they skip: each
is checked against the full rule, written out here as the code had it, on generated input
(the ResponseURL rules' in tests/trust/test_url_fast_paths.py)."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cfn_provider.dialects.base import CLOUDFORMATION
from cfn_provider.dialects.ros import ROS
from cfn_provider.pipeline.envelope import BadMessage, unwrap
from cfn_provider.pipeline.request import (
    ANSWERABLE,
    ID_LIMITS,
    NotARequest,
    _all_problems,
    _problems,
    freeze,
    is_utf8,
    json_size,
    parse,
    read_json,
)

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)


def test_an_envelope_orjson_refuses_is_read_as_json_reads_it():
    """Envelopes are read by orjson, and by json.loads where orjson refuses; the same bodies are
    JSON, and the same envelopes come out."""
    document = {
        "Type": "Notification",
        "MessageId": "m-1",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:t",
        "Message": '{"RequestType": "Create"}',
        "Timestamp": "2026-11-28T00:00:00.000Z",
    }
    odd = {"Odd": "\ud800", "Big": 123456789012345678901234567890, "Nan": "NaN"}
    for name, value in odd.items():
        body = (
            json.dumps(document)[:-1]
            + f', "{name}": '
            + (value if isinstance(value, str) and name == "Nan" else json.dumps(value))
            + "}"
        )
        envelope = unwrap(body, "sqs-1", NOW)
        assert envelope.message == document["Message"] and envelope.topic_arn == document["TopicArn"], name
    for body in ("{", "", "[1,]", "{'Type': 1}"):
        try:
            unwrap(body, "sqs-1", NOW)
        except BadMessage as exc:
            assert "not JSON" in str(exc)
        else:
            raise AssertionError(f"{body!r} was read as JSON")


def test_a_big_integer_in_a_request_reaches_the_handler_as_an_integer():
    doc = {k: "x" for k in ANSWERABLE} | {"RequestType": "Create", "ResourceType": "Custom::X"}
    doc["ResourceProperties"] = {"N": 123456789012345678901234567890}
    assert parse(json.dumps(doc)).wire["ResourceProperties"]["N"] == 123456789012345678901234567890


def slow_json_size(text: str) -> int:
    """Bytes `text` takes inside a JSON body, measured by writing it (json_size's full rule)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=st.characters(codec=None, exclude_categories=())),
        st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_categories=())),
    )
)
def test_a_text_is_measured_as_writing_it_measures_it(text):
    assert json_size(text) == slow_json_size(text)


def test_each_ascii_character_is_measured_as_writing_it_measures_it():
    assert [c for c in map(chr, range(0x80)) if json_size(f"id-{c}") != slow_json_size(f"id-{c}")] == []


def slow_id_refusal(doc: dict) -> str | None:
    """The answerable ids' rules as they were, each over all four ids, before the fast path."""
    unusable = [k for k in ANSWERABLE if not isinstance(doc.get(k), str) or not doc[k]]
    if unusable:
        return f"cannot be answered: missing or non-string {', '.join(unusable)}"
    too_long = [k for k, limit in ID_LIMITS.items() if slow_json_size(doc[k]) > limit]
    if too_long:
        return f"cannot be answered: oversized {', '.join(too_long)}"
    broken = [k for k in ANSWERABLE if not is_utf8(doc[k])]
    if broken:
        return f"cannot be answered: {', '.join(broken)} not valid UTF-8"
    return None


IDS = st.one_of(
    st.none(),
    st.integers(),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12),
    st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_categories=()), max_size=12),
    st.sampled_from(["", "a" * 256, "a" * 257, 'q"' * 128, "\\" * 200, "\ud800", "é" * 200]),
    st.sampled_from(["a" * 255 + "\x7f", "a" * 255 + "\n", "a" * 254 + "\x00", "a" * 255 + "\\"]),
)


@settings(max_examples=1500, deadline=None)
@given(st.fixed_dictionaries({k: IDS for k in ANSWERABLE}))
def test_answerable_ids_are_judged_as_the_full_rules(ids):
    doc = {**{k: v for k, v in ids.items() if v is not None}, "RequestType": "Create", "ResourceType": "Custom::X"}
    expected = slow_id_refusal(doc)
    try:
        parse(json.dumps(doc))
    except NotARequest as exc:
        assert str(exc) == expected
    else:
        assert expected is None


FIELD_VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.booleans(),
    st.sampled_from(["", "Create", "Update", "Delete", "create", "Custom::X", {}, {"A": 1}, [], ["x"], "\ud800"]),
    st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_categories=()), max_size=8),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=8),
    st.sampled_from(["p" * 255, "p" * 256, "p" * 1024, "p" * 1025, "é" * 300, 'q"' * 300, "T" * 68, "T" * 69]),
)
REQUEST_FIELDS = ("RequestType", "ResourceType", "PhysicalResourceId", "ResourceProperties", "OldResourceProperties")
ABSENT = object()


EDGE_IDS = ["p-1", "", "p" * 255, "p" * 256, "p" * 1024, "p" * 1025, "é", 'q"', "\\", "\x7f", "\n", "\ud800"]
USUAL = st.fixed_dictionaries(  # the usual request, near each rule's edge
    {
        "RequestType": st.sampled_from(["Create", "Update", "Delete"]),
        "ResourceType": st.sampled_from(["Custom::X", "T" * 68, "T" * 69]),
        "PhysicalResourceId": st.sampled_from([ABSENT, *EDGE_IDS]),
        "ResourceProperties": st.sampled_from([ABSENT, {}, {"A": "1"}]),
        "OldResourceProperties": st.sampled_from([ABSENT, {}, {"A": "1"}]),
    }
)


@settings(max_examples=3000, deadline=None)
@given(
    USUAL,
    st.dictionaries(st.sampled_from(REQUEST_FIELDS), st.one_of(st.just(ABSENT), FIELD_VALUES), max_size=2),
    st.sampled_from([CLOUDFORMATION, ROS]),
)
def test_a_request_is_found_wanting_as_by_every_rule(usual, changed, dialect):
    """The one-expression case for the usual request finds what every rule finds: nothing, or
    (not taken) what they say. Usual requests near each rule's edge, with up to two fields
    changed to anything."""
    fields = {**usual, **changed}
    doc = {k: v for k, v in fields.items() if v is not ABSENT}
    assert _problems(doc, dialect) == _all_problems(doc, dialect)


def depth(value) -> int:
    """How deeply `value` nests, as the separate walk that came before freeze's did it."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=70), st.sampled_from(["dict", "list", "mixed"]))
def test_freeze_refuses_exactly_past_the_depth_limit(levels, shape):
    value: object = "leaf"
    for i in range(levels):
        value = {"k": value} if shape == "dict" or (shape == "mixed" and i % 2) else [value]
    doc = {k: "x" for k in ANSWERABLE} | {"RequestType": "Create", "ResourceType": "Custom::X", "P": value}
    request = parse(json.dumps(doc))
    too_deep = depth(doc) > 64
    assert ("request nests deeper than 64 levels" in request.problems) == too_deep
    if not too_deep:
        assert json.loads(json.dumps(request.wire)) == doc == json.loads(json.dumps(freeze(doc)))


def typed(value):
    """`value` with every scalar's type and exact reading made part of it (1 != 1.0, -0.0 != 0.0,
    nan == nan, key order kept), so two readings compare equal only when they are the same."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, repr(value))


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**18, 10**19])
    | st.floats()
    | st.text(alphabet=st.characters(codec=None, exclude_categories=())),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def reading(text: str):
    try:
        return typed(json.loads(text))
    except (ValueError, RecursionError) as exc:
        return type(exc)


def our_reading(text: str):
    try:
        return typed(read_json(text))
    except (ValueError, RecursionError) as exc:
        return type(exc)


@settings(max_examples=3000, deadline=None)
@given(JSON_VALUES, st.booleans(), st.sampled_from([None, 0, 2]))
def test_a_request_text_is_read_as_json_loads_reads_it(value, ascii_only, indent):
    """Requests are read by orjson where it reads as json.loads does (a handler gets the integer
    it was sent, however long): every value json.dumps writes, written either way."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert our_reading(text) == reading(text)


@settings(max_examples=2000, deadline=None)
@given(
    st.lists(st.sampled_from(list('{}[]":,.-+eE0123456789 \t\n\\unNaI\ud800\x00') + ["9" * 19, "1e400"])).map("".join)
)
def test_any_text_is_read_or_refused_as_json_loads_does(text):
    assert our_reading(text) == reading(text)


def test_the_integers_orjson_would_make_floats_stay_integers():
    for n in (2**64, -(2**63) - 1, 10**19 * 7, 123456789012345678901234567890):
        text = json.dumps({"N": n, "M": [n]})
        assert read_json(text) == {"N": n, "M": [n]} and type(read_json(text)["N"]) is int

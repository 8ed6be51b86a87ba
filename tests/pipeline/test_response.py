"""cfn_provider.pipeline.response: every response rule of docs/guarantees.md ("How each part is
kept"), then properties over arbitrary input."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cfn_provider.pipeline.request import ID_LIMITS, MAX_PHYSICAL_ID, Request, json_size, parse
from cfn_provider.pipeline.response import (
    MAX_BODY,
    Response,
    default_physical_id,
    failure,
    is_failed_create_marker,
    success,
)

STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/my-stack/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


def make(**overrides: Any) -> Request:
    doc = {
        "RequestType": "Create",
        "ResponseURL": "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=x",
        "StackId": STACK_ID,
        "RequestId": "0c6bb5b3-4b10-4c3f-9a51-1f0b2b6f6f51",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Thing",
        "ResourceProperties": {},
    }
    if overrides.get("RequestType") in ("Update", "Delete"):
        doc["PhysicalResourceId"] = "thing-1"
    doc.update(overrides)
    return parse(json.dumps({k: v for k, v in doc.items() if v is not None}))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def body_of(response: Response) -> dict[str, Any]:
    """The body as CloudFormation reads it: strict UTF-8, strict JSON (no NaN/Infinity), an object."""
    doc = json.loads(response.body.decode("utf-8", "strict"), parse_constant=_reject_constant)
    assert isinstance(doc, dict)
    assert doc["Status"] == response.status
    assert doc["PhysicalResourceId"] == response.physical_id
    assert doc["Reason"] == response.reason
    return doc


CREATE, UPDATE, DELETE = (make(), make(RequestType="Update"), make(RequestType="Delete"))


# --- ids copied verbatim ---------------------------------------------------------------

ODD_IDS = dict(
    StackId='arn:aws:cloudformation:eu-west-1:123456789012:stack/stäck "quoted"/guid\\back',
    RequestId="req/ü/😀/\n\t\x01",
    LogicalResourceId="Lögical</script>",
)


@pytest.mark.parametrize(
    "build",
    [
        lambda r: success(r, None),
        lambda r: success(r, {"Data": {"a": 1}}),
        lambda r: success(r, ["not", "valid"]),
        lambda r: failure(r, "boom"),
    ],
    ids=["success", "success-data", "invalid-result", "failure"],
)
@pytest.mark.parametrize("kind", ["Create", "Update", "Delete"])
def test_ids_are_copied_verbatim(build, kind):
    req = make(RequestType=kind, **ODD_IDS)
    doc = body_of(build(req))
    for field, value in ODD_IDS.items():
        assert doc[field] == value


# --- what the handler returns ----------------------------------------------------------


def test_none_on_create_gives_a_default_id_and_no_data():
    resp = success(CREATE, None)
    doc = body_of(resp)
    assert resp.ok and doc["Status"] == "SUCCESS"
    assert doc["PhysicalResourceId"] == default_physical_id(CREATE)
    assert "Data" not in doc and "NoEcho" not in doc


def test_str_result_is_the_physical_id():
    assert body_of(success(CREATE, "bucket-123"))["PhysicalResourceId"] == "bucket-123"


def test_mapping_result_gives_id_data_and_noecho():
    resp = success(
        CREATE, {"PhysicalResourceId": "db-1", "Data": {"Endpoint": "db.example", "Port": 5432}, "NoEcho": True}
    )
    doc = body_of(resp)
    assert doc["PhysicalResourceId"] == "db-1"
    assert doc["Data"] == {"Endpoint": "db.example", "Port": 5432}
    assert doc["NoEcho"] is True and resp.no_echo


def test_empty_mapping_is_like_none():
    assert body_of(success(CREATE, {})) == body_of(success(CREATE, None))


def test_noecho_false_is_not_sent():
    doc = body_of(success(CREATE, {"Data": {"a": "b"}, "NoEcho": False}))
    assert "NoEcho" not in doc


def test_empty_data_is_not_sent():
    assert "Data" not in body_of(success(CREATE, {"Data": {}}))


def test_data_of_read_only_event_values_is_serialised():
    """Echoing (frozen) properties back works: frozen mappings become objects, tuples lists."""
    req = make(ResourceProperties={"List": [1, {"x": "y"}], "Map": {"k": "v"}})
    doc = body_of(success(req, {"Data": req.properties}))
    assert doc["Data"] == {"List": [1, {"x": "y"}], "Map": {"k": "v"}}


def test_data_is_snapshotted_when_the_response_is_built():
    data = {"a": [1]}
    resp = success(CREATE, {"Data": data})
    data["a"].append(2)
    assert body_of(resp)["Data"] == {"a": [1]}


# --- default Create id -----------------------------------------------------------------


def test_default_create_id_is_deterministic():
    again = make()
    assert default_physical_id(again) == default_physical_id(CREATE)
    assert body_of(success(again, None))["PhysicalResourceId"] == body_of(success(CREATE, None))["PhysicalResourceId"]


def test_default_create_id_names_the_stack_and_resource_and_depends_on_request_id():
    pid = default_physical_id(CREATE)
    assert pid.startswith("my-stack-Thing-")
    assert default_physical_id(make(RequestId="another-request")) != pid
    assert default_physical_id(make(LogicalResourceId="Other")) != pid
    assert not is_failed_create_marker(pid)


def test_default_create_id_is_bounded_and_non_empty_for_huge_unicode_ids():
    req = make(StackId="ß" * (ID_LIMITS["StackId"] // 2), LogicalResourceId="é" * (ID_LIMITS["LogicalResourceId"] // 2))
    pid = body_of(success(req, None))["PhysicalResourceId"]
    assert 0 < len(pid.encode()) <= MAX_PHYSICAL_ID


# --- Update ----------------------------------------------------------------------------


def test_update_with_no_id_keeps_the_requests_id():
    assert body_of(success(UPDATE, None))["PhysicalResourceId"] == "thing-1"
    assert body_of(success(UPDATE, {"Data": {"a": "b"}}))["PhysicalResourceId"] == "thing-1"


def test_update_may_return_a_new_id():
    assert body_of(success(UPDATE, "thing-2"))["PhysicalResourceId"] == "thing-2"


def test_update_can_carry_data_and_noecho():
    doc = body_of(success(UPDATE, {"Data": {"a": "b"}, "NoEcho": True}))
    assert doc["Data"] == {"a": "b"} and doc["NoEcho"] is True


def test_failed_update_keeps_the_requests_id():
    assert body_of(failure(UPDATE, "boom"))["PhysicalResourceId"] == "thing-1"


# --- Delete ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        None,
        "a-different-id",
        {"PhysicalResourceId": "a-different-id"},
        {"PhysicalResourceId": "a-different-id", "Data": {"Secret": "s"}, "NoEcho": True},
    ],
)
def test_delete_never_changes_the_id_and_never_carries_data_or_noecho(result):
    resp = success(DELETE, result)
    doc = body_of(resp)
    assert doc["Status"] == "SUCCESS"
    assert doc["PhysicalResourceId"] == "thing-1"
    assert "Data" not in doc and "NoEcho" not in doc
    assert not resp.no_echo


@pytest.mark.parametrize(
    "result",
    [
        pytest.param(True, id="true"),
        pytest.param([1, 2], id="list"),
        pytest.param({"ResponseMetadata": {"HTTPStatusCode": 204}}, id="boto-response"),
        pytest.param({"Data": {"When": object()}}, id="non-json-data"),
        pytest.param({"Data": {"X": float("nan")}}, id="nan-data"),
        pytest.param({"PhysicalResourceId": ""}, id="empty-id"),
        pytest.param(42, id="int"),
    ],
)
def test_a_deletes_return_value_is_ignored_so_it_cannot_fail_the_delete(result):
    # Lambda code ported over returns such values; the Delete did its work and must answer SUCCESS
    doc = body_of(success(DELETE, result))
    assert doc["Status"] == "SUCCESS"
    assert doc["PhysicalResourceId"] == "thing-1"
    assert "Data" not in doc and "NoEcho" not in doc


def test_failed_delete_keeps_the_requests_id():
    doc = body_of(failure(DELETE, "cannot delete"))
    assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"] == "thing-1"


def test_delete_of_the_failed_create_marker_succeeds_with_the_marker():
    marker = failure(CREATE, "boom").physical_id
    req = make(RequestType="Delete", PhysicalResourceId=marker)
    doc = body_of(success(req, None))
    assert doc["Status"] == "SUCCESS" and doc["PhysicalResourceId"] == marker


def test_delete_without_a_physical_id_still_answers_with_a_non_empty_id():
    req = make(RequestType="Delete", PhysicalResourceId=None)
    for resp in (success(req, None), failure(req, "x")):
        pid = body_of(resp)["PhysicalResourceId"]
        assert pid and len(pid.encode()) <= MAX_PHYSICAL_ID


# --- failed Create marker --------------------------------------------------------------


def test_failed_create_carries_a_recognisable_marker():
    resp = failure(CREATE, "boom")
    doc = body_of(resp)
    assert doc["Status"] == "FAILED" and doc["Reason"] == "boom"
    assert is_failed_create_marker(doc["PhysicalResourceId"])
    assert "Data" not in doc and "NoEcho" not in doc


def test_failed_create_marker_is_stable_per_request_and_differs_between_requests():
    assert failure(make(), "a").physical_id == failure(make(), "b").physical_id
    assert failure(make(RequestId="other"), "a").physical_id != failure(CREATE, "a").physical_id


def test_failed_create_marker_even_when_the_create_carries_an_id():
    req = make(PhysicalResourceId="stray-id")
    assert is_failed_create_marker(failure(req, "boom").physical_id)


@pytest.mark.parametrize("pid", ["thing-1", "cfn-provider", "my-stack-Thing-0123456789ab", ""])
def test_ordinary_ids_are_not_markers(pid):
    assert not is_failed_create_marker(pid)


def test_failure_without_reason_still_says_something():
    assert body_of(failure(CREATE, ""))["Reason"]


def test_failure_reason_that_fits_is_kept_exactly():
    reason = 'KeyError: "Bucket"\n  at line 3\twith ünïcödé 😀'
    assert body_of(failure(CREATE, reason))["Reason"] == reason


# --- invalid results -------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, mentions",
    [
        (["a", "b"], "list"),
        (42, "int"),
        (True, "bool"),
        (b"bucket-123", "bytes"),
        (object(), "object"),
        ("", "PhysicalResourceId"),
        ({"PhysicalResourceId": ""}, "PhysicalResourceId"),
        ({"PhysicalResourceId": 5}, "PhysicalResourceId"),
        ({"PhysicalResourceId": ["x"]}, "PhysicalResourceId"),
        ({"Data": ["a"]}, "Data"),
        ({"Data": "text"}, "Data"),
        ({"Data": {"x": object()}}, "Data"),
        ({"Data": {"x": {1, 2}}}, "Data"),
    ],
)
@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_invalid_result_is_failed_with_a_clear_reason(result, mentions, kind):
    req = make(RequestType=kind)
    doc = body_of(success(req, result))
    assert doc["Status"] == "FAILED"
    assert "unusable result" in doc["Reason"] and mentions in doc["Reason"]
    assert "Data" not in doc
    assert doc["PhysicalResourceId"]


@pytest.mark.parametrize(
    "result, key",
    [
        ({"Foo": 1}, "Foo"),
        ({"physicalResourceId": "x"}, "physicalResourceId"),  # wrong case is a mistake worth reporting
        ({"PhysicalResourceId": "ok", "Status": "SUCCESS"}, "Status"),
        ({"Data": {"a": 1}, "Reason": "fine"}, "Reason"),
    ],
)
def test_unknown_keys_in_result_are_failed_naming_them(result, key):
    doc = body_of(success(CREATE, result))
    assert doc["Status"] == "FAILED" and key in doc["Reason"]


def test_physical_id_at_1024_bytes_is_accepted():
    pid = "p" * MAX_PHYSICAL_ID
    doc = body_of(success(CREATE, pid))
    assert doc["Status"] == "SUCCESS" and doc["PhysicalResourceId"] == pid


@pytest.mark.parametrize("pid", ["p" * (MAX_PHYSICAL_ID + 1), "é" * (MAX_PHYSICAL_ID // 2 + 1)])
def test_physical_id_over_1024_bytes_is_failed(pid):
    doc = body_of(success(CREATE, {"PhysicalResourceId": pid}))
    assert doc["Status"] == "FAILED" and str(MAX_PHYSICAL_ID) in doc["Reason"]
    assert len(doc["PhysicalResourceId"].encode()) <= MAX_PHYSICAL_ID


# --- body size: encoded bytes, 4096 at most -------------------------------------------


def _largest_fitting(build) -> Response:
    """The response for the largest n where build(n) still succeeds."""
    n = 3000
    while success(CREATE, build(n + 1)).ok:
        n += 1
    return success(CREATE, build(n))


def test_data_fitting_exactly_4096_bytes_is_sent():
    resp = _largest_fitting(lambda n: {"Data": {"Blob": "x" * n}})
    assert resp.ok and len(resp.body) == MAX_BODY


@pytest.mark.parametrize("char, encoded", [("€", 3), ("😀", 4), ('"', 2), ("\\", 2), ("\n", 2), ("\x01", 6)])
def test_body_size_counts_encoded_bytes_including_escapes(char, encoded):
    n_chars = 3600 // encoded  # under 4096 characters, over 4096 bytes once combined with the ids
    over = success(CREATE, {"Data": {"Blob": char * (n_chars + 400 // encoded + 1)}})
    assert not over.ok and len(over.body) <= MAX_BODY
    under = success(CREATE, {"Data": {"Blob": char * (n_chars // 2)}})
    assert under.ok and len(under.body) <= MAX_BODY
    assert body_of(under)["Data"]["Blob"] == char * (n_chars // 2)


def test_oversized_data_fails_explaining_and_keeps_the_handlers_id():
    resp = success(CREATE, {"PhysicalResourceId": "bucket-123", "Data": {"Blob": "x" * 5000}, "NoEcho": True})
    doc = body_of(resp)
    assert doc["Status"] == "FAILED"
    assert doc["PhysicalResourceId"] == "bucket-123"  # the rollback Delete must reach what was created
    assert "4096" in doc["Reason"] and "Data" in doc["Reason"]
    assert "Data" not in doc and "NoEcho" not in doc
    assert len(resp.body) <= MAX_BODY


def test_oversized_data_on_create_without_an_id_keeps_the_default_id_not_the_marker():
    doc = body_of(success(CREATE, {"Data": {"Blob": "x" * 5000}}))
    assert doc["Status"] == "FAILED"
    assert doc["PhysicalResourceId"] == default_physical_id(CREATE)


def test_oversized_data_on_update_keeps_the_id():
    doc = body_of(success(UPDATE, {"Data": {"Blob": "x" * 5000}}))
    assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"] == "thing-1"


@pytest.mark.parametrize("reason", ["x" * 10_000, "€" * 5_000, '"' * 5_000, "\x01" * 5_000, "😀\n" * 3_000])
def test_long_reason_is_trimmed_to_fit(reason):
    resp = failure(CREATE, reason)
    doc = body_of(resp)
    assert len(resp.body) <= MAX_BODY
    kept = doc["Reason"]
    head = kept.rstrip(" [.]")
    assert reason.startswith(head) and len(head) > 100  # a real prefix, not an empty stub
    assert kept != reason


def test_long_reason_with_ids_at_their_limits_still_fits():
    req = make(
        RequestType="Update",
        PhysicalResourceId="p" * MAX_PHYSICAL_ID,
        **{k: "i" * v for k, v in ID_LIMITS.items() if k != "ResponseURL"},
    )
    resp = failure(req, "reason " * 2000)
    assert len(resp.body) <= MAX_BODY
    assert body_of(resp)["StackId"] == "i" * ID_LIMITS["StackId"]


def test_trimmed_reason_uses_the_space_available():
    resp = failure(CREATE, "x" * 10_000)
    assert len(resp.body) > MAX_BODY - 16


# --- hostile input: the body is still valid, bounded JSON -----------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_in_data_never_produce_invalid_json(value):
    """JSON has no NaN/Infinity: CloudFormation cannot read such a body. Expect FAILED (or a valid body)."""
    resp = success(CREATE, {"Data": {"Ratio": value}})
    body_of(resp)  # strict JSON


@pytest.mark.parametrize(
    "result",
    [
        {"Data": {"Text": "lone \ud800 surrogate"}},
        "id-\udfff",
        {"PhysicalResourceId": "id-\ud83d"},
    ],
    ids=["data", "str-id", "mapping-id"],
)
def test_lone_surrogates_in_a_result_give_a_valid_body_not_an_exception(result):
    body_of(success(CREATE, result))


def test_lone_surrogate_in_a_reason_gives_a_valid_body_not_an_exception():
    body_of(failure(CREATE, "boom \ud800"))


def test_lone_surrogate_in_an_id_is_refused_or_answered_validly():
    text = json.dumps(
        {
            "RequestType": "Create",
            "ResourceType": "Custom::X",
            "LogicalResourceId": "L",
            "ResponseURL": "https://bucket.s3.amazonaws.com/k",
            "StackId": "s",
            "RequestId": "r\ud800",
        }
    )
    try:
        req = parse(text)
    except ValueError:  # NotARequest: cannot be answered, fine
        return
    body_of(failure(req, "x"))


@pytest.mark.parametrize("char", ['"', "\\", "\x01"])
def test_ids_full_of_escapes_are_refused_or_answered_within_4096_bytes(char):
    """Whatever parse accepts must be answerable: escaping grows ids in the body."""
    fields = {k: char * v for k, v in ID_LIMITS.items() if k != "ResponseURL"}
    try:
        req = make(RequestType="Update", PhysicalResourceId=char * MAX_PHYSICAL_ID, **fields)
    except ValueError:
        return
    for resp in (failure(req, "boom"), success(req, None)):
        assert len(resp.body) <= MAX_BODY


def test_handler_id_full_of_escapes_still_answers_within_4096_bytes():
    resp = success(CREATE, "\x01" * MAX_PHYSICAL_ID)
    assert len(resp.body) <= MAX_BODY
    body_of(resp)


# --- properties over arbitrary requests and results ------------------------------------

# Text is any Unicode scalar value (surrogates are covered above), weighted towards characters
# JSON must escape and multi-byte ones, and sized up to the parse limits.
CHARS = st.characters(codec="utf-8")
NASTY = st.sampled_from(['"', "\\", "\n", "\x00", "\x01", "\x1f", "/", "é", "€", "😀", "\u2028"])


def _clip(text: str, limit: int) -> str:
    """The longest prefix whose size inside a JSON body (escapes included) is within `limit`."""
    text = text.encode()[:limit].decode("utf-8", "ignore")
    while json_size(text) > limit:
        text = text[: max(0, len(text) - max(1, (json_size(text) - limit) // 6))]
    return text


def bounded_text(limit: int) -> st.SearchStrategy[str]:
    short = st.text(CHARS, min_size=1, max_size=30)
    unit = st.one_of(st.text(CHARS, min_size=1, max_size=6), st.text(NASTY, min_size=1, max_size=3))
    repeated = st.builds(lambda u, n: u * n, unit, st.integers(1, limit))
    return st.one_of(short, repeated).map(lambda s: _clip(s, limit)).filter(bool)


SMALL_TEXT = st.text(CHARS, max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | SMALL_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(SMALL_TEXT, children, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(SMALL_TEXT, JSON_VALUES, max_size=6)
BIG_DATA = st.builds(
    lambda k, t, n: {k: t * n}, SMALL_TEXT, st.text(CHARS, min_size=1, max_size=3), st.integers(0, 5000)
)
STACK_IDS = st.one_of(
    bounded_text(ID_LIMITS["StackId"]),
    st.builds(
        lambda n, g: _clip(f"arn:aws:cloudformation:us-east-1:123456789012:stack/{n}/{g}", ID_LIMITS["StackId"]),
        bounded_text(200),
        st.uuids().map(str),
    ),
)


@st.composite
def requests(draw) -> Request:
    kind = draw(st.sampled_from(["Create", "Update", "Delete"]) | st.sampled_from(["Destroy", ""]))
    doc: dict[str, Any] = {
        "RequestType": kind,
        "ResourceType": draw(bounded_text(100)),
        "ResponseURL": "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=" + draw(bounded_text(200)),
        "StackId": draw(STACK_IDS),
        "RequestId": draw(bounded_text(ID_LIMITS["RequestId"])),
        "LogicalResourceId": draw(bounded_text(ID_LIMITS["LogicalResourceId"])),
        "ResourceProperties": draw(JSON_OBJECTS),
    }
    if kind in ("Update", "Delete") or draw(st.booleans()):
        doc["PhysicalResourceId"] = draw(bounded_text(MAX_PHYSICAL_ID))
    if kind == "Update":
        doc["OldResourceProperties"] = draw(JSON_OBJECTS)
    return parse(json.dumps(doc))  # within every limit: parse must accept it


RESULTS = st.one_of(
    st.none(),
    bounded_text(MAX_PHYSICAL_ID + 100),
    st.just(""),
    st.fixed_dictionaries(
        {},
        optional={
            "PhysicalResourceId": st.one_of(bounded_text(MAX_PHYSICAL_ID + 100), st.none(), st.integers()),
            "Data": st.one_of(JSON_OBJECTS, BIG_DATA, st.none(), JSON_VALUES),
            "NoEcho": st.booleans(),
        },
    ),
    st.builds(lambda k, v: {k: v}, SMALL_TEXT, JSON_VALUES),  # possibly unknown keys
    JSON_VALUES,
)
REASONS = st.one_of(st.just(""), bounded_text(12_000)).map(lambda t: str(RuntimeError(t)))
PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def _check_contract(req: Request, resp: Response) -> None:
    doc = body_of(resp)
    assert doc["StackId"] == req.wire["StackId"]
    assert doc["RequestId"] == req.wire["RequestId"]
    assert doc["LogicalResourceId"] == req.wire["LogicalResourceId"]
    assert doc["Status"] in ("SUCCESS", "FAILED")
    pid = doc["PhysicalResourceId"]
    assert isinstance(pid, str) and pid and len(pid.encode()) <= MAX_PHYSICAL_ID
    if doc["Status"] == "FAILED":
        assert doc["Reason"]
    if doc["Status"] == "FAILED" or req.request_type == "Delete":
        assert "Data" not in doc and "NoEcho" not in doc
    if req.request_type == "Delete" and req.physical_id:
        assert pid == req.physical_id


@pytest.mark.slow  # hypothesis at size: 200 examples of bodies up to 12 KB
@PROPERTY_SETTINGS
@given(req=requests(), result=RESULTS, reason=REASONS)
def test_property_never_raises_and_keeps_the_contract(req, result, reason):
    _check_contract(req, success(req, result))
    _check_contract(req, failure(req, reason))


@pytest.mark.slow  # hypothesis at size: 200 examples of bodies up to 12 KB
@PROPERTY_SETTINGS
@given(req=requests(), result=RESULTS, reason=REASONS)
def test_property_body_is_at_most_4096_bytes(req, result, reason):
    assert len(success(req, result).body) <= MAX_BODY
    assert len(failure(req, reason).body) <= MAX_BODY


# --- a Create cut short: the timed-out marker -------------------------------------------

from cfn_provider.pipeline.response import TIMED_OUT_PREFIX, cut_short, timed_out_create, timed_out_marker  # noqa: E402

PROPS = {"ServiceToken": "arn:aws:sns:us-east-1:123456789012:t", "Bucket": "b-1", "Tags": [{"K": "v"}]}


def rollback_delete(marker: str, **overrides: Any) -> Request:
    """CloudFormation's rollback Delete of CREATE (same stack, logical id, type and properties)."""
    fields = dict(
        RequestType="Delete",
        RequestId="9d0f6c43-0000-4000-8000-000000000001",
        PhysicalResourceId=marker,
        ResourceProperties=PROPS,
    )
    return make(**{**fields, **overrides})


def test_a_create_cut_short_answers_with_a_timed_out_marker_not_the_failed_create_one():
    create = make(ResourceProperties=PROPS)
    doc = body_of(cut_short(create, "timed out after 9 s"))
    assert doc["Status"] == "FAILED" and doc["Reason"] == "timed out after 9 s"
    assert doc["PhysicalResourceId"].startswith(TIMED_OUT_PREFIX)
    assert not is_failed_create_marker(doc["PhysicalResourceId"])
    assert doc["PhysicalResourceId"] == timed_out_marker(create)  # stable: a re-send carries the same


def test_updates_and_deletes_cut_short_keep_their_id():
    for req in (UPDATE, DELETE):
        assert body_of(cut_short(req, "timed out"))["PhysicalResourceId"] == "thing-1"


def test_the_rollback_delete_of_a_create_cut_short_names_that_create():
    create = make(ResourceProperties=PROPS)
    marker = cut_short(create, "x").physical_id
    assert timed_out_create(rollback_delete(marker)) == create.request_id


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(dict(ResourceProperties={**PROPS, "Bucket": "someone-elses"}), id="other-properties"),
        pytest.param(dict(ResourceProperties={k: v for k, v in PROPS.items() if k != "Tags"}), id="fewer-properties"),
        pytest.param(dict(LogicalResourceId="Other"), id="other-logical-id"),
        pytest.param(dict(ResourceType="Custom::Other"), id="other-type"),
        pytest.param(dict(StackId=STACK_ID.replace("my-stack", "their-stack")), id="other-stack"),
    ],
)
def test_a_marker_does_not_verify_for_anything_but_its_own_resource(change):
    marker = cut_short(make(ResourceProperties=PROPS), "x").physical_id
    assert timed_out_create(rollback_delete(marker, **change)) is None


@pytest.mark.parametrize(
    "forged",
    [
        TIMED_OUT_PREFIX,
        TIMED_OUT_PREFIX + "0c6bb5b3-4b10-4c3f-9a51-1f0b2b6f6f51",
        TIMED_OUT_PREFIX + "0c6bb5b3-4b10-4c3f-9a51-1f0b2b6f6f51-" + "0" * 32,
        TIMED_OUT_PREFIX + "-" + "0" * 32,
    ],
)
def test_a_made_up_marker_does_not_verify(forged):
    assert timed_out_create(rollback_delete(forged)) is None


def test_a_create_whose_marker_would_not_fit_gets_the_failed_create_marker():
    from cfn_provider.dialects.ros import ROS
    from tests.dialects.conftest import ros_request

    doc = ros_request("Create", "https://ros.example/r", request_id="r" * 240)  # ROS ids: 255 bytes at most
    create = parse(json.dumps(doc), ROS)
    assert create.dialect is ROS and not create.problems
    pid = body_of(cut_short(create, "x"))["PhysicalResourceId"]
    assert is_failed_create_marker(pid)


@pytest.mark.parametrize(
    "data, key",
    [
        ({"Name": "x", "When": datetime.datetime(2026, 1, 1)}, "When"),
        ({"Ok": 1, "Tags": {1, 2}}, "Tags"),
        ({"Ratio": float("nan")}, "Ratio"),
    ],
)
def test_data_that_is_not_json_is_failed_naming_the_key_and_keeping_the_handlers_id(data, key):
    # the handler made something: its id goes back, so CloudFormation's rollback Delete reaches it
    doc = body_of(success(CREATE, {"PhysicalResourceId": "made-1", "Data": data}))
    assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"] == "made-1"
    assert f"Data key {key!r} is not JSON-serialisable" in doc["Reason"] and "Data" not in doc
    assert "2026" not in doc["Reason"]  # the key, never its value


def test_an_unusable_result_without_an_id_of_its_own_gets_the_failed_create_marker():
    doc = body_of(success(CREATE, {"Data": {"When": datetime.datetime(2026, 1, 1)}}))
    assert doc["Status"] == "FAILED" and is_failed_create_marker(doc["PhysicalResourceId"])
    unknown = body_of(success(CREATE, {"PhysicalResourceId": "made-2", "Extra": 1}))
    assert unknown["Status"] == "FAILED" and unknown["PhysicalResourceId"] == "made-2"

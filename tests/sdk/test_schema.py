"""cfn_provider.sdk.schema: CloudFormation's string scalars converted where the schema asks for booleans,
integers and numbers; validation failures that name the property and the rule, never the value."""

from __future__ import annotations

import json

import pytest

from cfn_provider import PropertyError
from cfn_provider.pipeline.request import parse
from cfn_provider.sdk.schema import check_schema, coerce, thaw, validate

# ---------------------------------------------------------------------------------- coercion

SCHEMA = {
    "type": "object",
    "properties": {
        "Enabled": {"type": "boolean"},
        "Size": {"type": "integer", "minimum": 1},
        "Ratio": {"type": "number"},
        "Name": {"type": "string"},
        "Either": {"type": ["integer", "string"]},
        "Ports": {"type": "array", "items": {"type": "integer"}},
        "Nested": {
            "type": "object",
            "properties": {"On": {"type": "boolean"}, "Deep": {"$ref": "#/$defs/deep"}},
            "additionalProperties": {"type": "integer"},
        },
        "Choice": {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["auto"]}]},
        "Mode": {"type": "string", "default": "fast"},
    },
    "patternProperties": {"^Flag": {"type": "boolean"}},
    "$defs": {"deep": {"type": "array", "items": {"type": "object", "properties": {"N": {"type": "number"}}}}},
}


def test_string_scalars_become_what_the_schema_asks_for():
    got = coerce(
        {
            "Enabled": "true",
            "Size": "42",
            "Ratio": "1.5",
            "Name": "42",
            "Either": "7",
            "Ports": ["80", "443"],
            "FlagX": "FALSE",
        },
        SCHEMA,
    )
    assert got == {
        "Enabled": True,
        "Size": 42,
        "Ratio": 1.5,
        "Name": "42",
        "Either": "7",
        "Ports": [80, 443],
        "FlagX": False,
        "Mode": "fast",
    }
    assert type(got["Size"]) is int and got["Enabled"] is True


def test_nested_objects_refs_and_additional_properties_are_coerced():
    got = coerce({"Nested": {"On": "false", "Deep": [{"N": "2"}, {"N": "2.5e1"}], "Other": "9"}}, SCHEMA)
    assert got["Nested"] == {"On": False, "Deep": [{"N": 2}, {"N": 25.0}], "Other": 9}


def test_any_of_keeps_a_fitting_value_and_converts_otherwise():
    assert coerce({"Choice": "auto"}, SCHEMA)["Choice"] == "auto"
    assert coerce({"Choice": "12"}, SCHEMA)["Choice"] == 12


@pytest.mark.parametrize("text, expected", [("3.0", 3), (" 5 ", 5), ("-2", -2), ("+4", 4)])
def test_integer_spellings(text, expected):
    assert coerce({"Size": text}, SCHEMA)["Size"] == expected


@pytest.mark.parametrize("text", ["yes", "1.5", "nan", "inf", "", "0x10", "1e400"])
def test_what_does_not_convert_is_left_for_validation(text):
    props = coerce({"Size": text, "Enabled": text}, SCHEMA)
    assert props["Size"] == text and props["Enabled"] == text
    with pytest.raises(PropertyError):
        validate(props, SCHEMA)


def test_nan_and_infinity_never_become_numbers():
    assert coerce({"Ratio": "nan"}, SCHEMA)["Ratio"] == "nan"
    assert coerce({"Ratio": "-Infinity"}, SCHEMA)["Ratio"] == "-Infinity"


def test_coercion_does_not_change_its_input_and_accepts_the_read_only_request():
    ev = parse(
        json.dumps(
            {
                "RequestType": "Create",
                "ResponseURL": "https://bucket.s3.amazonaws.com/key",
                "StackId": "arn:aws:cloudformation:eu-west-2:123456789012:stack/shop/6a1b-guid",
                "RequestId": "req-1",
                "LogicalResourceId": "Thing",
                "ResourceType": "Custom::Thing",
                "ResourceProperties": {"Ports": ["1"], "Nested": {"On": "true"}},
            }
        )
    ).wire
    before = json.dumps(ev, sort_keys=True)
    got = coerce(ev["ResourceProperties"], SCHEMA)
    assert got["Ports"] == [1] and isinstance(got["Ports"], list)  # the request's tuples became lists
    got["Ports"].append(2)
    assert json.dumps(ev, sort_keys=True) == before


def test_schema_without_types_leaves_values_alone():
    assert coerce({"A": "true", "B": ["1"]}, {"type": "object"}) == {"A": "true", "B": ["1"]}


# ---------------------------------------------------------------------------------- validation


def test_validation_errors_name_the_property_path():
    schema = {
        "type": "object",
        "properties": {
            "Tags": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["Key"],
                    "properties": {"Key": {"type": "string", "minLength": 1}},
                },
            }
        },
    }
    with pytest.raises(PropertyError) as err:
        validate({"Tags": [{"Key": "ok"}, {"Key": ""}]}, schema)
    assert "Tags[1].Key:" in str(err.value)
    assert str(err.value).startswith("invalid ResourceProperties: ")


def test_missing_and_unknown_properties_are_named():
    schema = {
        "type": "object",
        "required": ["Size"],
        "additionalProperties": False,
        "properties": {"Size": {"type": "integer"}},
    }
    with pytest.raises(PropertyError) as err:
        validate({"Sise": 3}, schema)
    assert "Size: is required (required)" in str(err.value)
    assert "Sise: is not a property this resource takes (additionalProperties)" in str(err.value)


SECRET = "Hunter2-correct-horse-battery-staple"


@pytest.mark.parametrize(
    "schema, props",
    [
        ({"properties": {"Password": {"type": "string", "pattern": "^[a-z]+$"}}}, {"Password": SECRET}),
        ({"properties": {"Password": {"type": "integer"}}}, {"Password": SECRET}),
        ({"properties": {"Password": {"type": "string", "maxLength": 4}}}, {"Password": SECRET}),
        ({"properties": {"Password": {"enum": ["a", "b"]}}}, {"Password": SECRET}),
        ({"properties": {"Password": {"const": "a"}}}, {"Password": SECRET}),
        ({"properties": {"Password": {"not": {"type": "string"}}}}, {"Password": SECRET}),
        ({"properties": {"P": {"type": "array", "uniqueItems": True}}}, {"P": [SECRET, SECRET]}),
        ({"properties": {"P": {"type": "array", "maxItems": 1}}}, {"P": [SECRET, SECRET]}),
        ({"properties": {"P": {"type": "object", "maxProperties": 0}}}, {"P": {"k": SECRET}}),
        ({"properties": {"P": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}}}, {"P": SECRET}),
        ({"properties": {"P": {"anyOf": [{"type": "integer"}, {"maxLength": 2}]}}}, {"P": SECRET}),
        ({"properties": {"P": {"type": "object", "required": ["X"]}}}, {"P": {"Y": SECRET}}),
        ({"additionalProperties": {"type": "integer"}}, {"Password": SECRET}),
        ({"type": "object", "properties": {"N": {"type": "number", "multipleOf": 7}}}, {"N": 12345678901}),
    ],
)
def test_reasons_name_the_property_and_the_rule_never_the_value(schema, props):
    with pytest.raises(PropertyError) as err:
        validate(props, {"type": "object", **schema})
    message = str(err.value)
    assert SECRET not in message and "Hunter2" not in message and "12345678901" not in message, message
    assert "(" in message and message.startswith("invalid ResourceProperties: ")
    assert next(iter(props)) in message  # the property is named


def test_at_most_five_errors_are_listed():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    with pytest.raises(PropertyError) as err:
        validate({f"P{i}": "x" for i in range(8)}, schema)
    assert "(and 3 more)" in str(err.value)


def test_a_valid_value_passes_and_validation_changes_nothing():
    props = coerce({"Size": "3", "Ports": ["80"]}, SCHEMA)
    before = json.dumps(props, sort_keys=True)
    validate(props, SCHEMA)
    assert json.dumps(props, sort_keys=True) == before


def test_a_reason_for_a_nested_secret_names_only_its_path_and_rule():
    schema = {
        "type": "object",
        "properties": {"Db": {"type": "object", "properties": {"Password": {"type": "string", "minLength": 64}}}},
    }
    with pytest.raises(PropertyError) as err:
        validate({"Db": {"Password": SECRET}}, schema)
    assert str(err.value) == "invalid ResourceProperties: Db.Password: must be at least 64 characters long (minLength)"


def test_an_unknown_property_name_is_shortened_in_the_reason():
    with pytest.raises(PropertyError) as err:
        validate({"X" * 200: 1}, {"type": "object", "additionalProperties": False})
    assert "X" * 61 + "...: is not a property this resource takes (additionalProperties)" in str(err.value)
    assert "X" * 62 not in str(err.value)


# ---------------------------------------------------------------------------------- the schema itself


def test_an_invalid_schema_is_a_type_error_naming_its_owner():
    with pytest.raises(TypeError, match=r"^Thing.schema is not a valid JSON Schema: "):
        check_schema({"type": "object", "properties": {"N": {"minimum": "one"}}}, "Thing")
    check_schema(SCHEMA, "Thing")  # a valid one passes


def test_thaw_gives_plain_mutable_copies():
    frozen = parse(
        json.dumps(
            {
                "RequestType": "Create",
                "ResponseURL": "https://b.s3.amazonaws.com/k",
                "StackId": "arn:aws:cloudformation:eu-west-2:1:stack/s/g",
                "RequestId": "r",
                "LogicalResourceId": "L",
                "ResourceType": "Custom::T",
                "ResourceProperties": {"A": [{"B": "1"}]},
            }
        )
    ).wire["ResourceProperties"]
    plain = thaw(frozen)
    assert plain == {"A": [{"B": "1"}]} and type(plain) is dict and type(plain["A"]) is list
    plain["A"][0]["B"] = "2"
    assert frozen["A"][0]["B"] == "1"

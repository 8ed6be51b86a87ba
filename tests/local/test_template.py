"""cfn_provider.local.template: loading (YAML short forms, JSON), parameters, conditions, mappings, intrinsic
functions, dependency order and the errors CloudFormation would give."""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.template import (
    NO_VALUE,
    AttributeMissing,
    StackInfo,
    Template,
    TemplateError,
    is_custom,
    load,
    loads,
    parse_parameters,
    stringify,
)

STACK = StackInfo("demo", "arn:aws:cloudformation:eu-west-1:111122223333:stack/demo/0000", "eu-west-1", "111122223333")


@dataclass
class Made:
    physical_id: str
    data: dict[str, Any] = field(default_factory=dict)


def template(text: str, parameters: dict[str, str] | None = None, warnings: list[str] | None = None) -> Template:
    return Template(loads(text), parameters, STACK, on_warning=(warnings.append if warnings is not None else None))


def resolve(t: Template, value: Any, made: dict[str, Made] | None = None) -> Any:
    return t.resolve(value, (made or {}).get)


# ---------------------------------------------------------------------------------- loading
@pytest.mark.parametrize("short, long", [
    ("!Ref Thing", {"Ref": "Thing"}),
    ("!GetAtt Thing.Arn", {"Fn::GetAtt": ["Thing", "Arn"]}),
    ("!GetAtt Thing.Nested.Attr", {"Fn::GetAtt": ["Thing", "Nested.Attr"]}),
    ("!GetAtt [Thing, Arn]", {"Fn::GetAtt": ["Thing", "Arn"]}),
    ("!Sub 'a-${AWS::Region}'", {"Fn::Sub": "a-${AWS::Region}"}),
    ("!Sub ['${A}-b', {A: !Ref X}]", {"Fn::Sub": ["${A}-b", {"A": {"Ref": "X"}}]}),
    ("!Join [',', [a, !Ref B]]", {"Fn::Join": [",", ["a", {"Ref": "B"}]]}),
    ("!Select [1, !GetAZs '']", {"Fn::Select": [1, {"Fn::GetAZs": ""}]}),
    ("!If [IsProd, big, small]", {"Fn::If": ["IsProd", "big", "small"]}),
    ("!Equals [!Ref Env, prod]", {"Fn::Equals": [{"Ref": "Env"}, "prod"]}),
    ("!Not [!Condition IsProd]", {"Fn::Not": [{"Condition": "IsProd"}]}),
    ("!And [!Condition A, !Condition B]", {"Fn::And": [{"Condition": "A"}, {"Condition": "B"}]}),
    ("!Or [!Condition A, !Equals [x, y]]", {"Fn::Or": [{"Condition": "A"}, {"Fn::Equals": ["x", "y"]}]}),
    ("!FindInMap [Map, !Ref AWS::Region, Ami]", {"Fn::FindInMap": ["Map", {"Ref": "AWS::Region"}, "Ami"]}),
    ("!Base64 hello", {"Fn::Base64": "hello"}),
    ("!Split [',', 'a,b']", {"Fn::Split": [",", "a,b"]}),
    ("!GetAZs eu-west-1", {"Fn::GetAZs": "eu-west-1"}),
    ("!ImportValue shared-topic", {"Fn::ImportValue": "shared-topic"}),
    ("!Condition IsProd", {"Condition": "IsProd"}),
    ("!Cidr ['10.0.0.0/16', 2, 8]", {"Fn::Cidr": ["10.0.0.0/16", 2, 8]}),
])
def test_short_forms_load_as_their_long_form(short: str, long: Any) -> None:
    assert loads(f"Resources: {{}}\nValue: {short}\n")["Value"] == long


def test_loading_keeps_dates_and_nested_short_forms_and_reads_json(tmp_path: Path) -> None:
    doc = loads("""
AWSTemplateFormatVersion: 2010-09-09
Resources:
  A:
    Type: Custom::Echo
    Properties:
      V: !Join
        - ''
        - - !Sub '${AWS::StackName}-'
          - !Select [0, !Split [',', !Ref List]]
""")
    assert doc["AWSTemplateFormatVersion"] == "2010-09-09"  # not a datetime.date
    assert doc["Resources"]["A"]["Properties"]["V"] == {"Fn::Join": ["", [
        {"Fn::Sub": "${AWS::StackName}-"}, {"Fn::Select": [0, {"Fn::Split": [",", {"Ref": "List"}]}]}]]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"Resources": {"A": {"Type": "Custom::X", "Properties": {"R": {"Ref": "B"}}}}}))
    assert load(path)["Resources"]["A"]["Properties"]["R"] == {"Ref": "B"}


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "a template is a mapping"),
    ("Resources: {A: {Type: Custom::X}\n", "not valid YAML"),
    ("Value: !GetAtt NoDot\n", "expected LogicalId.Attribute"),
])
def test_unloadable_templates_say_why(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        loads(text)


# ------------------------------------------------------------------------------- resolving
SUBS = """
Parameters:
  Env: {Type: String, Default: dev}
Resources:
  Thing: {Type: Custom::Echo, Properties: {ServiceToken: x}}
"""


def test_sub_resolves_resources_attributes_pseudo_parameters_and_literals() -> None:
    t = template(SUBS)
    made = {"Thing": Made("thing-1", {"Url": "https://t/1", "Port": 8080})}
    assert resolve(t, {"Fn::Sub": "${Thing.Url}/${Thing}?r=${AWS::Region}&a=${AWS::AccountId}&e=${Env}&l=${!Literal}"},
                   made) == "https://t/1/thing-1?r=eu-west-1&a=111122223333&e=dev&l=${Literal}"
    assert resolve(t, {"Fn::Sub": ["${Host}:${Thing.Port} (${AWS::StackName})", {"Host": {"Ref": "Thing"}}]},
                   made) == "thing-1:8080 (demo)"


def test_pseudo_parameters() -> None:
    t = template(SUBS)
    refs = {name: resolve(t, {"Ref": name}) for name in (
        "AWS::AccountId", "AWS::Region", "AWS::StackName", "AWS::StackId", "AWS::Partition", "AWS::URLSuffix",
        "AWS::NotificationARNs")}
    assert refs == {"AWS::AccountId": "111122223333", "AWS::Region": "eu-west-1", "AWS::StackName": "demo",
                    "AWS::StackId": STACK.stack_id, "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
                    "AWS::NotificationARNs": []}
    assert resolve(t, {"Ref": "AWS::NoValue"}) is NO_VALUE
    china = StackInfo.new("s", "cn-north-1", "111122223333")
    assert (china.partition, china.url_suffix) == ("aws-cn", "amazonaws.com.cn")
    assert china.stack_id.startswith("arn:aws-cn:cloudformation:cn-north-1:111122223333:stack/s/")


def test_functions() -> None:
    t = template("""
Parameters:
  Zones: {Type: CommaDelimitedList, Default: "a, b,c"}
  Size: {Type: Number, Default: 3}
Mappings:
  Sizes: {eu-west-1: {Small: t3.micro}}
Resources:
  Thing: {Type: Custom::Echo, Properties: {ServiceToken: x}}
""")
    made = {"Thing": Made("t-1", {"Parts": ["x", "y"], "Csv": "p,q,r"})}
    cases = {
        "!Join ['-', [!Ref Thing, !Ref Size, !Select [1, !Ref Zones]]]": "t-1-3-b",
        "!Join [',', !GetAtt Thing.Parts]": "x,y",
        "!Select [2, !Split [',', !GetAtt Thing.Csv]]": "r",
        "!Select ['0', !GetAZs '']": "eu-west-1a",
        "!FindInMap [Sizes, !Ref AWS::Region, Small]": "t3.micro",
        "!Base64 hi": base64.b64encode(b"hi").decode(),
        "!Cidr ['10.0.0.0/16', 2, 8]": ["10.0.0.0/24", "10.0.1.0/24"],
        "!Ref Zones": ["a", "b", "c"],
        "!ImportValue other-stack-export": "placeholder-import-other-stack-export",
    }
    for short, expected in cases.items():
        assert resolve(t, loads(f"V: {short}")["V"], made) == expected, short


@pytest.mark.parametrize("value, message", [
    ("!Select [5, [a, b]]", "out of bounds"),
    ("!FindInMap [Nope, a, b]", "Mapping named 'Nope' is not present"),
    ("!Join [',', notalist]", "needs a list"),
    ("!Sub '${Nope}'", r"Unresolved resource dependencies \[Nope\]"),
])
def test_function_errors(value: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        resolve(template(SUBS), loads(f"V: {value}")["V"])


def test_getatt_of_an_attribute_not_returned_is_an_attribute_error() -> None:
    t = template(SUBS)
    with pytest.raises(AttributeMissing) as caught:
        resolve(t, {"Fn::GetAtt": ["Thing", "Nope"]}, {"Thing": Made("t", {"Url": "u"})})
    assert (caught.value.logical_id, caught.value.attribute) == ("Thing", "Nope")


# ---------------------------------------------------------------------------------- conditions
CONDITIONS = """
Parameters:
  Env: {Type: String, Default: dev, AllowedValues: [dev, prod]}
  Extra: {Type: String, Default: ""}
Conditions:
  IsProd: !Equals [!Ref Env, prod]
  IsDev: !Not [!Condition IsProd]
  HasExtra: !Not [!Equals [!Ref Extra, ""]]
  DevWithExtra: !And [!Condition IsDev, !Condition HasExtra]
  Either: !Or [!Condition IsProd, !Condition HasExtra]
Resources:
  Always:
    Type: Custom::Echo
    Properties:
      ServiceToken: x
      Size: !If [IsProd, big, small]
      Extra: !If [HasExtra, !Ref Extra, !Ref AWS::NoValue]
      List: [one, !If [HasExtra, !Ref Extra, !Ref AWS::NoValue], three]
  ProdOnly:
    Type: Custom::Echo
    Condition: IsProd
    Properties: {ServiceToken: x, Peer: !Ref Always}
Outputs:
  Prod: {Condition: IsProd, Value: !Ref ProdOnly}
  Size: {Value: !GetAtt Always.Size}
"""


def test_conditions_choose_resources_outputs_and_values() -> None:
    dev = template(CONDITIONS)
    assert dev.conditions == {"IsProd": False, "IsDev": True, "HasExtra": False, "DevWithExtra": False,
                              "Either": False}
    assert dev.custom == ["Always"] and list(dev.outputs_defs) == ["Size"]
    # AWS::NoValue removes the property and the list item
    assert dev.properties("Always", {}.get) == {"Size": "small", "List": ["one", "three"]}

    prod = template(CONDITIONS, {"Env": "prod", "Extra": "more"})
    assert prod.conditions == {"IsProd": True, "IsDev": False, "HasExtra": True, "DevWithExtra": False,
                               "Either": True}
    assert prod.custom == ["Always", "ProdOnly"]
    assert prod.properties("Always", {}.get) == {"Size": "big", "Extra": "more", "List": ["one", "more", "three"]}
    made = {"Always": Made("a-1", {"Size": "big"}), "ProdOnly": Made("p-1")}
    assert prod.outputs(made.get) == {"Prod": {"Value": "p-1"}, "Size": {"Value": "big"}}


def test_a_reference_to_a_resource_whose_condition_is_false_is_unresolved() -> None:
    text = CONDITIONS.replace("Size: {Value: !GetAtt Always.Size}", "Size: {Value: !Ref ProdOnly}")
    with pytest.raises(TemplateError, match=r"Unresolved resource dependencies \[ProdOnly\]"):
        template(text)


# ---------------------------------------------------------------------------------- parameters
def test_parameters_defaults_overrides_and_constraints() -> None:
    text = """
Parameters:
  Env: {Type: String, Default: dev, AllowedValues: [dev, prod]}
  Name: {Type: String, AllowedPattern: "[a-z]+", ConstraintDescription: lower-case letters}
  Count: {Type: Number, Default: 2, MaxValue: 5}
Resources:
  A: {Type: Custom::Echo, Properties: {ServiceToken: x, E: !Ref Env, N: !Ref Name, C: !Ref Count}}
"""
    t = template(text, {"Name": "abc"})
    assert t.parameters == {"Env": "dev", "Name": "abc", "Count": "2"}
    with pytest.raises(TemplateError, match=r"Parameters: \[Name\] must have values"):
        template(text)
    with pytest.raises(TemplateError, match=r"Parameters: \[Nope\] do not exist in the template"):
        template(text, {"Name": "abc", "Nope": "1"})
    with pytest.raises(TemplateError, match="must be one of AllowedValues"):
        template(text, {"Name": "abc", "Env": "test"})
    with pytest.raises(TemplateError, match="failed to satisfy constraint: lower-case letters"):
        template(text, {"Name": "ABC"})
    with pytest.raises(TemplateError, match="not greater than 5"):
        template(text, {"Name": "abc", "Count": "9"})


def test_a_parameter_only_feeding_service_tokens_needs_no_value() -> None:
    t = template("""
Parameters:
  Topic: {Type: String}
Resources:
  A: {Type: Custom::Echo, Properties: {ServiceToken: !Ref Topic, V: 1}}
""")
    assert any("Topic" in note and "ServiceToken" in note for note in t.notes)
    assert t.properties("A", {}.get) == {"V": "1"}  # ServiceToken is never resolved: simulate replaces it


def test_parse_parameters() -> None:
    assert parse_parameters(["A=1", "B=x=y", "ParameterKey=C,ParameterValue=a,b", "D="]) == {
        "A": "1", "B": "x=y", "C": "a,b", "D": ""}
    with pytest.raises(ValueError):
        parse_parameters(["novalue"])


# ---------------------------------------------------------------------------------- ordering
def test_dependency_order_follows_ref_getatt_sub_and_depends_on() -> None:
    t = template("""
Resources:
  D: {Type: Custom::Echo, DependsOn: [C], Properties: {ServiceToken: x}}
  C: {Type: Custom::Echo, Properties: {ServiceToken: x, S: !Sub "${B.Attr}"}}
  B: {Type: Custom::Echo, Properties: {ServiceToken: x, G: !GetAtt A.Attr}}
  A: {Type: Custom::Echo, Properties: {ServiceToken: !Ref D, R: 1}}
  E: {Type: AWS::CloudFormation::CustomResource, Properties: {ServiceToken: x, R: !Ref A}}
""")
    # ServiceToken is replaced by simulate, so it makes no dependency (A's on D would be a cycle)
    assert t.order == ["A", "B", "C", "D", "E"]
    assert t.dependencies == {"D": {"C"}, "C": {"B"}, "B": {"A"}, "A": set(), "E": {"A"}}
    assert t.dependents("A") == ["B", "E"]
    assert t.attributes_used("A") == ["Attr"] and t.attributes_used("B") == ["Attr"]


def test_independent_resources_keep_template_order() -> None:
    t = template("""
Resources:
  Z: {Type: Custom::Echo, Properties: {ServiceToken: x}}
  M: {Type: Custom::Echo, Properties: {ServiceToken: x, P: !Ref A}}
  A: {Type: Custom::Echo, Properties: {ServiceToken: x}}
""")
    assert t.order == ["Z", "A", "M"]


def test_a_cycle_is_an_error_naming_the_resources_in_it() -> None:
    with pytest.raises(TemplateError, match=r"Circular dependency between resources: \[A, B, C\]"):
        template("""
Resources:
  A: {Type: Custom::Echo, Properties: {ServiceToken: x, P: !Ref C}}
  B: {Type: Custom::Echo, Properties: {ServiceToken: x, P: !GetAtt A.X}}
  C: {Type: Custom::Echo, DependsOn: B, Properties: {ServiceToken: x}}
  Innocent: {Type: Custom::Echo, Properties: {ServiceToken: x, P: !Ref A}}
""")


@pytest.mark.parametrize("text, message", [
    ("Resources: {}", "At least one Resources member"),
    ("Resources: {A: {Properties: {}}}", "A has no Type"),
    ("Resources: {A: {Type: Custom::X, DependsOn: Nope}}", r"Unresolved resource dependencies \[Nope\]"),
    ("Resources: {A: {Type: Custom::X, Properties: {P: !Ref Nope}}}", r"Unresolved resource dependencies \[Nope\]"),
    ("Resources: {A: {Type: Custom::X, Properties: {P: null}}}", "'null' values are not allowed"),
    ("Transform: AWS::Serverless-2016-10-31\nResources: {A: {Type: Custom::X}}", "Transform"),
    ("Resources: {A: {Type: Custom::X, Condition: Nope}}", "Unresolved condition dependency Nope"),
])
def test_template_errors(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        template(text)


# ----------------------------------------------------------------------- non-custom resources
def test_other_resources_resolve_to_placeholders_with_a_warning() -> None:
    warnings: list[str] = []
    t = template("""
Resources:
  Bucket: {Type: AWS::S3::Bucket}
  Thing: {Type: Custom::Echo, Properties: {ServiceToken: x, B: !Ref Bucket, Arn: !GetAtt Bucket.Arn,
                                            S: !Sub "s3://${Bucket}/${Bucket.DomainName}"}}
""", warnings=warnings)
    assert t.custom == ["Thing"] and t.order == ["Bucket", "Thing"]
    assert any("Bucket (AWS::S3::Bucket) is not a custom resource" in note for note in t.notes)
    assert t.properties("Thing", {}.get) == {"B": "placeholder-Bucket", "Arn": "placeholder-Bucket.Arn",
                                             "S": "s3://placeholder-Bucket/placeholder-Bucket.DomainName"}
    assert len(warnings) == 4 and all("is not created by simulate" in w for w in warnings)
    t.properties("Thing", {}.get)
    assert len(warnings) == 4  # said once


def test_custom_types_and_stringify() -> None:
    assert is_custom("Custom::Anything") and is_custom("AWS::CloudFormation::CustomResource")
    assert not is_custom("AWS::S3::Bucket")
    assert stringify({"a": 1, "b": [True, 2.5, "x"], "c": {"d": False}}) == {
        "a": "1", "b": ["true", "2.5", "x"], "c": {"d": "false"}}


def test_the_example_consumer_template() -> None:
    path = Path(__file__).resolve().parents[2] / "deploy" / "example-consumer.yaml"
    t = Template(load(path), {}, STACK)
    assert t.custom == ["Thing", "Quick"]
    assert t.properties("Quick", {"Thing": Made("t-1", {"Colour": "blue"})}.get) == {
        "ServiceTimeout": "120", "Name": "demo-quick", "Greeting": "hello", "Depends": "blue"}

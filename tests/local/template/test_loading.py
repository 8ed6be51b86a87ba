"""cfn_provider.local.template loading: YAML short forms, dates kept as strings, JSON, and why a
template does not load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.template import TemplateError, load, loads


@pytest.mark.parametrize(
    "short, long",
    [
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
    ],
)
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
    assert doc["Resources"]["A"]["Properties"]["V"] == {
        "Fn::Join": [
            "",
            [{"Fn::Sub": "${AWS::StackName}-"}, {"Fn::Select": [0, {"Fn::Split": [",", {"Ref": "List"}]}]}],
        ]
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"Resources": {"A": {"Type": "Custom::X", "Properties": {"R": {"Ref": "B"}}}}}))
    assert load(path)["Resources"]["A"]["Properties"]["R"] == {"Ref": "B"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "a template is a mapping"),
        ("Resources: {A: {Type: Custom::X}\n", "not valid YAML"),
        ("Value: !GetAtt NoDot\n", "expected LogicalId.Attribute"),
    ],
)
def test_unloadable_templates_say_why(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        loads(text)

"""cfn_provider.local.template intrinsic functions: Ref, GetAtt, Sub, Join, Select, pseudo
parameters, ..., and the errors CloudFormation would give."""

from __future__ import annotations

import base64

import pytest

from cfn_provider.local.template import NO_VALUE, AttributeMissing, StackInfo, TemplateError, loads
from tests.local.template.helpers import STACK, Made, resolve, template

SUBS = """
Parameters:
  Env: {Type: String, Default: dev}
Resources:
  Thing: {Type: Custom::Echo, Properties: {ServiceToken: x}}
"""


def test_sub_resolves_resources_attributes_pseudo_parameters_and_literals() -> None:
    t = template(SUBS)
    made = {"Thing": Made("thing-1", {"Url": "https://t/1", "Port": 8080})}
    assert (
        resolve(
            t, {"Fn::Sub": "${Thing.Url}/${Thing}?r=${AWS::Region}&a=${AWS::AccountId}&e=${Env}&l=${!Literal}"}, made
        )
        == "https://t/1/thing-1?r=eu-west-1&a=111122223333&e=dev&l=${Literal}"
    )
    assert (
        resolve(t, {"Fn::Sub": ["${Host}:${Thing.Port} (${AWS::StackName})", {"Host": {"Ref": "Thing"}}]}, made)
        == "thing-1:8080 (demo)"
    )


def test_pseudo_parameters() -> None:
    t = template(SUBS)
    refs = {
        name: resolve(t, {"Ref": name})
        for name in (
            "AWS::AccountId",
            "AWS::Region",
            "AWS::StackName",
            "AWS::StackId",
            "AWS::Partition",
            "AWS::URLSuffix",
            "AWS::NotificationARNs",
        )
    }
    assert refs == {
        "AWS::AccountId": "111122223333",
        "AWS::Region": "eu-west-1",
        "AWS::StackName": "demo",
        "AWS::StackId": STACK.stack_id,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::NotificationARNs": [],
    }
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


@pytest.mark.parametrize(
    "value, message",
    [
        ("!Select [5, [a, b]]", "out of bounds"),
        ("!FindInMap [Nope, a, b]", "Mapping named 'Nope' is not present"),
        ("!Join [',', notalist]", "needs a list"),
        ("!Sub '${Nope}'", r"Unresolved resource dependencies \[Nope\]"),
    ],
)
def test_function_errors(value: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        resolve(template(SUBS), loads(f"V: {value}")["V"])


def test_getatt_of_an_attribute_not_returned_is_an_attribute_error() -> None:
    t = template(SUBS)
    with pytest.raises(AttributeMissing) as caught:
        resolve(t, {"Fn::GetAtt": ["Thing", "Nope"]}, {"Thing": Made("t", {"Url": "u"})})
    assert (caught.value.logical_id, caught.value.attribute) == ("Thing", "Nope")

"""cfn_provider.local.template inputs: Parameters (defaults, overrides, constraints, --parameter
values) and Conditions choosing resources, outputs and values."""

from __future__ import annotations

import pytest

from cfn_provider.local.template import TemplateError, parse_parameters
from tests.local.template.helpers import Made, template

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
    assert dev.conditions == {"IsProd": False, "IsDev": True, "HasExtra": False, "DevWithExtra": False, "Either": False}
    assert dev.custom == ["Always"] and list(dev.outputs_defs) == ["Size"]
    # AWS::NoValue removes the property and the list item
    assert dev.properties("Always", {}.get) == {"Size": "small", "List": ["one", "three"]}

    prod = template(CONDITIONS, {"Env": "prod", "Extra": "more"})
    assert prod.conditions == {"IsProd": True, "IsDev": False, "HasExtra": True, "DevWithExtra": False, "Either": True}
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
        "A": "1",
        "B": "x=y",
        "C": "a,b",
        "D": "",
    }
    with pytest.raises(ValueError):
        parse_parameters(["novalue"])

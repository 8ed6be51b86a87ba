"""cfn_provider.local.template dependencies: the order Ref / GetAtt / Sub / DependsOn give, cycles
and the template format errors."""

from __future__ import annotations

import pytest

from cfn_provider.local.template import TemplateError
from tests.local.template.helpers import template


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


@pytest.mark.parametrize(
    "text, message",
    [
        ("Resources: {}", "At least one Resources member"),
        ("Resources: {A: {Properties: {}}}", "A has no Type"),
        ("Resources: {A: {Type: Custom::X, DependsOn: Nope}}", r"Unresolved resource dependencies \[Nope\]"),
        ("Resources: {A: {Type: Custom::X, Properties: {P: !Ref Nope}}}", r"Unresolved resource dependencies \[Nope\]"),
        ("Resources: {A: {Type: Custom::X, Properties: {P: null}}}", "'null' values are not allowed"),
        ("Transform: AWS::Serverless-2016-10-31\nResources: {A: {Type: Custom::X}}", "Transform"),
        ("Resources: {A: {Type: Custom::X, Condition: Nope}}", "Unresolved condition dependency Nope"),
    ],
)
def test_template_errors(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        template(text)

"""cfn_provider.local.template documents: non-custom resources as placeholders, custom types,
stringified scalars, and the example consumer template."""

from __future__ import annotations

from pathlib import Path

from cfn_provider.local.template import Template, is_custom, load, stringify
from tests.local.template.helpers import STACK, Made, template


def test_other_resources_resolve_to_placeholders_with_a_warning() -> None:
    warnings: list[str] = []
    t = template(
        """
Resources:
  Bucket: {Type: AWS::S3::Bucket}
  Thing: {Type: Custom::Echo, Properties: {ServiceToken: x, B: !Ref Bucket, Arn: !GetAtt Bucket.Arn,
                                            S: !Sub "s3://${Bucket}/${Bucket.DomainName}"}}
""",
        warnings=warnings,
    )
    assert t.custom == ["Thing"] and t.order == ["Bucket", "Thing"]
    assert any("Bucket (AWS::S3::Bucket) is not a custom resource" in note for note in t.notes)
    assert t.properties("Thing", {}.get) == {
        "B": "placeholder-Bucket",
        "Arn": "placeholder-Bucket.Arn",
        "S": "s3://placeholder-Bucket/placeholder-Bucket.DomainName",
    }
    assert len(warnings) == 4 and all("is not created by simulate" in w for w in warnings)
    t.properties("Thing", {}.get)
    assert len(warnings) == 4  # said once


def test_custom_types_and_stringify() -> None:
    assert is_custom("Custom::Anything") and is_custom("AWS::CloudFormation::CustomResource")
    assert not is_custom("AWS::S3::Bucket")
    assert stringify({"a": 1, "b": [True, 2.5, "x"], "c": {"d": False}}) == {
        "a": "1",
        "b": ["true", "2.5", "x"],
        "c": {"d": "false"},
    }


def test_the_example_consumer_template() -> None:
    path = Path(__file__).resolve().parents[3] / "deploy" / "example-consumer.yaml"
    t = Template(load(path), {}, STACK)
    assert t.custom == ["Thing", "Quick"]
    assert t.properties("Quick", {"Thing": Made("t-1", {"Colour": "blue"})}.get) == {
        "ServiceTimeout": "120",
        "Name": "demo-quick",
        "Greeting": "hello",
        "Depends": "blue",
    }

"""cfn_provider.local.template.lambdas: which function a custom resource's ServiceToken names, and what
of its resource is read (Handler, Code, Environment.Variables, Timeout, MemorySize) or noted."""

from __future__ import annotations

import tomllib
from pathlib import Path

from cfn_provider.config import load_config_file
from cfn_provider.functions.settings import parse_options
from cfn_provider.local.template import Template, lambdas, loads


def fn(props: dict, kind: str = "AWS::Lambda::Function") -> dict:
    return {"Type": kind, "Properties": {"Handler": "index.handler", "Runtime": "python3.12", **props}}


def custom(token, kind: str = "Custom::A") -> dict:
    return {"Type": kind, "Properties": {"ServiceToken": token}}


def test_every_form_of_getatt_arn_names_the_function_and_nothing_else_does(tmp_path: Path):
    (tmp_path / "code").mkdir()
    doc = {
        "Resources": {
            "Fn": fn({"Code": "./code"}),
            "A": custom({"Fn::GetAtt": ["Fn", "Arn"]}, "Custom::A"),
            "B": custom({"Fn::GetAtt": "Fn.Arn"}, "Custom::B"),
            "C": custom({"Fn::GetAtt": ["Fn", "SnapStartResponse"]}, "Custom::C"),
            "D": custom("arn:aws:lambda:us-east-1:123456789012:function:fn", "Custom::D"),
            "E": custom({"Ref": "Fn"}, "Custom::E"),
        }
    }
    [found] = lambdas.read(doc, tmp_path)
    assert (found.logical_id, found.types, found.callers) == ("Fn", ["Custom::A", "Custom::B"], ["A", "B"])
    assert found.code == str(tmp_path / "code") and found.handler == "index.handler"


def test_sam_code_uri_and_inline_code_are_read(tmp_path: Path):
    (tmp_path / "src").mkdir()
    doc = {
        "Resources": {
            "Sam": fn({"CodeUri": "src", "Timeout": 60, "MemorySize": 1024}, "AWS::Serverless::Function"),
            "Inline": fn({"InlineCode": "def handler(e, c): pass\n"}, "AWS::Serverless::Function"),
            "A": custom({"Fn::GetAtt": ["Sam", "Arn"]}, "Custom::A"),
            "B": custom({"Fn::GetAtt": ["Inline", "Arn"]}, "Custom::B"),
        }
    }
    sam, inline = lambdas.read(doc, tmp_path)
    assert (sam.code, sam.timeout, sam.memory_mb) == (str(tmp_path / "src"), 60, 1024)
    assert inline.inline == "def handler(e, c): pass\n" and inline.code is None and inline.usable


def test_what_cannot_be_used_is_noted_never_guessed(tmp_path: Path):
    doc = {
        "Resources": {
            "S3": fn({"Code": {"S3Bucket": "b", "S3Key": "k"}, "Timeout": 901, "MemorySize": "lots"}),
            "Missing": fn({"Code": "./nowhere", "Environment": {"Variables": {"A": {"Ref": "Table"}, "B": 3}}}),
            "A": custom({"Fn::GetAtt": ["S3", "Arn"]}, "Custom::A"),
            "B": custom({"Fn::GetAtt": ["Missing", "Arn"]}, "Custom::B"),
        }
    }
    s3, missing = lambdas.read(doc, tmp_path)  # no resolver: plain values only
    assert not s3.usable and s3.timeout is None and s3.memory_mb is None
    assert any("not local (S3, an image)" in n for n in s3.notes)
    assert any("Timeout 901 is outside 1..900" in n for n in s3.notes)
    assert any("'lots' is not a whole number" in n for n in s3.notes)
    assert not missing.usable and missing.environment == {"B": "3"}
    assert any("Variables.A is left out" in n for n in missing.notes)
    assert lambdas.handler_options([s3, missing]) == [] and lambdas.function_options([s3, missing]) == []


def test_a_type_two_functions_serve_is_served_by_neither(tmp_path: Path):
    (tmp_path / "c").mkdir()
    doc = {
        "Resources": {
            "F1": fn({"Code": "c"}),
            "F2": fn({"Code": "c"}),
            "A": custom({"Fn::GetAtt": ["F1", "Arn"]}, "AWS::CloudFormation::CustomResource"),
            "B": custom({"Fn::GetAtt": ["F2", "Arn"]}, "AWS::CloudFormation::CustomResource"),
        }
    }
    f1, f2 = lambdas.read(doc, tmp_path)
    assert f1.types == f2.types == [] and "calls several functions (F1, F2)" in f1.notes[0]
    assert lambdas.handler_options([f1, f2]) == []


def test_values_resolve_as_the_template_resolves_them_and_the_toml_says_what_the_options_say(tmp_path: Path):
    (tmp_path / "code").mkdir()
    doc = loads(
        """
Parameters:
  Stage: {Type: String, Default: prod}
Resources:
  Fn:
    Type: AWS::Lambda::Function
    Properties:
      Handler: !Sub "${Stage}/app.handler"
      Runtime: python3.12
      Code: ./code
      Timeout: !Ref AWS::NoValue
      Environment:
        Variables: {TABLE: !Sub "t-${Stage}-${AWS::Region}", DEBUG: true, "my-var": x}
  Thing:
    Type: Custom::Thing
    Properties: {ServiceToken: !GetAtt Fn.Arn}
""",
        "t.yaml",
    )
    template = Template(doc)
    [found] = lambdas.read(doc, tmp_path, lambda value, where: template.resolve(value, lambda _: None, where))
    assert found.handler == "prod/app.handler" and found.timeout is None
    assert found.environment == {"TABLE": "t-prod-us-east-1", "DEBUG": "true"}
    assert any("Variables: left out ('my-var' is not an environment variable name)" in n for n in found.notes)
    text = lambdas.toml([found])
    assert tomllib.loads(text)["functions"]["Custom::Thing"]["environment"]["DEBUG"] == "true"
    (tmp_path / "c.toml").write_text(text)
    from_file = load_config_file(tmp_path / "c.toml")
    assert list(from_file["handler"]) == ["Custom::Thing=lambda:prod/app.handler"]
    assert parse_options(from_file["function"]) == parse_options(lambdas.function_options([found]))


def test_hostile_names_are_left_out_never_used_as_paths_or_options(tmp_path: Path):
    """A logical id names the inline code's folder and a type goes into TYPE=... options: only what
    CloudFormation allows is used; a Handler Lambda refuses is refused here too."""
    doc = {
        "Resources": {
            "../../escape": fn({"Code": {"ZipFile": "x = 1"}}),
            "Fine": fn({"Code": {"ZipFile": "x = 1"}}),
            "BadHandler": fn({"Code": {"ZipFile": "x = 1"}, "Handler": "sys.handler"}),
            "A": custom({"Fn::GetAtt": ["../../escape", "Arn"]}, "Custom::A"),
            "B": custom({"Fn::GetAtt": ["Fine", "Arn"]}, "Custom::B=lambda:os.system"),
            "C": custom({"Fn::GetAtt": ["BadHandler", "Arn"]}, "Custom::C"),
        }
    }
    escape, fine, bad = lambdas.read(doc, tmp_path)
    assert not escape.usable and "is not a logical id" in escape.notes[0]
    assert fine.types == [] and "is not a custom resource type" in fine.notes[0]
    assert not bad.usable and "built-in module" in bad.notes[0]
    assert lambdas.handler_options([escape, fine, bad]) == []

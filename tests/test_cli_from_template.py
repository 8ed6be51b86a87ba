"""`cfn-provider handlers --from-template TEMPLATE`: the options and config tables printed for a template's
own Lambda functions serve them: fed back to `cfn-provider handlers` (which imports each function as
`run` does at start) the function loads, though it reads its environment variable at import time."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import cfn_provider.cli as cli

APP = 'import os\n\nTABLE = os.environ["TABLE_NAME"]\n\n\ndef handler(event, context):\n    return TABLE\n'

TEMPLATE = """\
Parameters:
  Env: {Type: String, Default: dev}
Resources:
  Fn:
    Type: AWS::Lambda::Function
    Properties:
      Handler: update-app.handler
      Runtime: python3.12
      Role: arn:aws:iam::123456789012:role/x
      Timeout: 30
      MemorySize: 512
      Code: ./fn
      Environment:
        Variables:
          TABLE_NAME: !Sub "things-${Env}"
          QUOTED: "it's \\"quoted\\""
  Inline:
    Type: AWS::Lambda::Function
    Properties:
      Handler: index.handler
      Runtime: python3.12
      Role: arn:aws:iam::123456789012:role/x
      Code:
        ZipFile: |
          def handler(event, context):
              return None
  Stored:
    Type: AWS::Lambda::Function
    Properties:
      Handler: index.handler
      Runtime: python3.12
      Role: arn:aws:iam::123456789012:role/x
      Code: {S3Bucket: artifacts, S3Key: fn.zip}
  Node:
    Type: AWS::Lambda::Function
    Properties:
      Handler: index.handler
      Runtime: nodejs20.x
      Role: arn:aws:iam::123456789012:role/x
      Code: {ZipFile: "exports.handler = async () => {}"}
  Thing:
    Type: Custom::Thing
    Properties: {ServiceToken: !GetAtt Fn.Arn}
  Other:
    Type: Custom::Inline
    Properties: {ServiceToken: {"Fn::GetAtt": [Inline, Arn]}}
  FromS3:
    Type: Custom::Stored
    Properties: {ServiceToken: !GetAtt Stored.Arn}
  FromNode:
    Type: Custom::Node
    Properties: {ServiceToken: !GetAtt Node.Arn}
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.main, ["handlers", *args], prog_name="cfn-provider")


@pytest.fixture
def template(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "update-app.py").write_text(APP)
    (tmp_path / "t.yaml").write_text(TEMPLATE)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "t.yaml"


def test_the_printed_options_serve_the_templates_functions(template: Path, tmp_path: Path):
    printed = invoke("--from-template", str(template), "--inline-code", str(tmp_path / "inline"))
    assert printed.exit_code == 0, printed.output
    options = [line for line in printed.stdout.splitlines() if line.startswith("--")]
    fn, inline = tmp_path / "fn", tmp_path / "inline" / "Inline"
    assert [shlex.split(line)[1] for line in options] == [
        "Custom::Thing=lambda:update-app.handler",
        "Custom::Inline=lambda:index.handler",
        f"Custom::Thing=code={fn}",
        "Custom::Thing=env.TABLE_NAME=things-dev",
        'Custom::Thing=env.QUOTED=it\'s "quoted"',
        "Custom::Thing=timeout=30",
        "Custom::Thing=memory_mb=512",
        f"Custom::Inline=code={inline}",
    ]
    assert (inline / "index.py").read_text().startswith("def handler(event, context):")
    assert "Stored: its Code is not local" in printed.stderr and "Runtime nodejs20.x is not Python" in printed.stderr
    args = [word for line in options for word in shlex.split(line)]
    served = invoke(*args, "--json")  # each function imported in its own interpreter, as `run` starts it
    assert served.exit_code == 0, served.output
    rows = {r["resource_type"]: r["handler"] for r in json.loads(served.stdout) if r["served"]}
    assert rows == {"Custom::Thing": "lambda:update-app.handler", "Custom::Inline": "lambda:index.handler"}


def test_the_printed_config_tables_serve_them_too(template: Path, tmp_path: Path):
    printed = invoke("--from-template", str(template), "--inline-code", str(tmp_path / "inline"))
    toml = printed.stdout.split("# or the same in the config file (cfn-provider run --config FILE):\n", 1)[1]
    (tmp_path / "config.toml").write_text(toml)
    served = invoke("--config", str(tmp_path / "config.toml"), "--json")
    assert served.exit_code == 0, served.output
    assert {r["resource_type"] for r in json.loads(served.stdout) if r["served"]} == {"Custom::Thing", "Custom::Inline"}


def test_without_its_environment_the_function_does_not_load(template: Path, tmp_path: Path):
    """What the printed settings fix: the same handler without them stops the start (exit 2)."""
    result = invoke(
        "--handler", "Custom::Thing=lambda:update-app.handler", "--function", f"Custom::Thing=code={tmp_path / 'fn'}"
    )
    assert result.exit_code == 2 and "TABLE_NAME" in result.output


def test_an_inline_function_without_a_folder_is_said(template: Path):
    printed = invoke("--from-template", str(template))
    assert printed.exit_code == 0
    assert "Inline's code is inline (Code.ZipFile): give --inline-code DIR" in printed.stderr
    assert "Custom::Inline" not in printed.stdout  # what is printed loads as it is


def test_an_unreadable_template_is_a_startup_error(tmp_path: Path):
    (tmp_path / "bad.yaml").write_text("Resources: [\n")
    result = invoke("--from-template", str(tmp_path / "bad.yaml"))
    assert result.exit_code == 2 and result.output.startswith("cfn-provider: --from-template:")

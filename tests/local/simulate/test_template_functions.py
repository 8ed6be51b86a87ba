"""simulate serves a template's own Lambda functions as the template defines them (issue 29 item 3), and
takes --function as `run` does: each request goes SNS -> SQS -> the daemon -> the function's own
process -> its captured answer -> a presigned S3 URL on a real moto server.

The function reads its variable at import time (os.environ["TABLE_NAME"] at module level, as real
ones do): without its settings it cannot even load."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from cfn_provider.local.simulate import simulate

APP = """\
import os

import cfnresponse

TABLE = os.environ["TABLE_NAME"]  # at import time


def handler(event, context):
    cfnresponse.send(
        event,
        context,
        cfnresponse.SUCCESS,
        {
            "Table": TABLE,
            "Memory": context.memory_limit_in_mb,
            "Within": str(context.get_remaining_time_in_millis() <= 20000),
            "Size": event["ResourceProperties"]["Size"],
        },
        "thing-1",
    )
"""

TEMPLATE = """\
Parameters:
  Env: {Type: String, Default: dev}
  Size: {Type: String, Default: "1"}
Resources:
  Fn:
    Type: AWS::Lambda::Function
    Properties:
      Handler: app.handler
      Runtime: python3.12
      Role: arn:aws:iam::123456789012:role/thing
      Timeout: 20
      MemorySize: 256
      Code: ./fn
      Environment:
        Variables:
          TABLE_NAME: !Sub "things-${Env}"
  Thing:
    Type: Custom::Thing
    Properties:
      ServiceToken: !GetAtt Fn.Arn
      Size: !Ref Size
Outputs:
  Table: {Value: !GetAtt Thing.Table}
  Memory: {Value: !GetAtt Thing.Memory}
  Within: {Value: !GetAtt Thing.Within}
  Size: {Value: !GetAtt Thing.Size}
"""

INLINE = """\
Resources:
  Greeter:
    Type: AWS::Lambda::Function
    Properties:
      Handler: index.handler
      Runtime: python3.12
      Role: arn:aws:iam::123456789012:role/greeter
      MemorySize: 128
      Environment: {Variables: {GREETING: hello}}
      Code:
        ZipFile: |
          import os
          import cfnresponse
          GREETING = os.environ["GREETING"]
          def handler(event, context):
              name = event["ResourceProperties"]["Name"]
              cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Text": GREETING + " " + name}, "greeting")
  Greeting:
    Type: AWS::CloudFormation::CustomResource
    Properties:
      ServiceToken: {"Fn::GetAtt": [Greeter, Arn]}
      Name: dee
Outputs:
  Text: {Value: !GetAtt Greeting.Text}
"""


def simulate_cli(*args: str, endpoint: str):
    return CliRunner().invoke(simulate, [*args, "--endpoint", endpoint], catch_exceptions=False)


def outputs(tmp_path: Path, stack: str) -> dict[str, str]:
    doc = json.loads((tmp_path / ".cfn-simulate" / f"{stack}.json").read_text())
    return {k: v["Value"] for k, v in doc["Outputs"].items()}


def function_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "fn"
    folder.mkdir()
    (folder / "app.py").write_text(APP)
    return folder


def test_the_templates_own_function_runs_with_its_handler_code_environment_timeout_and_memory(emulator, tmp_path):
    function_folder(tmp_path)
    (tmp_path / "t.yaml").write_text(TEMPLATE)
    created = simulate_cli("create", "t.yaml", endpoint=emulator.endpoint)  # no --handler: the template's
    assert created.exit_code == 0, created.output
    assert "Custom::Thing served by the template's function Fn" in created.output
    assert outputs(tmp_path, "t") == {"Table": "things-dev", "Memory": "256", "Within": "True", "Size": "1"}
    updated = simulate_cli("update", "--parameter", "Size=2", "--parameter", "Env=prod", endpoint=emulator.endpoint)
    assert updated.exit_code == 0, updated.output
    assert outputs(tmp_path, "t") == {"Table": "things-prod", "Memory": "256", "Within": "True", "Size": "2"}
    deleted = simulate_cli("delete", endpoint=emulator.endpoint)
    assert deleted.exit_code == 0, deleted.output


def test_function_options_override_the_template_and_are_remembered(emulator, tmp_path):
    function_folder(tmp_path)
    (tmp_path / "t.yaml").write_text(TEMPLATE)
    given = "Custom::Thing=env.TABLE_NAME=from-the-command-line"
    created = simulate_cli("create", "t.yaml", "--function", given, endpoint=emulator.endpoint)
    assert created.exit_code == 0, created.output
    assert outputs(tmp_path, "t")["Table"] == "from-the-command-line"
    updated = simulate_cli("update", "--parameter", "Size=3", endpoint=emulator.endpoint)  # no --function now
    assert updated.exit_code == 0, updated.output
    assert outputs(tmp_path, "t")["Table"] == "from-the-command-line"
    assert simulate_cli("delete", endpoint=emulator.endpoint).exit_code == 0


def test_simulate_takes_function_settings_as_run_does(emulator, tmp_path):
    """No template function: --handler 'TYPE=lambda:...' with --function env and code, remembered by update."""
    folder = function_folder(tmp_path)
    plain = textwrap.dedent(
        """\
        Resources:
          Thing:
            Type: Custom::Thing
            Properties: {ServiceToken: arn:aws:lambda:eu-west-1:123456789012:function:thing, Size: "1"}
        Outputs:
          Table: {Value: !GetAtt Thing.Table}
        """
    )
    (tmp_path / "plain.yaml").write_text(plain)
    (tmp_path / "plain2.yaml").write_text(plain.replace('Size: "1"', 'Size: "2"'))
    created = simulate_cli(
        "create",
        "plain.yaml",
        "--handler",
        "Custom::Thing=lambda:app.handler",
        "--function",
        f"Custom::Thing=code={folder}",
        "--function",
        "Custom::Thing=env.TABLE_NAME=given",
        endpoint=emulator.endpoint,
    )
    assert created.exit_code == 0, created.output
    assert outputs(tmp_path, "plain") == {"Table": "given"}
    state = json.loads((tmp_path / ".cfn-simulate" / "plain.json").read_text())
    assert state["Simulate"]["Functions"] == [f"Custom::Thing=code={folder}", "Custom::Thing=env.TABLE_NAME=given"]
    updated = simulate_cli(
        "update", "plain2.yaml", "--function", "Custom::Thing=env.TABLE_NAME=again", endpoint=emulator.endpoint
    )
    assert updated.exit_code == 0, updated.output
    assert outputs(tmp_path, "plain") == {"Table": "again"}  # the setting replaced, the code folder remembered
    assert simulate_cli("delete", endpoint=emulator.endpoint).exit_code == 0


def test_a_setting_for_a_type_no_lambda_handler_serves_is_refused_before_anything_runs(emulator, tmp_path):
    (tmp_path / "t.yaml").write_text("Resources:\n  A: {Type: Custom::A, Properties: {ServiceToken: x}}\n")
    result = simulate_cli("create", "t.yaml", "--function", "Custom::A=env.X=1", endpoint=emulator.endpoint)
    assert result.exit_code == 2 and "which no lambda: handler serves" in result.output
    assert not (tmp_path / ".cfn-simulate" / "t.json").exists()
    (tmp_path / "inline.yaml").write_text(INLINE)
    result = simulate_cli("create", "inline.yaml", "--function", "Custom::A=env.X=1", endpoint=emulator.endpoint)
    assert result.exit_code == 2 and not (tmp_path / ".cfn-simulate" / "inline.functions").exists()


def test_an_inline_function_runs_from_its_zipfile_source(emulator, tmp_path):
    (tmp_path / "inline.yaml").write_text(INLINE)
    created = simulate_cli("create", "inline.yaml", endpoint=emulator.endpoint)
    assert created.exit_code == 0, created.output
    assert outputs(tmp_path, "inline") == {"Text": "hello dee"}
    assert (tmp_path / ".cfn-simulate" / "inline.functions" / "Greeter" / "index.py").exists()
    assert simulate_cli("delete", endpoint=emulator.endpoint).exit_code == 0
    assert not (tmp_path / ".cfn-simulate" / "inline.functions").exists()  # gone with its stack

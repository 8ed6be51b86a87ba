"""`cfn-provider event` and `cfn-provider local-invoke` (cfn_provider.cli_local): a request event made as
CloudFormation sends it, run through a handler module or a `lambda:` function with no stack and no
daemon, the answer printed (as SAM's generate-event and local invoke); and the shell completion
click provides, as the docs tell a user to enable it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner

from cfn_provider.cli import main
from cfn_provider.pipeline.request import parse

CLI = Path(sys.executable).with_name("cfn-provider")

THING = """\
def create(event):
    props = event["ResourceProperties"]
    if props.get("Fail"):
        raise ValueError("Colour is not allowed")
    return {"PhysicalResourceId": "thing-" + props["Colour"], "Data": {"Colour": props["Colour"]},
            "NoEcho": props.get("Secret") == "yes"}


def update(event):
    return {"Data": {"Was": event["OldResourceProperties"]["Colour"], "Id": event["PhysicalResourceId"]}}


def delete(event):
    return None
"""


@pytest.fixture(autouse=True)
def _logs_restored() -> Iterator[None]:
    """local-invoke configures the logs (to its stderr) as the real command does: put them back after."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def cli(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def event(*args: str) -> str:
    made = cli("event", *args)
    assert made.exit_code == 0, made.output
    return made.stdout


def test_an_event_is_what_cloudformation_sends():
    create = json.loads(event("create", "Custom::Thing", "--property", "Colour=blue", "--service-timeout", "30"))
    assert create["RequestType"] == "Create" and create["ResourceType"] == "Custom::Thing"
    assert create["ResourceProperties"]["Colour"] == "blue" and create["ResourceProperties"]["ServiceTimeout"] == "30"
    assert "PhysicalResourceId" not in create and "OldResourceProperties" not in create
    update = json.loads(
        event(
            "update",
            "Custom::Thing",
            "--property",
            "Colour=red",
            "--old-property",
            "Colour=blue",
            "--physical-id",
            "t-1",
        )
    )
    assert update["OldResourceProperties"]["Colour"] == "blue" and update["PhysicalResourceId"] == "t-1"
    delete = json.loads(event("delete", "Custom::Thing"))
    assert delete["PhysicalResourceId"] == "cfn-provider-local-Resource"
    for made in (create, update, delete):
        assert parse(json.dumps(made)).problems == ()  # the daemon reads it as a request, nothing missing
    refused = cli("event", "create", "AWS::S3::Bucket")
    assert refused.exit_code == 2 and refused.stderr.startswith("cfn-provider: 'AWS::S3::Bucket' is not a custom")


def test_local_invoke_runs_a_handler_module_and_prints_its_answer(tmp_path: Path):
    (tmp_path / "thing.py").write_text(THING)
    serve = ["--handler", "Custom::Thing=thing", "--handler-path", str(tmp_path)]
    created = cli("local-invoke", "-", *serve, stdin=event("create", "Custom::Thing", "--property", "Colour=blue"))
    assert created.exit_code == 0, created.output
    answer = json.loads(created.stdout)
    assert (answer["Status"], answer["PhysicalResourceId"], answer["Data"]) == (
        "SUCCESS",
        "thing-blue",
        {"Colour": "blue"},
    )

    file = tmp_path / "update.json"
    file.write_text(
        event(
            "update",
            "Custom::Thing",
            "--property",
            "Colour=red",
            "--old-property",
            "Colour=blue",
            "--physical-id",
            "t-1",
        )
    )
    updated = cli("local-invoke", str(file), *serve)
    assert json.loads(updated.stdout)["Data"] == {"Was": "blue", "Id": "t-1"}

    failed = cli("local-invoke", "-", *serve, stdin=event("create", "Custom::Thing", "--property", "Fail=1"))
    assert failed.exit_code == 1 and json.loads(failed.stdout)["Status"] == "FAILED"
    assert "Colour is not allowed" in json.loads(failed.stdout)["Reason"]

    secret = cli(
        "local-invoke",
        "-",
        *serve,
        stdin=event("create", "Custom::Thing", "--property", "Colour=s3cr3t", "--property", "Secret=yes"),
    )
    assert json.loads(secret.stdout)["Data"] == {"Colour": "****"} and "s3cr3t" not in secret.stdout.replace(
        "thing-s3cr3t", ""
    )


def test_local_invoke_refuses_what_is_not_a_request_before_running_anything(tmp_path: Path):
    (tmp_path / "bad.json").write_text(json.dumps({"RequestType": "Create"}))
    done = cli("local-invoke", str(tmp_path / "bad.json"), "--handler", "Custom::Echo")
    assert done.exit_code == 2 and done.stderr.startswith("cfn-provider: "), done.output
    assert "StackId" in done.stderr and "cannot be answered" in done.stderr


FUNCTION = """\
import cfnresponse


def handler(event, context):
    print("creating", event["LogicalResourceId"])
    colour = event["ResourceProperties"]["Colour"]
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Colour": colour}, "fn-" + colour)
"""


@pytest.mark.slow
def test_local_invoke_runs_a_lambda_function_in_its_own_process(tmp_path: Path):
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "index.py").write_text(FUNCTION)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_"))}
    made = subprocess.run(
        [str(CLI), "event", "create", "Custom::Fn", "--property", "Colour=teal"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    done = subprocess.run(
        [
            str(CLI),
            "local-invoke",
            "-",
            "--handler",
            "Custom::Fn=lambda:index.handler",
            "--function",
            f"Custom::Fn=code={tmp_path / 'fn'}",
        ],
        input=made.stdout,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert (answer["Status"], answer["PhysicalResourceId"], answer["Data"]) == (
        "SUCCESS",
        "fn-teal",
        {"Colour": "teal"},
    )
    assert "creating Resource" in done.stderr  # the function's own output, in the daemon's log on stderr


def test_shell_completion_script_is_produced():
    env = {**os.environ, "_CFN_PROVIDER_COMPLETE": "bash_source"}
    done = subprocess.run([str(CLI)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "_cfn_provider_completion" in done.stdout, done.stderr
    env["_CFN_PROVIDER_COMPLETE"] = "bash_complete"
    env.update(COMP_WORDS="cfn-provider local-", COMP_CWORD="1")
    words = subprocess.run([str(CLI)], capture_output=True, text=True, timeout=60, env=env).stdout
    assert "local-invoke" in words


def test_docs_tell_how_to_enable_completion():
    readme = (Path(__file__).parents[1] / "docs" / "operating.md").read_text()
    assert textwrap.dedent('eval "$(_CFN_PROVIDER_COMPLETE=bash_source cfn-provider)"') in readme

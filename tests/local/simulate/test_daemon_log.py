"""cfn_provider.local.simulate.daemon_log: what a function logs as an error during `simulate` is
shown as its message (one readable line, its traceback under the failure it explains), never as
the daemon's raw JSON record among the events."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = Path(sys.executable).with_name("cfn-provider")

FAILING_FUNCTION = """\
import logging

import boto3
import cfnresponse

logger = logging.getLogger()


def handler(event, context):
    try:
        boto3.client("s3").put_object(Bucket="no-such-bucket-here", Key="k", Body=b"x")
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "k")
    except Exception as exc:
        logger.exception("could not write the object")
        cfnresponse.send(event, context, cfnresponse.FAILED, {}, reason=str(exc))
"""


def simulate(folder: Path, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_"))}
    return subprocess.run(
        [str(CLI), "simulate", *args, "--stack-name", "s", *(["--endpoint", endpoint] if args[0] == "create" else [])],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_functions_error_is_its_message_and_its_traceback_under_the_failure(emulator, tmp_path):
    (tmp_path / "objects.py").write_text(FAILING_FUNCTION)  # in the current folder: the default --handler-path
    (tmp_path / "t.yaml").write_text(
        "Resources:\n  Object:\n    Type: Custom::Object\n    Properties: {ServiceToken: x}\n"
    )
    run = simulate(
        tmp_path, emulator.endpoint, "create", "t.yaml", "--handler", "Custom::Object=lambda:objects.handler"
    )
    shown = f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    assert run.returncode == 1 and "ROLLBACK_COMPLETE" in run.stdout, shown
    for line in (run.stdout + run.stderr).splitlines():
        assert not line.lstrip().startswith("{"), f"a raw log record among the events: {line}"
    assert "error: Object (function Custom-Object): could not write the object: " in run.stderr, shown
    assert "NoSuchBucket" in run.stderr.split("could not write the object: ")[1].splitlines()[0], shown
    summary = run.stdout.split("Stack s: ROLLBACK_COMPLETE")[1]
    assert "Object CREATE_FAILED:" in summary and "objects.py" in summary, shown
    assert "NoSuchBucket" in summary.splitlines()[-2] and "/botocore/" not in summary, shown
    assert simulate(tmp_path, emulator.endpoint, "delete").returncode == 0

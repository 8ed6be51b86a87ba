"""cfn_provider.local.simulate.session and daemon_log, typed as a user types them (a subprocess): a
handler that raised gets its type, message and traceback shown; Ctrl-C during a long-running
Create leaves a state that `simulate delete` cleans up, the resource's id included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cfn_provider.local.simulate.daemon_log import DaemonLog
from cfn_provider.pipeline.raised import TRACEBACK_HINT
from tests.support.stack_emulators import stop_stack_emulators

CLI = Path(sys.executable).with_name("cfn-provider")
RAISING = """\
def create(event, context):
    return {"Data": {"Size": event["ResourceProperties"]["Size"]}}

def update(event, context):
    pass

def delete(event, context):
    pass
"""
LONG_RUNNING = """\
from pathlib import Path

from cfn_provider import InProgress

def create(event, context):
    return InProgress(progress={"op": 42}, physical_id="op-42", after=3600)   # an hour to the first poll

def is_complete(event, context, progress):
    return InProgress(progress=progress, after=3600)

def update(event, context):
    pass

def delete(event, context):
    Path("deleted.txt").write_text(event["PhysicalResourceId"])
"""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_"))}


def simulate(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "simulate", *args], cwd=folder, env=env(), capture_output=True, text=True, timeout=180
    )


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
def test_a_raising_handler_shows_what_failed_and_its_traceback(tmp_path: Path):
    (tmp_path / "thing.py").write_text(RAISING)
    (tmp_path / "t.yaml").write_text(
        "Resources:\n  Thing:\n    Type: Custom::Thing\n    Properties: {ServiceToken: x, Sise: 3}\n"
    )
    try:
        run = simulate(tmp_path, "create", "t.yaml", "--handler", "Custom::Thing=thing")
        assert run.returncode == 1, run.stdout + run.stderr
        assert f"Message returned: KeyError: 'Size' {TRACEBACK_HINT} (RequestId: " in run.stdout
        summary = run.stdout[run.stdout.index("Stack t: ROLLBACK_COMPLETE") :]
        assert f'File "{tmp_path}/thing.py", line 2, in create' in summary  # the traceback, under the failure
        assert "    KeyError: 'Size'" in summary
        assert "runner.py" not in summary  # the daemon's own frames left out
        assert "Sise" not in run.stdout.replace("Sise: 3", "")  # the daemon quotes no property value
    finally:
        stop_stack_emulators(tmp_path)


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
def test_ctrl_c_during_a_long_running_create_leaves_what_delete_cleans_up(tmp_path: Path):
    (tmp_path / "slow.py").write_text(LONG_RUNNING)
    (tmp_path / "t.yaml").write_text("Resources:\n  Slow:\n    Type: Custom::Slow\n    Properties: {ServiceToken: x}\n")
    state = tmp_path / ".cfn-simulate" / "t.json"
    proc = subprocess.Popen(
        [str(CLI), "simulate", "create", "t.yaml", "--handler", "Custom::Slow=slow"],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the action has given its id
            try:
                if json.loads(state.read_text())["Resources"]["Slow"]["PhysicalResourceId"] == "op-42":
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the long-running Create never reported its id")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        doc = json.loads(state.read_text())
        assert doc["StackStatus"] == "ROLLBACK_FAILED" and "simulate delete" in doc["StackStatusReason"]
        assert doc["Resources"]["Slow"]["PhysicalResourceId"] == "op-42"

        gone = simulate(tmp_path, "delete")
        assert gone.returncode == 0 and "DELETE_COMPLETE" in gone.stdout, gone.stdout + gone.stderr
        assert (tmp_path / "deleted.txt").read_text() == "op-42"  # the Delete reached the handler with the id
        assert not state.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_stack_emulators(tmp_path)


def test_daemon_log_keeps_tracebacks_by_request_and_passes_errors_on(capsys):
    log = DaemonLog()
    log.write(
        '{"event": "handler.raised", "request_id": "r-1", "level": "warning", "exception": '
        '"Traceback (most recent call last):\\n  File \\"/x/cfn_provider/pipeline/runner.py\\", line 1, in call\\n'
        '    run()\\n  File \\"/work/thing.py\\", line 2, in create\\n    boom\\nKeyError: \'Size\'"}\n{"event": "x", '
    )
    log.write('"level": "error"}\n{"event": "quiet", "level": "warning"}\n')
    reason = f"Message returned: KeyError: 'Size' {TRACEBACK_HINT} (RequestId: r-1)"
    assert log.traceback_for(reason) == (
        "Traceback (most recent call last):\n  File \"/work/thing.py\", line 2, in create\n    boom\nKeyError: 'Size'"
    )
    assert log.traceback_for("Message returned: KeyError: 'Size' (RequestId: r-1)") is None  # no pointer, nothing
    assert capsys.readouterr().err == "error: daemon x\n"  # an error line, said as words, not the JSON record

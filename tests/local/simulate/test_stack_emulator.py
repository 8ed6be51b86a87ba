"""cfn_provider.local.simulate.stack_emulator and seed: each simulated stack has its own emulator
process, kept from `create` to `delete`, so a Delete finds what the Create made; `--seed` puts
things there first and may give parameters; the process goes with the stack; a lost one is
replaced, saying so."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.support.stack_emulators import stack_emulator_pids

SSM_THING = "Custom::SsmThing=tests.local.handlers:ssm_thing"
TEMPLATE = """\
    Parameters:
      Seeded: {Type: String, Default: /nothing}
    Resources:
      Thing:
        Type: Custom::SsmThing
        Properties: {ServiceToken: x, FromParameter: !Ref Seeded}
    Outputs:
      Value: {Value: !GetAtt Thing.Value}
"""
SEED = """\
import boto3

boto3.client("ssm").put_parameter(Name="/seeded/colour", Value="teal", Type="String")
parameters = {"Seeded": "/seeded/colour"}
"""


def emulator_of(run) -> dict:
    return json.loads(run.state_path.read_text())["Emulator"]


def gone(pid: int, within: float = 20.0) -> bool:
    """The process has exited (a zombie not yet reaped by this test process counts as exited)."""
    deadline = time.monotonic() + within
    while True:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True
        if "\nState:\tZ" in status:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def test_the_stack_keeps_its_emulator_so_delete_finds_what_create_made(sim, write, tmp_path):
    path, seed = write("t.yaml", TEMPLATE), write("seed.py", SEED)
    created = sim("create", path, "--seed", seed, "--handler", SSM_THING, embedded=True)
    assert created.code == 0, created
    assert "seed: running" in created.stderr
    assert created.state["Outputs"]["Value"]["Value"] == "teal"  # the seed's parameter, read by the handler
    first = emulator_of(created)
    assert first["Endpoint"].startswith("http://127.0.0.1:") and stack_emulator_pids(tmp_path) == [first["Pid"]]
    assert (tmp_path / ".cfn-simulate" / "s.emulator.log").exists()

    updated = sim("update", "--parameter", "Seeded=/seeded/colour", "--handler", SSM_THING, embedded=True)
    assert updated.code == 0, updated  # nothing changed: no request at all
    assert emulator_of(updated) == first

    deleted = sim("delete", "--handler", SSM_THING, embedded=True)
    # the handler's delete_parameter raises ParameterNotFound unless the Create's parameter is still there
    assert deleted.code == 0 and "DELETE_COMPLETE" in deleted.stdout, deleted
    assert f"pid {first['Pid']}, kept from the last operation" in deleted.stderr
    assert gone(first["Pid"])  # its stack is gone: so is it
    assert not (tmp_path / ".cfn-simulate" / "s.emulator.log").exists()  # and its log


def test_a_lost_emulator_is_replaced_saying_what_was_lost(sim, write):
    created = sim(
        "create",
        write("t.yaml", TEMPLATE.replace("FromParameter: !Ref Seeded", "Value: v")),
        "--handler",
        SSM_THING,
        embedded=True,
    )
    assert created.code == 0, created
    pid = emulator_of(created)["Pid"]
    os.kill(pid, signal.SIGKILL)  # as after a reboot
    assert gone(pid)
    deleted = sim("delete", "--handler", SSM_THING, embedded=True)
    assert (
        "the stack's emulator process is gone" in deleted.stderr
        and "without what earlier operations made" in deleted.stderr
    ), deleted
    assert deleted.code == 1 and "ParameterNotFound" in deleted.stdout  # the handler's Delete finds nothing
    assert emulator_of(deleted)["Pid"] != pid


def test_a_failing_seed_stops_before_the_stack_and_leaves_no_emulator_behind(sim, write, tmp_path):
    seed = write("seed.py", "raise RuntimeError('no volume for you')\n")
    run = sim("create", write("t.yaml", TEMPLATE), "--seed", seed, "--handler", SSM_THING, embedded=True)
    assert run.code == 2 and "the seed script" in run.stderr and "(RuntimeError: no volume for you)" in run.stderr, run
    assert "Traceback" in run.stderr
    assert "CREATE_IN_PROGRESS" not in run.stdout and not run.state_path.exists()  # the stack never started
    deadline = time.monotonic() + 20
    while stack_emulator_pids(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stack_emulator_pids(tmp_path) == []  # the emulator started for it is stopped at once


def test_the_emulator_process_watches_its_state_file(tmp_path: Path):
    from cfn_provider.local.simulate import stack_emulator

    state = tmp_path / ".cfn-simulate" / "s.json"
    emulator = stack_emulator.start(state)
    try:
        state.write_text(json.dumps({"Emulator": {"Pid": emulator.pid + 1, "Endpoint": emulator.endpoint}}))
        time.sleep(2 * stack_emulator.WATCH_EVERY)  # the stack's last emulator, until the state is saved
        assert not gone(emulator.pid, 0)
        state.write_text(json.dumps({"Emulator": emulator.record}))
        assert stack_emulator.StackEmulator.attach(emulator.record, state).reused
        time.sleep(2 * stack_emulator.WATCH_EVERY)  # it has seen itself named (it looks every WATCH_EVERY)
        state.write_text(json.dumps({"Emulator": {"Pid": emulator.pid + 1, "Endpoint": emulator.endpoint}}))
        assert gone(emulator.pid)  # the state file names another emulator: this one stops
    finally:
        if not gone(emulator.pid, 0):
            os.kill(emulator.pid, signal.SIGTERM)

"""cfn_provider.local.simulate.remember: `update` and `delete` typed as the docs show them (no
--handler, no --endpoint, the template as an argument) use what `create` was given; and a normal
run stops the embedded daemon cleanly (no "second stop request" in its log)."""

from __future__ import annotations

import json
from pathlib import Path

import structlog
from click.testing import CliRunner, Result

from cfn_provider.local.simulate import simulate
from tests.local import handlers as sim_handlers

V1 = """\
    Parameters:
      Colour: {Type: String}
    Resources:
      Thing:
        Type: Custom::Recorded
        Properties: {ServiceToken: x, Name: thing-1, Colour: !Ref Colour}
    Outputs:
      Colour: {Value: !GetAtt Thing.Colour}
"""
V2 = V1.replace("Colour: !Ref Colour}", "Colour: !Ref Colour, Size: 4}")
RECORDED = "Custom::Recorded=tests.local.handlers:recorded"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(simulate, list(args), catch_exceptions=False)


def state(tmp_path: Path) -> dict:
    return json.loads((tmp_path / ".cfn-simulate" / "t.json").read_text())


def test_update_and_delete_use_what_create_was_given(emulator, write, tmp_path):
    v1, v2 = write("t.yaml", V1), write("t2.yaml", V2)
    with structlog.testing.capture_logs() as logged:
        created = invoke(
            "create", v1, "--handler", RECORDED, "--parameter", "Colour=blue", "--endpoint", emulator.endpoint
        )
    assert created.exit_code == 0, created.output
    assert state(tmp_path)["Simulate"] == {
        "Handlers": [RECORDED],
        "HandlerPaths": [str(tmp_path)],
        "Functions": [],
        "Endpoint": emulator.endpoint,
        "Region": None,
        "PollEvery": None,
    }
    assert state(tmp_path)["ParameterOverrides"] == {"Colour": "blue"}
    # a normal run: one stop, drained, nothing abandoned
    assert not [e for e in logged if e["event"] == "stopping_now"], logged
    assert [e["aborted"] for e in logged if e["event"] == "stopped"] == [False]

    sim_handlers.requests.clear()
    updated = invoke("update", v2)  # the template as an argument; handler, endpoint and Colour remembered
    assert updated.exit_code == 0, updated.output
    [update] = sim_handlers.requests
    assert update["RequestType"] == "Update" and update["PhysicalResourceId"] == "thing-1"
    assert update["ResourceProperties"]["Colour"] == "blue" and update["ResourceProperties"]["Size"] == "4"
    assert "Size" not in update["OldResourceProperties"]
    assert state(tmp_path)["TemplateFile"] == str(Path(v2).resolve())

    sim_handlers.requests.clear()
    gone = invoke("delete")
    assert gone.exit_code == 0 and "DELETE_COMPLETE" in gone.stdout, gone.output
    assert [(r["RequestType"], r["PhysicalResourceId"]) for r in sim_handlers.requests] == [("Delete", "thing-1")]


def test_options_given_again_replace_the_remembered_ones(emulator, write, tmp_path):
    v1 = write("t.yaml", V1)
    assert (
        invoke(
            "create",
            v1,
            "--handler",
            "Custom::Recorded=cfn_provider.handlers.echo",
            "--handler",
            "Custom::Echo",
            "--parameter",
            "Colour=blue",
            "--endpoint",
            emulator.endpoint,
            "--poll-every",
            "2",
        ).exit_code
        == 0
    )
    sim_handlers.requests.clear()
    assert invoke("update", "--template", v1, "--parameter", "Colour=red", "--handler", RECORDED).exit_code == 0
    assert [r["RequestType"] for r in sim_handlers.requests] == ["Update"]  # served by the handler given now
    remembered = state(tmp_path)["Simulate"]
    assert remembered["Handlers"] == [RECORDED, "Custom::Echo"]  # Custom::Recorded replaced, Custom::Echo kept
    assert remembered["PollEvery"] == 2.0
    assert state(tmp_path)["ParameterOverrides"] == {"Colour": "red"}
    assert invoke("delete").exit_code == 0


def test_update_takes_the_template_once(emulator, write):
    v1, v2 = write("t.yaml", V1), write("t2.yaml", V2)
    assert (
        invoke(
            "create", v1, "--handler", RECORDED, "--parameter", "Colour=blue", "--endpoint", emulator.endpoint
        ).exit_code
        == 0
    )
    twice = invoke("update", v1, "--template", v2)
    assert twice.exit_code == 2 and "give the new template once: TEMPLATE or --template" in twice.output
    assert invoke("delete").exit_code == 0

"""`cfn-provider simulate` catches a newcomer's mistakes before anything runs (cfn_provider.local.simulate.served:
a type no --handler serves, a --handler the template never uses), and says what went wrong when a
handler's answer does not fit the template (the attributes it did return; Data that is not JSON,
with the rollback Delete still reaching what the handler made)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from cfn_provider.cli import main

TYPO = """\
    Resources:
      Thing:
        Type: Custom::Thng
        Properties: {ServiceToken: x, Colour: blue}
"""


def test_a_type_no_handler_serves_is_refused_before_anything_runs_saying_did_you_mean(write, tmp_path):
    path = write("typo.yaml", TYPO)
    result = CliRunner().invoke(
        main, ["simulate", "create", path, "--handler", "Custom::Thing=thing", "--handler", "Custom::Other=other"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("cfn-provider: no --handler serves Custom::Thng (did you mean Custom::Thing?)")
    assert "Custom::Thing, Custom::Other" in result.stderr
    # nothing ran: no stack was made, so the next try is not blocked by a ROLLBACK_COMPLETE one
    assert not (tmp_path / ".cfn-simulate").exists()


def test_a_handler_the_template_never_uses_is_named(sim, write):
    path = write(
        "echo.yaml",
        """\
        Resources:
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Colour: blue}
    """,
    )
    run = sim("create", path)  # the fixture names Custom::Test, Custom::Recorded, Custom::Slow too
    assert run.code == 0, run
    assert "--handler Custom::Slow: the template uses no resource of that type (types it uses: Custom::Echo)" in (
        run.stderr
    )
    assert "--handler Custom::Echo:" not in run.stderr


def test_getatt_of_a_missing_attribute_names_the_keys_the_handler_returned(sim, write):
    path = write(
        "attr.yaml",
        """\
        Resources:
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Colour: blue, Size: 3}
        Outputs:
          Missing: {Value: !GetAtt Thing.Nope}
    """,
    )
    run = sim("create", path)
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    assert "doesn't contain Nope key" in failed[0][3]
    assert failed[0][3].endswith("(simulate: the answer's Data has Colour, Size)"), failed


LEAKY = """\
import datetime
import pathlib


def create(event):
    pathlib.Path("made.txt").write_text(event["LogicalResourceId"])
    return {"PhysicalResourceId": "leaky-1", "Data": {"Name": "x", "When": datetime.datetime(2026, 1, 1)}}


def update(event):
    return None


def delete(event):
    pathlib.Path("deleted.txt").write_text(event["PhysicalResourceId"])
"""


def test_data_that_is_not_json_fails_the_create_with_the_handlers_id_so_rollback_reaches_its_delete(
    sim, write, tmp_path: Path
):
    write("leaky.py", LEAKY)
    path = write(
        "leaky.yaml",
        """\
        Resources:
          Made:
            Type: Custom::Leaky
            Properties: {ServiceToken: x}
    """,
    )
    run = sim("create", path, "--handler", "Custom::Leaky=leaky")
    assert run.code == 1, run
    failed = [e for e in run.events() if e[1] == "CREATE_FAILED"]
    assert failed[0][2] == "leaky-1", failed  # the handler's own id, not the failed-Create marker
    assert "Data key 'When' is not JSON-serialisable (datetime)" in failed[0][3]
    assert ("Made", "DELETE_COMPLETE", "leaky-1", "") in run.events()
    assert (tmp_path / "deleted.txt").read_text() == "leaky-1"  # what it made was cleaned up
    assert run.state["StackStatus"] == "ROLLBACK_COMPLETE"


def test_simulates_stacks_are_ignored_by_git_in_this_repository():
    ignored = (Path(__file__).parents[3] / ".gitignore").read_text().splitlines()
    assert ".cfn-simulate/" in ignored

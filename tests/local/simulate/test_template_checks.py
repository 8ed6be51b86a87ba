"""`simulate` checks a template before anything runs: cfn-lint's errors stop the run naming
file:line:column, the rule and cfn-lint's own message (its "did you mean"); an undefined Ref or
GetAtt is refused by name; warnings are shown and the run goes on; without the `simulate` extra,
it says which extra to install."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.local.template.helpers import UNDEFINED

TYPO = """\
    Parameters:
      ServiceToken: {Type: String}
    Resources:
      Thing:
        Type: Custom::Thing
        Propertes:
          ServiceToken: !Ref ServiceToken
          Size: 3
"""


def test_a_misspelt_section_stops_the_run_with_the_file_line_rule_and_did_you_mean(sim, write):
    path = write("t.yaml", TYPO)
    run = sim("create", path)
    assert run.code == 2, run
    assert (
        f"{path}:6:5: E3001 Additional properties are not allowed ('Propertes' was unexpected. "
        "Did you mean 'Properties'?)"
    ) in run.stderr
    assert "must have values" not in run.stderr  # the cause, not a confusing consequence
    assert not run.state_path.exists()  # nothing ran


def test_an_undefined_ref_or_getatt_is_refused_by_name(sim, write):
    path = write("t.yaml", UNDEFINED)
    run = sim("create", path)
    assert run.code == 2, run
    assert f"{path}:5:7: E1020 'ServiceTokn' is not one of" in run.stderr
    assert f"{path}:6:7: E1010 'Thingy' is not one of ['Thing']" in run.stderr


def test_a_new_template_for_update_is_checked_too(sim, write):
    ok = write(
        "ok.yaml",
        """\
        Resources:
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Size: 3}
    """,
    )
    assert sim("create", ok).code == 0
    run = sim("update", write("t.yaml", TYPO))
    assert run.code == 2 and "E3001" in run.stderr, run
    assert sim("delete").code == 0


def test_warnings_are_shown_and_the_run_goes_on(sim, write):
    path = write(
        "t.yaml",
        """\
        Parameters:
          Unused: {Type: String, Default: x}
        Resources:
          Thing:
            Type: Custom::Echo
            Properties: {ServiceToken: x, Size: 3}
    """,
    )
    run = sim("create", path)
    assert run.code == 0, run
    assert f"warning: {path}:2:3: W2001 Parameter Unused not used." in run.stderr
    assert sim("delete").code == 0


def test_without_the_simulate_extra_it_says_which_extra_to_install(sim, write, monkeypatch):
    path = write("t.yaml", TYPO)
    monkeypatch.setitem(sys.modules, "cfnlint.api", None)  # as when cfn-lint is not installed
    run = sim("create", path)
    assert (
        run.code == 2
        and "simulate needs cfn-lint" in run.stderr
        and f"pip install -e '{Path(__file__).resolve().parents[3]}[simulate]'" in run.stderr  # this checkout's
    ), run
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    run = sim("create", path, embedded=True)  # the embedded emulator is moto's server
    assert run.code == 2 and "simulate needs moto's server" in run.stderr and "[simulate]" in run.stderr, run

"""`make check`'s selection (`-m "not slow and not chaos and not emulator"`) leaves out every test
that needs moto's server, dynalite or daemon processes, so it passes on a fresh clone (no dynalite:
only `make test` installs it) and stays about a minute; tests/conftest.py marks them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def make_check_selection() -> str:
    """The -m expression of the Makefile's `check` target."""
    target = re.search(r"^check:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert target, "no check target in the Makefile"
    found = re.search(r'-m "([^"]+)"', target.group(1))
    assert found, target.group(1)
    return found.group(1)


@pytest.mark.slow
def test_make_check_selects_no_test_that_needs_an_emulator_dynalite_or_daemon_processes(tmp_path):
    selection = make_check_selection()
    assert selection == "not slow and not chaos and not emulator"
    probe = tmp_path / "selected.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.support.selection_probe",
            "-m",
            selection,
            "tests",
        ],
        cwd=REPO,
        env={**os.environ, "CFN_SELECTION_PROBE": str(probe)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    selected = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(selected) > 1000  # the unit tests and the fast integration tests are kept
    heavy = [(t["id"], t["heavy"]) for t in selected if t["heavy"]]
    assert not heavy, f"make check would run these, which start an emulator, dynalite or daemons: {heavy[:10]}"
    ids = {t["id"] for t in selected}
    assert not [i for i in ids if i.startswith("tests/intake/test_web_fleet.py::")]  # dynalite
    assert not [i for i in ids if i.startswith("tests/chaos/")]
    assert not [t["id"] for t in selected if {"slow", "chaos", "emulator"} & set(t["marks"])]

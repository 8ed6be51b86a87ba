"""tests.support.leftovers, the end-of-run check tests/conftest.py makes: a process a test started
under its tmp_path that outlives the run is found, stopped and named (the run fails); one that
ended is not a leak."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_process_left_under_the_runs_folder_is_found_and_stopped(tmp_path):
    (tmp_path / "work").mkdir()
    left = subprocess.Popen(["sleep", "60"], cwd=tmp_path / "work")
    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "state.json")])
    ended = subprocess.Popen(["true"], cwd=tmp_path)
    ended.wait()
    try:
        found = {pid for pid, _ in leftovers.under(tmp_path)}
        assert {left.pid, named.pid} <= found
        reaped = leftovers.reap(tmp_path, grace=0.5)
        assert {pid for pid, _ in reaped} == {left.pid, named.pid}  # not the one that ended
        assert left.wait(timeout=10) == -9 and named.wait(timeout=10) == -9
        assert leftovers.under(tmp_path) == []
    finally:
        for proc in (left, named):
            proc.kill()
            proc.wait()

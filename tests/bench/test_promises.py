"""bench.promises (scenario 12): each promise runs the daemon's own code against its floor and
yields the row `make bench` prints. A quick run here keeps the rows from rotting: admission's
`ours` raises unless a signed notification is admitted without a wait (the certificate cached),
the PUT's unless the answer was delivered, so a change that breaks either path fails this test,
not only a bench run. No figure is asserted (the machine is shared): only the rows' shape."""

from __future__ import annotations

import math

from bench import promises
from bench.report import _promise_rows
from tests.support.logging_state import kept_logging


def test_a_quick_run_yields_each_promise_against_its_floor() -> None:
    with kept_logging():  # the log line's run configures the daemon's logging for the process
        rows = promises.run(quick=True, rounds=2)
    assert [r["promise"] for r in rows] == ["log line", "admission", "PUT"]
    for r in rows:
        assert r["ours_us"] > 0 and r["floor_us"] > 0, r
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"] and math.isfinite(r["ratio_max"]), r
    printed = _promise_rows({"rows": rows})
    assert [row.target for row in printed] == ["<= 2.0", "<= 2.0", ""]
    assert all("(floor: " in row.figure and " - " in row.value for row in printed)

"""The chaos suites' table of figures, as a pytest plugin that works with parallel workers (xdist).

Tests record figures through tests/chaos/conftest.py's `figures` fixture; they land in `FIGURES`
of the process that ran the test. Under xdist each worker sends its figures to the controller
when it finishes (`workeroutput`), where they are merged: a figure that was added to (`add`)
is summed across workers, one that was set (`set`) keeps the last value received, as in a serial
run the last test to set it wins. The controller prints the one table at the end of the session
and writes it as JSON to $CFN_CHAOS_REPORT (default chaos-report.json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FULL = os.environ.get("CFN_CHAOS") == "full"
FIGURES: dict[str, dict[str, Any]] = {}
ADDED: dict[str, set[str]] = {}  # per suite, the figures that were added to rather than set
_OUTPUT_KEY = "cfn_chaos_figures"


def record(suite: str, name: str, value: Any, added: bool = False) -> None:
    FIGURES.setdefault(suite, {})[name] = value
    if added:
        ADDED.setdefault(suite, set()).add(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the figures to the controller
        workeroutput[_OUTPUT_KEY] = json.dumps({"figures": FIGURES, "added": {k: sorted(v) for k, v in ADDED.items()}})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    sent = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY)
    if not sent:
        return
    data = json.loads(sent)
    for suite, values in data["figures"].items():
        added = set(data["added"].get(suite, ())) | ADDED.get(suite, set())  # a counter on either side
        mine = FIGURES.get(suite, {})
        for name, value in values.items():
            if name in added and name in mine:
                value = mine[name] + value
            record(suite, name, value, name in added)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not any(FIGURES.values()):
        return
    tr = terminalreporter
    tr.section(f"chaos figures ({'full' if FULL else 'reduced: make chaos runs full size'})")
    width = max((len(n) for values in FIGURES.values() for n in values), default=10) + 2
    for suite, values in sorted(FIGURES.items()):
        tr.write_line(f"{suite}:")
        for name, value in values.items():
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            tr.write_line(f"  {name:<{width}} {shown}")
    path = Path(os.environ.get("CFN_CHAOS_REPORT", "chaos-report.json"))
    try:
        path.write_text(json.dumps({"full": FULL, "suites": FIGURES}, indent=2, sort_keys=True))
        tr.write_line(f"figures written to {path}")
    except OSError as exc:
        tr.write_line(f"could not write {path}: {exc}")

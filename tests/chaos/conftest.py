"""Chaos suites: faults, kills and hostile input, with figures.

`make test` runs each suite reduced; `make chaos` (CFN_CHAOS=full) runs them at full size.
Every suite records its figures with the `figures` fixture; the session ends with one table
of all of them (and writes it as JSON to $CFN_CHAOS_REPORT, default chaos-report.json).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FULL = os.environ.get("CFN_CHAOS") == "full"
_FIGURES: dict[str, dict[str, Any]] = {}


def scale(reduced: int, full: int) -> int:
    """The size of something: `full` under `make chaos`, `reduced` in `make test`."""
    return full if FULL else reduced


class Figures:
    """Figures of one suite: `figures.set("lost", 0)`; shown in the end-of-session table."""

    def __init__(self, suite: str):
        self.suite = suite
        self.values = _FIGURES.setdefault(suite, {})

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value

    def add(self, name: str, amount: float = 1) -> None:
        self.values[name] = self.values.get(name, 0) + amount


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    return Figures(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.chaos)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not any(_FIGURES.values()):
        return
    tr = terminalreporter
    tr.section(f"chaos figures ({'full' if FULL else 'reduced: make chaos runs full size'})")
    width = max((len(n) for values in _FIGURES.values() for n in values), default=10) + 2
    for suite, values in sorted(_FIGURES.items()):
        tr.write_line(f"{suite}:")
        for name, value in values.items():
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            tr.write_line(f"  {name:<{width}} {shown}")
    path = Path(os.environ.get("CFN_CHAOS_REPORT", "chaos-report.json"))
    try:
        path.write_text(json.dumps({"full": FULL, "suites": _FIGURES}, indent=2, sort_keys=True))
        tr.write_line(f"figures written to {path}")
    except OSError as exc:
        tr.write_line(f"could not write {path}: {exc}")

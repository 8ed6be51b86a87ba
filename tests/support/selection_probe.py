"""A pytest plugin for tests/test_selection.py: after collection (and `-m`'s deselection), one JSON
line per selected test on the file $CFN_SELECTION_PROBE: its id, markers and the fixtures in its
closure whose own code starts moto's server, dynalite or daemon processes."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.heavy import heavy_fixture


def pytest_collection_finish(session: pytest.Session) -> None:
    with open(os.environ["CFN_SELECTION_PROBE"], "w", encoding="utf-8") as out:
        for item in session.items:
            info = getattr(item, "_fixtureinfo", None)
            defs = info.name2fixturedefs.items() if info is not None else ()
            heavy = sorted(name for name, chain in defs if any(heavy_fixture(d.func) for d in chain))
            marks = sorted({m.name for m in item.iter_markers()})
            out.write(json.dumps({"id": item.nodeid, "marks": marks, "heavy": heavy}) + "\n")

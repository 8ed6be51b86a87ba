"""Chaos suites: faults, kills and hostile input, with figures.

`make test` runs each suite reduced; `make chaos` (CFN_CHAOS=full) runs them at full size.
Every suite records its figures with the `figures` fixture; the session ends with one table
of all of them (and writes it as JSON to $CFN_CHAOS_REPORT, default chaos-report.json): the
plugin tests/support/figures.py, which gathers them from parallel workers too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dynalite import Dynalite, DynaliteMissing
from tests.support.figures import ADDED, FIGURES, FULL


def scale(reduced: int, full: int) -> int:
    """The size of something: `full` under `make chaos`, `reduced` in `make test`."""
    return full if FULL else reduced


class Figures:
    """Figures of one suite: `figures.set("lost", 0)`; shown in the end-of-session table."""

    def __init__(self, suite: str):
        self.suite = suite
        self.values = FIGURES.setdefault(suite, {})

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value

    def add(self, name: str, amount: float = 1) -> None:
        """A counter: summed across parallel workers (`set` figures are not)."""
        self.values[name] = self.values.get(name, 0) + amount
        ADDED.setdefault(self.suite, set()).add(name)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    return Figures(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_"))


# ---------------------------------------------------------------------------------- hostile tenants

HOSTILE_TENANT = "hostile_tenant"  # one table for every file that plays the hostile template author


class Attacks:
    """The figures of the hostile-tenant table, for any test file that tries an attack:

        attacks.tried("rollback reads a foreign SSM parameter")
        attacks.disclosed(response_body, log_text, secrets=[prod_secret])  # counts each secret found (via SQS)
        attacks.disclosed(body, secrets=[secret], via="web")  # ... through another transport (sqs, mns, web)
        attacks.touched(foreign_changed)        # foreign resources read, changed or deleted
        attacks.stray(counter.connections)      # requests to hosts outside the allowlist

    Each attack's test asserts its own zeros; the table adds them up across files."""

    TRIED, DISCLOSED, TOUCHED, STRAY = (
        "attacks_tried",
        "secrets_disclosed",
        "foreign_resources_touched",
        "requests_to_non_allowlisted_hosts",
    )

    TRANSPORTS = ("sqs", "mns", "web")  # secrets disclosed is also shown per transport: each must be 0

    def __init__(self) -> None:
        self.figures = Figures(HOSTILE_TENANT)
        for name in (self.TRIED, self.DISCLOSED, self.TOUCHED, self.STRAY, *map(self.via, self.TRANSPORTS)):
            self.figures.values.setdefault(name, 0)

    @classmethod
    def via(cls, transport: str) -> str:
        return f"{cls.DISCLOSED}_via_{transport}"

    def tried(self, what: str, count: int = 1) -> None:
        self.figures.add(self.TRIED, count)

    def disclosed(self, *texts: str | bytes, secrets: list[str], via: str = "sqs") -> int:
        """How many of `secrets` appear in any of `texts` (each counted once); added to the table, in
        all and for the transport the attack went `via`."""
        assert via in self.TRANSPORTS, via
        blob = "\n".join(t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in texts)
        found = sum(1 for secret in secrets if secret and secret in blob)
        self.figures.add(self.DISCLOSED, found)
        self.figures.add(self.via(via), found)
        return found

    def touched(self, count: int | bool) -> int:
        self.figures.add(self.TOUCHED, int(count))
        return int(count)

    def stray(self, count: int) -> int:
        self.figures.add(self.STRAY, count)
        return count


@pytest.fixture
def attacks() -> Attacks:
    return Attacks()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.chaos)


@pytest.fixture
def dynalite(tmp_path: Path) -> Iterator[Dynalite]:
    """dynalite on 127.0.0.1 (a free port), in memory; fails (not skips) when it is not installed."""
    try:
        db = Dynalite(tmp_path / "dynalite.log")
    except DynaliteMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    with db:
        yield db

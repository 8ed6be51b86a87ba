"""Fixtures for the simulate tests: run `cfn-provider simulate ...` in-process, in a scratch directory."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import cfn_provider.local.simulate.session as simulate_session
from cfn_provider.local.emulator import Emulator
from cfn_provider.local.simulate import simulate
from tests.local import handlers as sim_handlers
from tests.support.stack_emulators import stop_stack_emulators

TEST_HANDLERS = (
    "Custom::Test=tests.support.handlers",
    "Custom::Recorded=tests.local.handlers:recorded",
    "Custom::Slow=tests.local.handlers:slow",
    "Custom::Echo",
)  # the built-in, named


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Never os._exit() inside pytest; leave the process's logging alone; work in tmp_path; stop the
    emulators of stacks a test left behind."""
    monkeypatch.setattr(simulate_session, "HARD_EXIT_PAST_STUCK_HANDLERS", False)
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    sim_handlers.requests.clear()
    yield
    stop_stack_emulators(tmp_path)


@dataclass
class Run:
    result: Result
    state_path: Path

    @property
    def code(self) -> int:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())

    def events(self, last_operation: bool = True) -> list[tuple[str, str, str, str]]:
        """(logical id, status, physical id, reason) of the state file's events (this run's only)."""
        events = self.state["Events"]
        if last_operation:
            starts = [
                i
                for i, e in enumerate(events)
                if e["ResourceType"] == "AWS::CloudFormation::Stack" and e["ResourceStatusReason"] == "User Initiated"
            ]
            events = events[starts[-1] :]
        return [
            (e["LogicalResourceId"], e["ResourceStatus"], e["PhysicalResourceId"], e["ResourceStatusReason"])
            for e in events
        ]

    def __repr__(self) -> str:  # shown by pytest when an assertion fails
        return f"Run(code={self.code})\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], str]:
    """write("name.yaml", yaml_text) -> the path, dedented."""

    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return _write


@pytest.fixture
def sim(emulator: Emulator, tmp_path: Path) -> Callable[..., Run]:
    """sim("create", "t.yaml", "--stack-name", "s") against the session's moto server (pass
    embedded=True for the embedded one); the test handlers are always registered."""

    def run(*args: str, embedded: bool = False, stack: str = "s") -> Run:
        extra = [] if embedded else ["--endpoint", emulator.endpoint]
        for spec in TEST_HANDLERS:
            extra += ["--handler", spec]
        argv = [*args, "--stack-name", stack, *extra]
        result = CliRunner().invoke(simulate, argv, catch_exceptions=False)
        return Run(result, tmp_path / ".cfn-simulate" / f"{stack}.json")

    return run

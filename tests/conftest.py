"""Shared fixtures: one moto server per session, a fresh topic/queue/bucket per test."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiobotocore.session
import pytest

import cfn_provider
from cfn_provider import editable
from cfn_provider.local.emulator import Emulator, Provider, Stack
from cfn_provider.transports.queue import SqsQueue
from tests.support import handlers, leftovers
from tests.support.daemons import DaemonSpawner, InProcessDaemon, in_process_daemons, settings_for
from tests.support.heavy import heavy_fixture
from tests.support.stub_s3 import StubS3

pytest_plugins = ("tests.support.figures",)  # the chaos suites' table of figures, gathered from every worker

# pytest-timeout: a hung test fails with its traceback instead of eating CI's time. The default (setup.cfg,
# `timeout`) covers a unit or in-process integration test many times over; these cover the rest.
SLOW_TIMEOUT = 600  # a test marked slow (daemon subprocesses, a virtualenv) or a chaos suite, reduced
FULL_CHAOS_TIMEOUT = 3600  # the chaos suites at full size (`make chaos`)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run on an editable install older than the checkout's modules stops here, saying what to do
    (`make test` / `make check` rebuild it themselves: the Makefile's $(SOURCES) list)."""
    stale = editable.missing(Path(cfn_provider.__file__).parent)
    if stale:
        names = ", ".join(str(p.relative_to(Path(__file__).parents[1])) for p in stale)
        pytest.exit(f"{names}: not in the installed package; {editable.HINT}", returncode=4)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No process a test started outlives the run (tests.support.leftovers): the controller (not an
    xdist worker) stops what is left under the run's temporary folder, and the run fails naming it."""
    if hasattr(session.config, "workerinput") or not sys.platform.startswith("linux"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None) if factory else None
    if basetemp is None:
        return  # no test asked for a temporary folder
    left = leftovers.reap(Path(basetemp))
    if left:
        names = "\n".join(f"  pid {pid}: {args[:300]}" for pid, args in left)
        sys.stderr.write(f"\nprocesses the tests started outlived them (now killed):\n{names}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A test that uses one of these talks to the AWS emulator (moto's server) or runs the daemon: it is
# marked `emulator` here, and `make check` leaves it to `make test`. So is a test using a fixture
# whose own code starts one of NEEDS (moto's server, dynalite, daemon processes), whatever its name.
EMULATOR_FIXTURES = {"emulator", "ros_daemon", "sim"}


def needs_emulator(item: pytest.Item) -> bool:
    """The test uses one of EMULATOR_FIXTURES, or a fixture that starts one of NEEDS."""
    if EMULATOR_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(heavy_fixture(d.func) for chain in defs for d in chain)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers and timeouts by kind (above); and the long tests first: under `make test` each file
    goes to one worker (`--dist loadfile`), in this order, so the longest start early, not end late."""
    full = os.environ.get("CFN_CHAOS") == "full"

    def long(item: pytest.Item) -> bool:
        return bool(item.get_closest_marker("slow")) or "/tests/chaos/" in item.path.as_posix()

    for item in items:
        if needs_emulator(item):
            item.add_marker(pytest.mark.emulator)
        if item.get_closest_marker("timeout"):
            continue  # a test's own timeout wins
        if full and "/tests/chaos/" in item.path.as_posix():
            item.add_marker(pytest.mark.timeout(FULL_CHAOS_TIMEOUT))
        elif long(item):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
    items.sort(key=lambda item: not long(item))  # stable: the order within each kind is kept


@pytest.fixture(scope="session")
def emulator() -> Emulator:
    emu = Emulator()
    saved = {k: os.environ.get(k) for k in emu.env()}
    os.environ.update(emu.env())
    yield emu
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    emu.stop()


@pytest.fixture
def provider(emulator: Emulator) -> Provider:
    return Provider.create(emulator)


@pytest.fixture
def stack(provider: Provider) -> Stack:
    return Stack(provider)


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    handlers.calls.clear()
    handlers.started.clear()
    handlers.running.update(now=0, peak=0)


@pytest.fixture
async def run_daemon(provider: Provider, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start in-process daemons on the test's provider: `d = await run_daemon(concurrency=4)`."""
    async with in_process_daemons() as start_daemon:

        async def start(**overrides: Any) -> InProcessDaemon:
            overrides.setdefault("state", f"sqlite://{tmp_path}/state.db")
            return await start_daemon(settings_for(provider, tmp_path, **overrides))

        yield start


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    """Where tests.support.handlers records its calls (CFN_TEST_CALLS_FILE); see recorded_calls."""
    return tmp_path / "calls.txt"


@pytest.fixture
def daemon_args() -> tuple[str, ...]:
    """Arguments every daemon `spawn` starts gets before its own; override it in a test module."""
    return ()


@pytest.fixture
def spawn(
    emulator: Emulator, provider: Provider, tmp_path: Path, calls_file: Path, daemon_args: tuple[str, ...]
) -> Iterator[DaemonSpawner]:
    """Start subprocess daemons sharing one state file and `calls_file`: `spawn("first", *args)`;
    every one is killed at teardown."""
    spawner = DaemonSpawner(emulator, provider, tmp_path, calls_file, daemon_args)
    try:
        yield spawner
    finally:
        spawner.stop_all()


@pytest.fixture
def stub_s3() -> Iterator[StubS3]:
    """A started StubS3 (tests.support.stub_s3), stopped at teardown."""
    with StubS3() as server:
        yield server


@pytest.fixture
async def client(emulator: Emulator) -> AsyncIterator[Any]:
    """An aiobotocore SQS client on the suite's moto server (its calls observable through botocore events)."""
    async with aiobotocore.session.get_session().create_client("sqs", region_name="us-east-1") as sqs:
        yield sqs


@pytest.fixture
def queue(client: Any, provider: Provider) -> SqsQueue:
    """The suite's queue through SqsQueue (the deletes and poller tests drive it directly)."""
    return SqsQueue(client, provider.queue_url)

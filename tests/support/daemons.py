"""Run the daemon for a test: in-process (an asyncio task) or as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cfn_provider.config import Settings
from cfn_provider.local.emulator import Emulator, Provider
from cfn_provider.service import Service

REPO = Path(__file__).resolve().parents[2]
# Custom::Echo is the built-in, named (nothing is served unless named); the others are test handlers.
TEST_HANDLERS = (
    ("Custom::Test", "tests.support.handlers"),
    ("Custom::AsyncTest", "tests.support.handlers:async_handler"),
    ("Custom::Echo", None),
)


def settings_for(provider: Provider, state_dir: Path, **overrides: Any) -> Settings:
    base = Settings(
        queue_url=provider.queue_url,
        topic_arns=(provider.topic_arn,),
        handlers=TEST_HANDLERS,
        state=f"sqlite://{state_dir}/state.db",
        verify_signatures=False,
        allow_response_urls=(provider.emulator.endpoint + "/",),
        wait_seconds=1,
        visibility_timeout=30,
        max_backoff=1.0,
    )
    return replace(base, **overrides)


@dataclass
class InProcessDaemon:
    service: Service
    task: asyncio.Task

    @classmethod
    async def start(cls, settings: Settings) -> InProcessDaemon:
        ready = asyncio.Event()
        service = Service(settings, on_ready=ready.set)
        task = asyncio.create_task(service.run())
        done, _ = await asyncio.wait(
            {task, asyncio.create_task(ready.wait())}, timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            task.result()  # raises what stopped it
            raise RuntimeError("daemon exited before its first receive")
        return cls(service, task)

    async def stop(self, timeout: float = 60) -> int:
        if not self.task.done():
            self.service.stop()
        return await asyncio.wait_for(self.task, timeout)


@contextlib.asynccontextmanager
async def in_process_daemons() -> AsyncIterator[Callable[[Settings], Awaitable[InProcessDaemon]]]:
    """`start(settings)` starts an in-process daemon; every one still running is stopped when the
    block ends (a fixture's teardown)."""
    started: list[InProcessDaemon] = []

    async def start(settings: Settings) -> InProcessDaemon:
        daemon = await InProcessDaemon.start(settings)
        started.append(daemon)
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            if not daemon.task.done():
                await daemon.stop()


@dataclass
class SubprocessDaemon:
    """`python -m cfn_provider run ...` with JSON logs captured to a file."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | None = None
    _log: Any = field(default=None, repr=False)

    @classmethod
    def for_provider(
        cls,
        emulator: Emulator,
        provider: Provider,
        state_dir: Path,
        log_path: Path,
        extra_args: list[str] = (),
        env: dict[str, str] | None = None,
    ) -> SubprocessDaemon:
        args = [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--queue-url",
            provider.queue_url,
            "--topic-arn",
            provider.topic_arn,
            "--state",
            f"sqlite://{state_dir}/state.db",
            "--no-verify-signatures",
            "--allow-response-url",
            emulator.endpoint + "/",
            "--handler",
            "Custom::Test=tests.support.handlers",
            "--handler",
            "Custom::Echo",
            "--wait-seconds",
            "1",
            "--max-backoff",
            "1",
            "--log-format",
            "json",
            *extra_args,
        ]
        full_env = {**os.environ, **emulator.env(), "PYTHONPATH": str(REPO), **(env or {})}
        return cls(args, full_env, log_path)

    def start(self, wait_ready: float = 30) -> SubprocessDaemon:
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO
        )
        deadline = time.monotonic() + wait_ready
        while time.monotonic() < deadline:
            if any(e.get("event") == "started" for e in self.events()):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("daemon did not start")

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._log:
            self._log.close()
            self._log = None
        return code

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._log:
            self._log.close()
            self._log = None


def wait_for_event(daemon: SubprocessDaemon, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
    """The first JSON log event of `daemon` whose fields equal `match` (e.g. event="request",
    outcome="replayed"), waiting up to `timeout` seconds; AssertionError (with the log's tail) if none."""
    deadline = time.monotonic() + timeout
    while True:
        for event in daemon.events():
            if all(event.get(k) == v for k, v in match.items()):
                return event
        if time.monotonic() >= deadline:
            tail = daemon.log_path.read_text()[-3000:] if daemon.log_path.exists() else ""
            raise AssertionError(f"no log event matching {match} within {timeout} s; log tail:\n{tail}")
        time.sleep(0.05)


def recorded_calls(path: Path) -> list[str]:
    """Lines "RequestId RequestType" written by tests.support.handlers through CFN_TEST_CALLS_FILE."""
    return path.read_text().splitlines() if path.exists() else []


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `predicate` until it returns something truthy and return that; AssertionError naming
    `what` if it has not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def exit_code(daemon: SubprocessDaemon, timeout: float, what: str) -> int:
    """`daemon`'s exit code, waiting up to `timeout` seconds; AssertionError (with the log's tail,
    and `what` saying when it should have exited) if it is still running."""
    try:
        return daemon.wait(timeout)
    except Exception as exc:  # subprocess.TimeoutExpired
        raise AssertionError(
            f"the daemon did not exit within {timeout} s {what}; log tail:\n{daemon.log_path.read_text()[-2500:]}"
        ) from exc


def stop_gracefully(daemon: SubprocessDaemon, timeout: float = 30, what: str = "after SIGTERM") -> int:
    """SIGTERM `daemon` and return its exit code (see exit_code)."""
    daemon.signal(signal.SIGTERM)
    return exit_code(daemon, timeout, what)


class DaemonSpawner:
    """Starts subprocess daemons for one test: all share one state file (in `state_dir`) and one
    calls file (CFN_TEST_CALLS_FILE, see recorded_calls), and get `base_args` before their own.

        first = spawner("first", "--grace-period", "1")   # logs to state_dir/first.log
        ...
        spawner.stop_all()                                   # kills whatever still runs
    """

    def __init__(
        self, emulator: Emulator, provider: Provider, state_dir: Path, calls_file: Path, base_args: Sequence[str] = ()
    ) -> None:
        self.emulator, self.provider, self.state_dir = emulator, provider, state_dir
        self.calls_file, self.base_args = calls_file, tuple(base_args)
        self.started: list[SubprocessDaemon] = []

    def __call__(self, name: str, *extra_args: str, env: dict[str, str] | None = None) -> SubprocessDaemon:
        daemon = SubprocessDaemon.for_provider(
            self.emulator,
            self.provider,
            self.state_dir,
            self.state_dir / f"{name}.log",
            extra_args=[*self.base_args, *extra_args],
            env={"CFN_TEST_CALLS_FILE": str(self.calls_file), **(env or {})},
        )
        self.started.append(daemon)
        return daemon.start()

    def stop_all(self) -> None:
        for daemon in self.started:
            daemon.stop()


def fleet_member(
    emulator: Emulator,
    provider: Provider,
    table: str,
    log_path: Path,
    extra_args: list[str] = (),
    env: dict[str, str] | None = None,
) -> SubprocessDaemon:
    """A fleet-mode daemon subprocess: `SubprocessDaemon.for_provider` with `--state dynamodb://TABLE`
    (given after the default sqlite --state, so it is the one click keeps)."""
    return SubprocessDaemon.for_provider(
        emulator,
        provider,
        log_path.parent,
        log_path,
        extra_args=["--state", f"dynamodb://{table}", *extra_args],
        env=env,
    )

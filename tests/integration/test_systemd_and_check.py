"""The daemon as systemd and a container health check see it, on a real subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cfn_provider.local.emulator import Emulator, Provider
from tests.support.daemons import SubprocessDaemon

pytestmark = pytest.mark.slow


def run_check(state_dir: Path, max_age: float = 30, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cfn_provider",
            "check",
            "--state",
            f"sqlite://{state_dir}/state.db",
            "--max-age",
            str(max_age),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_notifies_systemd_and_passes_check_while_serving(
    emulator: Emulator, provider: Provider, tmp_path: Path
) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.5)
    daemon = SubprocessDaemon.for_provider(
        emulator,
        provider,
        tmp_path,
        tmp_path / "daemon.log",
        env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "2000000"},  # WatchdogSec=2: ping every 1 s
    )
    received: list[str] = []

    def drain() -> list[str]:
        try:
            while True:
                received.append(sock.recv(64).decode())
        except TimeoutError:
            return received

    try:
        daemon.start()
        wait_for(lambda: "READY=1" in drain(), 20, "READY=1")
        wait_for(lambda: drain().count("WATCHDOG=1") >= 3, 20, "repeated WATCHDOG=1 pings")
        result = run_check(tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("ok")
        assert f"daemon: sqs {provider.queue_url}" in result.stdout  # the only daemon there: check says it read it
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        assert "STOPPING=1" in drain()
    finally:
        daemon.stop()
        sock.close()

    # the daemon is gone: once its health file is older than max-age, check fails and says why
    time.sleep(2.5)
    result = run_check(tmp_path, max_age=2)
    assert result.returncode == 1
    assert "stuck or gone" in result.stderr


def test_check_fails_when_the_queue_cannot_be_reached(emulator: Emulator, provider: Provider, tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port with nothing listening
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    daemon = SubprocessDaemon.for_provider(
        emulator, provider, tmp_path, tmp_path / "daemon.log", env={"AWS_ENDPOINT_URL_SQS": dead}
    )
    try:
        daemon.start()
        result = wait_for(lambda: (r := run_check(tmp_path)).returncode == 1 and r, 40, "check to report the failure")
        assert "the last receive failed" in result.stderr
        assert daemon.proc.poll() is None, "the daemon must keep retrying, not exit"
        # what an instance reports to its Auto Scaling group: the outage is not this machine's fault
        local = run_check(tmp_path, 30, "--local-faults-only")
        assert local.returncode == 0 and "not a local fault" in local.stdout, local.stdout + local.stderr
    finally:
        daemon.stop()


def _config(path: Path, provider: Provider, state_dir: Path) -> Path:
    path.write_text(
        f'queue-url = "{provider.queue_url}"\ntopic-arn = ["{provider.topic_arn}"]\n'
        f'state = "sqlite://{state_dir}/state.db"\n'
    )
    return path


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cfn_provider", "check", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def test_check_reports_on_the_daemon_its_config_names_among_several(emulator: Emulator, tmp_path: Path) -> None:
    """Two daemons (two providers' queues) keep their state in one directory, one of them unable to
    reach its queue: `check --config` reads each one's own health, and says which daemon it read."""
    good, bad = Provider.create(emulator), Provider.create(emulator)
    configs = {p.name: _config(tmp_path / f"{p.name}.toml", p, tmp_path) for p in (good, bad)}
    with socket.socket() as closed:  # a port with nothing listening
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    base = [
        sys.executable,
        "-m",
        "cfn_provider",
        "run",
        "--no-verify-signatures",
        "--wait-seconds",
        "1",
        "--max-backoff",
        "1",
        "--log-format",
        "json",
        "--handler",
        "Custom::Echo",
    ]
    env = {**os.environ, **emulator.env()}
    daemons = [
        SubprocessDaemon([*base, "--config", str(configs[good.name])], env, tmp_path / "good.log"),
        SubprocessDaemon(
            [*base, "--config", str(configs[bad.name])], {**env, "AWS_ENDPOINT_URL_SQS": dead}, tmp_path / "bad.log"
        ),
    ]
    try:
        for daemon in daemons:
            daemon.start()
        # (a daemon whose first receive has not returned yet is "starting", also exit 0)
        ok = wait_for(
            lambda: (r := _check("--config", str(configs[good.name]))).stdout.startswith("ok ") and r,
            30,
            "the good daemon's first receive",
        )
        assert ok.stdout.startswith(f"ok (pid {daemons[0].proc.pid}): last receive ")
        assert f"daemon: sqs {good.queue_url} (health file {tmp_path}/health-{good.name}-" in ok.stdout
        failed = wait_for(
            lambda: (
                (r := _check("--config", str(configs[bad.name]))).returncode == 1
                and "the last receive failed" in r.stderr
                and r
            ),
            40,
            "the bad daemon's failure",
        )
        assert f"the last receive failed (pid {daemons[1].proc.pid})" in failed.stderr
        assert f"daemon: sqs {bad.queue_url} (health file {tmp_path}/health-{bad.name}-" in failed.stderr
        # the same through the variables a container or systemd unit gives the daemon
        by_env = _check(env={"CFN_PROVIDER_CONFIG": str(configs[good.name])})
        assert by_env.returncode == 0 and good.queue_url in by_env.stdout
        by_url = _check("--queue-url", good.queue_url, "--state", f"sqlite://{tmp_path}/state.db")
        assert by_url.returncode == 0 and good.queue_url in by_url.stdout
        # named by nothing: check will not guess between two daemons
        guess = _check("--state", f"sqlite://{tmp_path}/state.db")
        assert guess.returncode == 1 and "2 daemons keep health files" in guess.stderr
        assert good.queue_url in guess.stderr and bad.queue_url in guess.stderr
    finally:
        for daemon in daemons:
            daemon.stop()

"""The health file, `check`'s verdicts, and systemd notifications over a socket the test binds."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from cfn_provider.ops import health


def _health(**overrides) -> health.Health:
    base = dict(pid=42, updated_at=time.time(), last_receive_ok=True, last_receive_at=time.time(),
                last_error=None, in_flight=0, handled=3)
    return health.Health(**{**base, **overrides})


def test_fresh_file_with_a_good_receive_is_healthy(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health.write(path, _health())
    ok, why = health.check(path, max_age=60)
    assert ok and "ok (pid 42)" in why


def test_stale_file_is_unhealthy(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health.write(path, _health(updated_at=time.time() - 300))
    ok, why = health.check(path, max_age=60)
    assert not ok and "stuck or gone" in why


def test_failed_receive_is_unhealthy_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health.write(path, _health(last_receive_ok=False, last_error="EndpointConnectionError: boom"))
    ok, why = health.check(path, max_age=60)
    assert not ok and "EndpointConnectionError: boom" in why


def test_missing_or_garbled_file_is_unhealthy(tmp_path: Path) -> None:
    ok, why = health.check(tmp_path / "nope.json", max_age=60)
    assert not ok and "no health file" in why
    (tmp_path / "bad.json").write_text("{not json")
    ok, why = health.check(tmp_path / "bad.json", max_age=60)
    assert not ok and "unreadable" in why


def test_starting_daemon_is_healthy_before_its_first_receive(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health.write(path, _health(last_receive_ok=None, last_receive_at=None))
    assert health.check(path, max_age=60)[0]


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def test_sd_notify_sends_a_datagram(notify_socket: socket.socket) -> None:
    assert health.sd_notify("READY=1")
    assert notify_socket.recv(64) == b"READY=1"


def test_sd_notify_is_a_noop_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert health.sd_notify("READY=1") is False


def test_watchdog_interval_is_half_of_watchdog_sec_for_this_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert health.watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert health.watchdog_interval() is None
    monkeypatch.delenv("WATCHDOG_USEC")
    assert health.watchdog_interval() is None

"""The health file, `check`'s verdicts, and systemd notifications over a socket the test binds."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from cfn_provider.config import daemon_id, health_path
from cfn_provider.ops import health


def _health(**overrides) -> health.Health:
    base = dict(
        pid=42,
        updated_at=time.time(),
        last_receive_ok=True,
        last_receive_at=time.time(),
        last_error=None,
        in_flight=0,
        handled=3,
    )
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


QUEUE_A = "https://sqs.eu-west-1.amazonaws.com/123456789012/shop-provider"
QUEUE_B = "https://sqs.eu-west-1.amazonaws.com/123456789012/billing-provider"


def test_each_daemon_has_its_own_health_file_named_after_its_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = f"sqlite://{tmp_path}/state.db"
    a, b = health_path(state, daemon=daemon_id("sqs", QUEUE_A)), health_path(state, daemon=daemon_id("sqs", QUEUE_B))
    assert a != b and a.parent == b.parent == tmp_path
    assert a.name.startswith("health-shop-provider-") and a.suffix == ".json"
    # the same queue in another account or region is another daemon
    other = daemon_id("sqs", QUEUE_A.replace("123456789012", "210987654321"))
    assert health_path(state, daemon=other) != a
    mns = daemon_id("mns", mns_endpoint="https://1.mns.cn-hangzhou.aliyuncs.com/", mns_queue="ros")
    assert mns == "mns https://1.mns.cn-hangzhou.aliyuncs.com/queues/ros"
    assert health_path(state, daemon=mns).name.startswith("health-ros-")
    assert health_path(state, str(tmp_path / "mine.json"), daemon_id("sqs", QUEUE_A)) == tmp_path / "mine.json"
    # not sqlite: the state directory, still one file per daemon
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    fleet = health_path("dynamodb://table", daemon=daemon_id("sqs", QUEUE_A))
    assert fleet.parent == tmp_path / "xdg" / "cfn-provider" and fleet.name == a.name


def test_check_says_which_daemon_it_read_and_refuses_another_daemons_file(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    health.write(path, _health(daemon=f"sqs {QUEUE_A}"))
    ok, why = health.check(path, max_age=60, expect=f"sqs {QUEUE_A}")
    assert ok and why.startswith("ok (pid 42)") and f"\ndaemon: sqs {QUEUE_A} (health file {path})" in why
    ok, why = health.check(path, max_age=60, expect=f"sqs {QUEUE_B}")
    assert not ok and f"written by sqs {QUEUE_A}, not by sqs {QUEUE_B}" in why


def test_locate_reads_the_named_daemon_else_the_only_file_and_never_guesses(tmp_path: Path) -> None:
    state = f"sqlite://{tmp_path}/state.db"
    assert health.locate(state)[0] is None and "no health file in" in health.locate(state)[1]
    a = health_path(state, daemon=f"sqs {QUEUE_A}")
    health.write(a, _health(daemon=f"sqs {QUEUE_A}"))
    assert health.locate(state) == (a, "")
    b = health_path(state, daemon=f"sqs {QUEUE_B}")
    health.write(b, _health(daemon=f"sqs {QUEUE_B}"))
    path, why = health.locate(state)
    assert path is None and "2 daemons keep health files" in why and QUEUE_A in why and QUEUE_B in why
    assert health.locate(state, daemon=f"sqs {QUEUE_B}") == (b, "")


def test_a_shared_health_file_left_by_an_earlier_build_is_read_only_when_it_is_the_only_one(tmp_path: Path) -> None:
    state = f"sqlite://{tmp_path}/state.db"
    legacy = tmp_path / "health.json"
    health.write(legacy, _health())  # no daemon field: an earlier build's
    path, _ = health.locate(state)
    assert path == legacy and "daemon: a daemon of an earlier build" in health.check(path, max_age=60)[1]
    a = health_path(state, daemon=f"sqs {QUEUE_A}")
    health.write(a, _health(daemon=f"sqs {QUEUE_A}"))  # the upgraded daemon, in the same directory
    assert health.locate(state) == (a, "")


def test_check_names_a_web_daemon_as_run_does_from_its_config_file_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A web daemon is named by where it listens (`web ADDRESS:PORT`, config.daemon_id): `check`
    with its config file (transport = "web") or its CFN_PROVIDER_* variables (a container's
    HEALTHCHECK) reads that daemon's health file, among others in the same directory."""
    from click.testing import CliRunner

    from cfn_provider.cli import main
    from cfn_provider.config import Settings
    from cfn_provider.web_settings import WebSettings

    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)
    state = f"sqlite://{tmp_path}/state.db"
    web = Settings(queue_url="", transport="web", state=state, web=WebSettings(address="127.0.0.1", port=8080))
    for daemon in (web.daemon, Settings(queue_url=QUEUE_A, state=state).daemon):
        health.write(health_path(state, daemon=daemon), _health(daemon=daemon))
    config = tmp_path / "web.toml"
    config.write_text(
        f'transport = "web"\nweb-address = "127.0.0.1"\nweb-port = 8080\nweb-allow-http = true\nstate = "{state}"\n'
    )

    def check(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["check", *args], env=env)
        return result.exit_code, result.output

    code, output = check("--config", str(config))
    assert code == 0 and "ok (pid 42)" in output and "daemon: web 127.0.0.1:8080" in output, output
    env = {"CFN_PROVIDER_TRANSPORT": "web", "CFN_PROVIDER_WEB_ADDRESS": "127.0.0.1", "CFN_PROVIDER_WEB_PORT": "8080"}
    code, output = check("--state", state, env=env)
    assert code == 0 and "daemon: web 127.0.0.1:8080" in output, output
    code, output = check("--config", str(config), "--web-port", "8081")  # another port: another daemon
    assert code == 1 and "no health file of web 127.0.0.1:8081" in output, output


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


def test_check_says_how_old_its_figures_are(tmp_path: Path) -> None:
    # the daemon rewrites its file every few seconds: "0 handled" right after two answers is the
    # figure of a few seconds ago, and check says so
    from click.testing import CliRunner

    from cfn_provider.cli import main

    path = tmp_path / "health.json"
    health.write(path, _health(updated_at=time.time() - 8, handled=0))
    done = CliRunner().invoke(main, ["check", "--health-file", str(path), "--state", f"sqlite://{tmp_path}/s.db"])
    assert done.exit_code == 0, done.output
    assert "0 handled (as of 8 s ago" in done.output


def test_local_faults_only_holds_a_failed_receive_against_nobody(tmp_path: Path) -> None:
    """An SQS or network outage fails every instance's receive at once: an instance's own health
    report (the group replaces what it marks unhealthy) must not count it, or the whole fleet is
    replaced mid-incident. Its own faults still count: a stale or missing file."""
    path = tmp_path / "health.json"
    health.write(path, _health(last_receive_ok=False, last_error="EndpointConnectionError: boom"))
    ok, why = health.check(path, max_age=60, local_only=True)
    assert ok and "not a local fault" in why and "EndpointConnectionError: boom" in why
    health.write(path, _health(updated_at=time.time() - 300, last_receive_ok=False))
    ok, why = health.check(path, max_age=60, local_only=True)
    assert not ok and "stuck or gone" in why
    ok, why = health.check(tmp_path / "nope.json", max_age=60, local_only=True)
    assert not ok and "no health file" in why

"""cfn_provider.loops: which event loop the daemon runs on, the fallback, and the `started` line naming it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cfn_provider import loops
from tests.support.cli import assert_not_started
from tests.support.daemons import REPO, stop_gracefully

pytest.importorskip("uvloop", reason="uvloop is a regular dependency on Linux CPython")


@pytest.fixture
def no_uvloop(monkeypatch):
    """uvloop as if it were not installed (import raises ImportError)."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


def test_auto_takes_uvloop_where_it_is_installed():
    assert loops.choose("auto") == "uvloop"
    assert loops.choose() == "uvloop"


def test_asyncio_never_tries_uvloop(no_uvloop):
    assert loops.choose("asyncio") == "asyncio"
    assert loops.factory("asyncio") is None


def test_auto_falls_back_to_asyncio_without_uvloop(no_uvloop):
    assert loops.choose("auto") == "asyncio"
    assert loops.run(_running_loop, "auto") == "asyncio"


def test_explicit_uvloop_fails_clearly_without_it(no_uvloop):
    with pytest.raises(loops.EventLoopError, match="uvloop is not installed.*--event-loop asyncio"):
        loops.choose("uvloop")
    ran = []
    with pytest.raises(loops.EventLoopError):
        loops.run(lambda: _note(ran), "uvloop")
    assert ran == []  # nothing ran on some other loop instead


def test_unknown_name_is_refused():
    with pytest.raises(loops.EventLoopError, match="unknown event loop 'trio'"):
        loops.choose("trio")


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_runs_on_the_chosen_loop(name):
    assert loops.run(_running_loop, name) == name


async def _running_loop() -> str:
    await asyncio.sleep(0)
    return loops.running()


async def _note(ran: list[int]) -> None:
    ran.append(1)


# ---- the daemon ----------------------------------------------------------------------------------


def _run_without_uvloop(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`cfn-provider run ...` in a child whose `import uvloop` fails (a module that raises, first on the path)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "uvloop.py").write_text("raise ImportError('uvloop blocked by the test')\n")
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("CFN_PROVIDER_")}
    child_env.update(PYTHONPATH=f"{blocker}{os.pathsep}{REPO}", **(env or {}))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cfn_provider",
            "run",
            "--queue-url",
            "http://127.0.0.1:9/000000000000/q",
            "--state",
            f"sqlite://{tmp_path}/state.db",
            "--no-verify-signatures",
            "--log-format",
            "json",
            *args,
        ],
        env=child_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "environment", "config file"])
def test_the_daemon_refuses_to_start_when_uvloop_is_asked_for_and_missing(tmp_path, how):
    args: tuple[str, ...] = ()
    env = None
    if how == "option":
        args = ("--event-loop", "uvloop")
    elif how == "environment":
        env = {"CFN_PROVIDER_EVENT_LOOP": "uvloop"}
    else:
        config = tmp_path / "provider.toml"
        config.write_text('event-loop = "uvloop"\n')
        args = ("--config", str(config))
    done = _run_without_uvloop(tmp_path, *args, env=env)
    assert_not_started(done, "uvloop is not installed", "--event-loop asyncio")
    assert '"event":"started"' not in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", [((), "uvloop"), (("--event-loop", "asyncio"), "asyncio")])
def test_the_started_line_names_the_running_loop(spawn, args, expected):
    daemon = spawn(f"loop-{expected}", *args)
    started = next(e for e in daemon.events() if e.get("event") == "started")
    assert started["event_loop"] == expected
    assert stop_gracefully(daemon) == 0


@pytest.mark.slow
def test_auto_falls_back_and_the_daemon_serves_on_asyncio(tmp_path, emulator, provider):
    """With uvloop unimportable, the default (auto) still starts, on asyncio's loop."""
    from tests.support.daemons import SubprocessDaemon

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "uvloop.py").write_text("raise ImportError('uvloop blocked by the test')\n")
    daemon = SubprocessDaemon.for_provider(
        emulator, provider, tmp_path, tmp_path / "daemon.log", env={"PYTHONPATH": f"{blocker}{os.pathsep}{REPO}"}
    )
    try:
        daemon.start()
        started = next(e for e in daemon.events() if e.get("event") == "started")
        assert started["event_loop"] == "asyncio"
        assert stop_gracefully(daemon) == 0
    finally:
        daemon.stop()

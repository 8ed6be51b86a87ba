"""systemd/cfn-provider.service: valid for systemd, and saying what the daemon relies on."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfn_provider.config import Settings

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "cfn-provider.service"
ENV_FILE = REPO / "systemd" / "cfn-provider.env"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive
    parser.read(UNIT)
    return parser


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: .ci/run installs Debian's systemd package"
    # verify insists that ExecStart's binary exists: point it at this checkout's cfn-provider
    binary = Path(sys.executable).with_name("cfn-provider")
    assert binary.exists()
    text = UNIT.read_text().replace("/opt/cfn-provider/bin/cfn-provider", str(binary))
    text = text.replace("/etc/cfn-provider/cfn-provider.env", str(ENV_FILE))
    copy = tmp_path / "cfn-provider.service"
    copy.write_text(text)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cfn-provider.service" not in result.stderr, result.stderr  # no warnings about our unit


def test_unit_is_notify_with_watchdog_and_restart() -> None:
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert int(service["WatchdogSec"]) > 0
    assert service["Restart"] == "on-failure"
    assert service["ExecStart"].endswith("cfn-provider run")


def test_stop_timeout_covers_the_last_poll_the_grace_period_and_the_settle_time() -> None:
    from cfn_provider.pipeline.poller import SETTLE_SECONDS

    service = unit()["Service"]
    defaults = Settings(queue_url="x")
    needed = defaults.wait_seconds + defaults.grace_period + SETTLE_SECONDS
    assert int(service["TimeoutStopSec"]) > needed


def test_unit_is_hardened_and_keeps_state_in_its_own_directory() -> None:
    service = unit()["Service"]
    assert service["DynamicUser"] == "yes" or service.get("User")
    assert service["StateDirectory"] == "cfn-provider"
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "CapabilityBoundingSet": ""}.items():
        assert service[key] == value, key
    assert service["EnvironmentFile"]


def test_environment_file_names_only_real_options() -> None:
    """Every CFN_PROVIDER_* variable in the sample env file is one `cfn-provider run` reads."""
    from cfn_provider.cli import run

    known = {p.envvar for p in run.params if getattr(p, "envvar", None)}
    names = [line.lstrip("#").split("=", 1)[0] for line in ENV_FILE.read_text().splitlines()
             if line.lstrip("#").startswith("CFN_PROVIDER_")]
    assert names, "the env file shows no settings"
    unknown = [n for n in names if n not in known]
    assert not unknown, f"not options of `cfn-provider run`: {unknown}"


def test_state_directory_is_the_default_under_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    from cfn_provider.config import default_state_url, health_path

    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/cfn-provider")
    assert default_state_url() == "sqlite:///var/lib/cfn-provider/state.db"
    assert health_path(default_state_url()) == Path("/var/lib/cfn-provider/health.json")

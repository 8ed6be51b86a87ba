"""systemd/cfn-provider.service: valid for systemd, and saying what the daemon relies on.

Also the drop-in systemd/random-secret-key.conf (RandomSecret's key through LoadCredential), the
hardening score (`systemd-analyze security --offline=true`, printed) and the demo running under
MemoryDenyWriteExecute (the kernel's own PR_SET_MDWE, which is what systemd applies when it can).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfn_provider.config import Settings

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "cfn-provider.service"
ENV_FILE = REPO / "systemd" / "cfn-provider.env"
DROP_IN = REPO / "systemd" / "random-secret-key.conf"
# `systemd-analyze security --offline=true` of the unit with its drop-in: 1.7 before round 2's hardening
EXPOSURE_LIMIT = 1.1


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive
    parser.read(UNIT)
    return parser


def _analyze() -> str:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: .ci/run installs Debian's systemd package"
    return analyze


def _installed_copy(tmp_path: Path, with_drop_in: bool = True) -> Path:
    """The unit (and its drop-in, in UNIT.d/) in tmp_path, ExecStart pointing at this checkout's
    cfn-provider: `verify` insists that the binary exists."""
    binary = Path(sys.executable).with_name("cfn-provider")
    assert binary.exists()
    text = UNIT.read_text().replace("/opt/cfn-provider/bin/cfn-provider", str(binary))
    text = text.replace("/etc/cfn-provider/cfn-provider.env", str(ENV_FILE))
    copy = tmp_path / "cfn-provider.service"
    copy.write_text(text)
    if with_drop_in:
        (tmp_path / "cfn-provider.service.d").mkdir()
        (tmp_path / "cfn-provider.service.d" / DROP_IN.name).write_text(DROP_IN.read_text())
    return copy


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    copy = _installed_copy(tmp_path)
    result = subprocess.run([_analyze(), "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cfn-provider.service" not in result.stderr, result.stderr  # no warnings about our unit
    assert DROP_IN.name not in result.stderr, result.stderr  # nor about the drop-in


def test_verify_reads_the_drop_in(tmp_path: Path) -> None:
    """verify looks in UNIT.d/ beside a unit given by path (so the test above checks the drop-in)."""
    copy = _installed_copy(tmp_path)
    (tmp_path / "cfn-provider.service.d" / DROP_IN.name).write_text(DROP_IN.read_text() + "NotADirective=1\n")
    result = subprocess.run([_analyze(), "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert "NotADirective" in result.stderr, result.stderr


def _exposure(unit_path: Path) -> float:
    result = subprocess.run(
        [_analyze(), "security", "--offline=true", "--no-pager", str(unit_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout[-2000:] + result.stderr
    return float(found[1])


def test_exposure_is_printed_and_not_worse_than_round_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exposure = _exposure(_installed_copy(tmp_path))
    with capsys.disabled():
        print(
            f"\nsystemd-analyze security --offline=true: exposure {exposure} for cfn-provider.service "
            f"with {DROP_IN.name} (limit {EXPOSURE_LIMIT}; 1.7 before round 2)"
        )
    assert exposure <= EXPOSURE_LIMIT


def test_unit_is_hardened_for_round_two() -> None:
    """The issue-23 additions. Each one the daemon must live with: see the tests below for
    MemoryDenyWriteExecute and the system call groups."""
    service = unit()["Service"]
    assert service["PrivateUsers"] == "yes"
    assert service["ProcSubset"] == "pid"
    assert service["PrivateMounts"] == "yes"
    assert service["MemoryDenyWriteExecute"] == "yes"
    assert service["SystemCallErrorNumber"] == "EPERM"  # a refused call fails, it does not kill the daemon
    assert int(service["LimitNOFILE"]) >= 4096
    assert service["MemoryMax"].endswith(("M", "G"))
    filters = [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith("SystemCallFilter=")]
    landlock = "landlock_create_ruleset landlock_add_rule landlock_restrict_self"  # lambda: functions' sandbox
    assert filters == ["@system-service", landlock, "~@privileged @resources"]


def test_the_daemon_makes_none_of_the_refused_system_calls() -> None:
    """~@privileged @resources: chown, setuid, setgroups, chroot, nice, setpriority, setrlimit,
    sched_setaffinity... The Python calls that reach them appear nowhere in daemon/ or handlers/,
    except one a drop-in allows again when it is wanted: a lambda: function's process lowering its
    own memory limit (memory_mb; systemd/function-memory.conf re-allows setrlimit and prlimit64,
    and without it the function's start fails saying so)."""
    refused = re.compile(
        r"\bos\.(chown|fchown|lchown|setuid|setgid|seteuid|setegid|setreuid|setregid|setgroups|chroot|"
        r"nice|setpriority|sched_setaffinity|sched_setscheduler|sched_setparam)\b|"
        r"\bresource\.(setrlimit|prlimit)\b|\bPopen\(.*\b(user|group|extra_groups)="
    )
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in ("daemon", "handlers")
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if refused.search(line)
    ]
    assert [o.split(":")[0] + ": " + o.split(": ", 1)[1] for o in offenders] == [
        "daemon/functions/runtime.py: resource.setrlimit(resource.RLIMIT_DATA, (size, size))"
    ]
    memory = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    memory.read(REPO / "systemd" / "function-memory.conf")
    assert memory["Service"]["SystemCallFilter"] == "setrlimit prlimit64"


def test_the_function_memory_drop_in_verifies(tmp_path: Path) -> None:
    copy = _installed_copy(tmp_path)
    drop_in = REPO / "systemd" / "function-memory.conf"
    (tmp_path / "cfn-provider.service.d" / drop_in.name).write_text(drop_in.read_text())
    result = subprocess.run([_analyze(), "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and drop_in.name not in result.stderr, result.stdout + result.stderr
    with_it = _exposure(copy)
    print(f"\nsystemd-analyze security --offline=true: exposure {with_it} with {drop_in.name} too")
    assert with_it <= EXPOSURE_LIMIT + 0.1


def test_random_secret_key_drop_in_uses_load_credential() -> None:
    from cfn_provider.handlers.random_secret import KEY_ENV

    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str
    parser.read(DROP_IN)
    service = parser["Service"]
    name, source = service["LoadCredential"].split(":", 1)
    assert source == "/etc/cfn-provider/random-secret-key" and name == "random-secret-key"
    assert service["Environment"] == f"{KEY_ENV}=%d/{name}"  # %d: the service's credentials directory


def test_the_demo_runs_under_memory_deny_write_execute() -> None:
    """PR_SET_MDWE (Linux 6.3+) refuses writable+executable memory to the process and what it
    execs, as MemoryDenyWriteExecute=yes does; the whole demo (moto included) runs under it."""
    wrapper = (
        "import ctypes, mmap, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN\n"
        "    sys.exit(f'no PR_SET_MDWE: errno {ctypes.get_errno()}')\n"
        "if sys.argv[1] == 'probe':\n"
        "    try:\n"
        "        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "    except PermissionError:\n"
        "        sys.exit(0)\n"
        "    sys.exit('a writable+executable mapping was allowed')\n"
        "os.execv(sys.argv[1], sys.argv[1:])\n"
    )
    probe = subprocess.run([sys.executable, "-c", wrapper, "probe"], capture_output=True, text=True, timeout=30)
    if "no PR_SET_MDWE" in probe.stderr:
        pytest.skip(f"this kernel ({os.uname().release}) has no PR_SET_MDWE (Linux 6.3+): {probe.stderr.strip()}")
    assert probe.returncode == 0, probe.stderr  # the mechanism bites
    binary = Path(sys.executable).with_name("cfn-provider")
    demo = subprocess.run(
        [sys.executable, "-c", wrapper, str(binary), "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Every request got the answer expected." in demo.stdout


def test_unit_is_notify_with_watchdog_and_restart() -> None:
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert int(service["WatchdogSec"]) > 0
    assert service["Restart"] == "on-failure"
    assert service["ExecStart"].endswith("cfn-provider run")


def test_stop_timeout_covers_the_last_poll_the_grace_period_and_the_settle_time() -> None:
    from cfn_provider.intake.poller import SETTLE_SECONDS

    service = unit()["Service"]
    defaults = Settings(queue_url="x")
    needed = defaults.wait_seconds + defaults.grace_period + SETTLE_SECONDS
    assert int(service["TimeoutStopSec"]) > needed


def test_unit_is_hardened_and_keeps_state_in_its_own_directory() -> None:
    service = unit()["Service"]
    assert service["DynamicUser"] == "yes" or service.get("User")
    assert service["StateDirectory"] == "cfn-provider"
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
    }.items():
        assert service[key] == value, key
    assert service["EnvironmentFile"]


def test_environment_file_names_only_real_options() -> None:
    """Every CFN_PROVIDER_* variable in the sample env file is one `cfn-provider run` reads."""
    from cfn_provider.cli import run

    known = {p.envvar for p in run.params if getattr(p, "envvar", None)}
    names = [
        line.lstrip("#").split("=", 1)[0]
        for line in ENV_FILE.read_text().splitlines()
        if line.lstrip("#").startswith("CFN_PROVIDER_")
    ]
    assert names, "the env file shows no settings"
    unknown = [n for n in names if n not in known]
    assert not unknown, f"not options of `cfn-provider run`: {unknown}"


def test_state_directory_is_the_default_under_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    from cfn_provider.config import default_state_url, health_path

    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/cfn-provider")
    assert default_state_url() == "sqlite:///var/lib/cfn-provider/state.db"
    assert health_path(default_state_url()) == Path("/var/lib/cfn-provider/health.json")

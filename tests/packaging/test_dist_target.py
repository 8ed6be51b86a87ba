"""tools/dist.py pins the wheelhouse's target (CPython 3.11 on Amazon Linux 2023's x86_64 glibc),
so a release built on another machine fails at build time, not at the instances' boot.

The target's pip arguments, and the check of every wheel's tags against the target, on wheel
files named as a laptop's pip would fetch them (the check reads names only)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dist_tool", REPO / "tools" / "dist.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["dist_tool"] = module
    spec.loader.exec_module(module)
    return module


def test_the_default_target_is_what_the_template_installs(dist: ModuleType) -> None:
    template = (REPO / "deploy" / "provider.yaml").read_text()
    assert f"python{dist.TARGET_PYTHON} -m venv /opt/cfn-provider" in template
    assert "al2023-ami-kernel-default-x86_64" in template and dist.TARGET_ARCH == "x86_64"
    platforms = dist.target_platforms("x86_64", 34)
    assert platforms[0] == "manylinux_2_34_x86_64" and "manylinux_2_17_x86_64" in platforms
    assert "manylinux_2_35_x86_64" not in platforms  # newer than the instances' glibc
    args = dist.target_args("3.11", platforms)
    assert args[args.index("--python-version") + 1] == "3.11"
    assert "cp311" in args and args.count("--platform") == len(platforms)


def test_wheels_for_another_machine_fail_the_build(dist: ModuleType, tmp_path: Path) -> None:
    platforms = dist.target_platforms("x86_64", 34)
    good = [
        "cfn_sns_provider-0.2.0-py3-none-any.whl",
        "aiohttp-3.9.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "cryptography-42.0.8-cp39-abi3-manylinux_2_28_x86_64.whl",
    ]
    bad = [
        "aiohttp-3.9.5-cp311-cp311-macosx_11_0_arm64.whl",  # built on a Mac
        "yarl-1.9.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",  # another Python
        "frozenlist-1.4.1-cp311-cp311-manylinux_2_39_x86_64.whl",  # a newer glibc than the instances'
        "multidict-6.0.5-cp311-cp311-manylinux_2_17_aarch64.whl",  # another machine
    ]
    for name in good + bad:
        (tmp_path / name).write_bytes(b"")
    assert dist.incompatible_wheels(tmp_path, "3.11", platforms) == sorted(bad)


def test_the_smoke_test_runs_only_on_the_target(dist: ModuleType) -> None:
    assert not dist.builds_here("2.7", dist.target_platforms("x86_64", 34))
    assert not dist.builds_here(f"{sys.version_info.major}.{sys.version_info.minor}", ["win_amd64"])

"""`make dist` for tests: tools/dist.py run with its own pinned tools (build, twine) in a scratch
virtualenv, so the test environment needs neither; the release lands in a folder of the test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str | Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO
    )


def make_dist(root: Path, *extra: str | Path) -> tuple[Path, subprocess.CompletedProcess]:
    """Run tools/dist.py with `extra` arguments into root/dist; (that folder, the run)."""
    tools = root / "dist-tools"
    made = _run(sys.executable, "-m", "venv", tools)
    assert made.returncode == 0, made.stderr
    pip = _run(
        tools / "bin" / "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "-c",
        REPO / "constraints.txt",
        "build",
        "twine",
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    out = root / "dist"
    result = _run(tools / "bin" / "python", REPO / "tools" / "dist.py", "--out", out, *extra)
    return out, result

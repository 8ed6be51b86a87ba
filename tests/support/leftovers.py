"""Processes the tests started that outlive them (Linux /proc): at the end of a run, anything still
running whose command line or working folder is under the run's temporary folder (every test's
tmp_path is there: stack emulators, daemons, dynalite, virtualenvs' commands) is a leak. The run's
controller waits a little for them to go, then stops them and fails the run, naming each one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def under(folder: Path) -> list[tuple[int, str]]:
    """(pid, command line) of each live process (not a zombie) whose command line or folder is under `folder`."""
    root = str(folder.resolve())
    mine = {os.getpid(), os.getppid()}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cwd = os.readlink(proc / "cwd")
            zombie = "\nState:\tZ" in (proc / "status").read_text()
        except OSError:
            continue
        if not zombie and args and (root in args or cwd == root or cwd.startswith(root + "/")):
            found.append((int(proc.name), args))
    return sorted(found)


def reap(folder: Path, grace: float = 10.0) -> list[tuple[int, str]]:
    """The processes under `folder` still running after `grace` seconds; each is then sent SIGKILL."""
    deadline = time.monotonic() + grace
    left = under(folder)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = under(folder)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left

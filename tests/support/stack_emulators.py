"""The emulator processes `simulate` started for stacks under a folder (Linux /proc): to check that
one is running or gone, and to stop those a test left behind (one that failed before its
`simulate delete`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

MODULE = b"cfn_provider.local.simulate.stack_emulator"


def stack_emulator_pids(folder: Path) -> list[int]:
    """Running (not exited, not zombie) stack emulators whose state file is under `folder`."""
    under = str(folder.resolve()).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            status = (proc / "status").read_text()
        except OSError:
            continue
        if MODULE in args and any(a.startswith(under) for a in args) and "\nState:\tZ" not in status:
            pids.append(int(proc.name))
    return sorted(pids)


def stop_stack_emulators(folder: Path) -> None:
    for pid in stack_emulator_pids(folder):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

"""Stop the emulator processes `simulate` left for stacks under a folder (a test that failed before
its `simulate delete`), by the pid each state file records, only when that pid is such a process."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path


def _is_stack_emulator(pid: int) -> bool:
    """A running (not exited, not a zombie) stack emulator process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return b"cfn_provider.local.simulate.stackemulator" in cmdline and "\nState:\tZ" not in status


def stack_emulator_pids(folder: Path) -> list[int]:
    pids = []
    for state in folder.rglob(".cfn-simulate/*.json"):
        try:
            pid = (json.loads(state.read_text()).get("Emulator") or {}).get("Pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and _is_stack_emulator(pid):
            pids.append(pid)
    return pids


def stop_stack_emulators(folder: Path) -> None:
    for pid in stack_emulator_pids(folder):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

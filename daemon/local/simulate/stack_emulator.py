"""The embedded emulator of one simulated stack: moto's server in a process of its own, started by
the stack's first operation and used again by the next ones, so a Delete finds what the Create
made (and what a seed script put there first).

The process listens on 127.0.0.1 only, on a port the OS picks; its pid and endpoint are kept in the
stack's state file (`Emulator`). It runs in a session of its own (Ctrl-C on simulate does not stop
it) and stops by itself when its stack's state file goes away (a DELETE_COMPLETE removes it), when
the state file names another emulator (after having named this one), or when nothing has touched
the stack for IDLE_LIMIT seconds. When it is gone (a reboot), the next operation starts a fresh one and says that what
earlier operations made in it is lost. Its own log: STATE_FILE with the suffix `.emulator.log`
(removed with the state file when the stack is deleted).

`python -m cfn_provider.local.simulate.stack_emulator STATE_FILE` is the process itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

IDLE_LIMIT = 24 * 3600.0  # seconds without a write to the state file
WATCH_EVERY = 0.5  # seconds between looks at the state file
FIRST_STATE_WAIT = 120.0  # seconds the state file may take to appear
START_TIMEOUT = 60.0  # seconds for the process to say where it listens


class StackEmulator:
    """A stack's emulator process, with emulator.Emulator's interface (endpoint, env, client, stop)."""

    def __init__(self, pid: int, endpoint: str, reused: bool):
        self.pid, self.endpoint, self.reused = pid, endpoint, reused

    @property
    def record(self) -> dict[str, Any]:
        return {"Pid": self.pid, "Endpoint": self.endpoint}

    def env(self) -> dict[str, str]:
        from ..emulator import REGION, TEST_CREDENTIALS

        return {**TEST_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION}

    def client(self, service: str) -> Any:
        from ..emulator import client_for

        return client_for(self.endpoint, service)

    def stop(self) -> None:
        """Nothing: the process outlives this invocation, for the stack's next operation."""

    def discard(self) -> None:
        """Stop the process now: the stack it was started for never came to be."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGTERM)

    @classmethod
    def attach(cls, record: Any, state_path: Path) -> StackEmulator:
        """The emulator `record` names when it still answers; otherwise a new one for `state_path`."""
        if isinstance(record, dict) and isinstance(record.get("Pid"), int) and isinstance(record.get("Endpoint"), str):
            if _alive(record["Pid"], record["Endpoint"]):
                return cls(record["Pid"], record["Endpoint"], reused=True)
        return start(state_path)


def _alive(pid: int, endpoint: str) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not endpoint.startswith("http://127.0.0.1:"):
        return False  # never probe anything else a state file might name
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=3):  # noqa: S310 - loopback only
            return True
    except urllib.error.HTTPError:
        return True  # it answers: HTTP is up
    except (OSError, ValueError):
        return False


def start(state_path: Path) -> StackEmulator:
    """Start the process for the stack kept in `state_path`; it prints its endpoint, then is left running."""
    state_path = state_path.resolve()
    state_path.parent.mkdir(parents=True, exist_ok=True)
    log_path = state_path.with_suffix(".emulator.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(state_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert proc.stdout is not None
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT)
    endpoint = line[0].decode().strip() if line else ""
    proc.stdout.close()
    if not endpoint.startswith("http://127.0.0.1:"):
        with contextlib.suppress(OSError):
            proc.kill()
        from .state import SimulateError

        raise SimulateError(f"the embedded AWS emulator did not start (see {log_path})")
    return StackEmulator(proc.pid, endpoint, reused=False)


def _watch(state_path: Path) -> None:
    """Until the state file, having named this process, is gone or names another emulator; or it has
    not been written for IDLE_LIMIT; or it has not named this process within FIRST_STATE_WAIT."""
    started, named = time.monotonic(), False
    while True:
        time.sleep(WATCH_EVERY)
        waited_too_long = not named and time.monotonic() - started > FIRST_STATE_WAIT
        try:
            modified = state_path.stat().st_mtime
            doc = json.loads(state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if named or waited_too_long:
                return
            continue
        except (OSError, ValueError):
            continue  # being replaced: look again
        pid = (doc.get("Emulator") or {}).get("Pid") if isinstance(doc, dict) else None
        if pid == os.getpid():
            named = True
        elif named or waited_too_long:
            return  # another emulator took over (or this one was never recorded)
        if time.time() - modified > IDLE_LIMIT:
            return


def main() -> None:
    from ..emulator import Emulator

    state_path = Path(sys.argv[1])
    emulator = Emulator()
    print(emulator.endpoint, flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # simulate closed its end of the pipe
    try:
        _watch(state_path)
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()

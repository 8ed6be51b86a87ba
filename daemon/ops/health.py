"""Liveness, as seen from outside the process.

The running daemon rewrites a small JSON file from its event loop (so a wedged loop stops
refreshing it) and, under systemd, sends READY/WATCHDOG/STOPPING notifications.
`cfn-provider check` reads the file: exit 0 when it is fresh and the last receive worked.
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Health:
    pid: int
    updated_at: float
    last_receive_ok: bool | None  # None until the first receive returns
    last_receive_at: float | None
    last_error: str | None
    in_flight: int
    handled: int


def write(path: Path, health: Health) -> None:
    """Atomically replace the health file (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(health)))
    os.replace(tmp, path)


def check(path: Path, max_age: float, now: float | None = None) -> tuple[bool, str]:
    """(healthy, why) for the health file at `path`."""
    now = time.time() if now is None else now
    try:
        doc = json.loads(path.read_text())
        health = Health(**doc)
    except FileNotFoundError:
        return False, f"no health file at {path}: is the daemon running with this state directory?"
    except (ValueError, TypeError) as exc:
        return False, f"health file {path} is unreadable: {exc}"
    age = now - health.updated_at
    if age > max_age:
        return False, f"health file is {age:.0f} s old (limit {max_age:.0f} s): the daemon (pid {health.pid}) is stuck or gone"
    if health.last_receive_ok is False:
        return False, f"the last receive failed: {health.last_error}"
    if health.last_receive_ok is None:
        return True, f"starting (pid {health.pid}): no receive has completed yet"
    return True, f"ok (pid {health.pid}): last receive {now - (health.last_receive_at or now):.0f} s ago, " \
                 f"{health.in_flight} in flight, {health.handled} handled"


def sd_notify(state: str) -> bool:
    """Send `state` (e.g. "READY=1") to systemd's NOTIFY_SOCKET; a no-op outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Half of systemd's WatchdogSec for this process, or None when no watchdog is set."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None

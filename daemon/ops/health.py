"""Liveness, as seen from outside the process.

The running daemon rewrites a small JSON file from its event loop (so a wedged loop stops
refreshing it) and, under systemd, sends READY/WATCHDOG/STOPPING notifications.
`cfn-provider check` reads the file: exit 0 when it is fresh and the last receive worked (with
`local_only`, when it is fresh: a failing receive is a fault outside this machine, which replacing
the machine does not cure; an instance's own health report uses that, docs/operating.md). There
is one file per daemon (cfn_provider.config.health_path, named after the daemon's queue), and each
says which daemon wrote it, so `check` reports on the daemon it was asked about and says which.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..config import health_files, health_path


@dataclass
class Health:
    pid: int
    updated_at: float
    last_receive_ok: bool | None  # None until the first receive returns
    last_receive_at: float | None
    last_error: str | None
    in_flight: int
    handled: int
    daemon: str | None = None  # config.daemon_id of the daemon writing it (None in earlier builds' files)
    refused: list[dict[str, Any]] | None = None  # the last few messages not run: {at, event, reason}


def write(path: Path, health: Health) -> None:
    """Atomically replace the health file (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(health)))
    os.replace(tmp, path)


def locate(state: str, explicit: str | None = None, daemon: str | None = None) -> tuple[Path | None, str]:
    """The health file `check` should read, or None and why not: the named daemon's (or the given
    file); with neither, the only health file in the state directory, if there is exactly one."""
    if explicit or daemon:
        return health_path(state, explicit, daemon), ""
    found = health_files(state)
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, (
            f"no health file in {health_path(state).parent}: no daemon has run with this state "
            "directory (give check the daemon's --config, --queue-url or --state)"
        )
    listing = "".join(f"\n  {_daemon_of(f)}  ({f})" for f in found)
    return None, (
        f"{len(found)} daemons keep health files in {found[0].parent}; name one with --config or "
        f"--queue-url (as given to run):{listing}"
    )


def _daemon_of(path: Path) -> str:
    try:
        return str(json.loads(path.read_text()).get("daemon") or "a daemon of an earlier build")
    except (OSError, ValueError, AttributeError):
        return "unreadable"


def check(
    path: Path, max_age: float, now: float | None = None, expect: str | None = None, local_only: bool = False
) -> tuple[bool, str]:
    """(healthy, why) for the health file at `path`; `expect`: the daemon (config.daemon_id) asked
    about, which must be the one that wrote the file. `why` ends with the daemon read, and where.
    `local_only`: only this machine's faults count (no file, a stale file: the event loop is wedged
    or the process gone); a failed receive is then reported, not held against the instance."""
    now = time.time() if now is None else now
    try:
        doc = json.loads(path.read_text())
        known = {f.name for f in fields(Health)}
        health = Health(**{k: v for k, v in doc.items() if k in known})
    except FileNotFoundError:
        who = f" of {expect}" if expect else ""
        return False, f"no health file{who} at {path}: is the daemon running, with this state directory?"
    except (ValueError, TypeError, AttributeError) as exc:
        return False, f"health file {path} is unreadable: {exc}"
    daemon = health.daemon or "a daemon of an earlier build"
    where = f"\ndaemon: {daemon} (health file {path})"
    if expect and health.daemon and health.daemon != expect:
        return False, f"health file {path} is written by {health.daemon}, not by {expect}: two daemons share it"
    age = now - health.updated_at
    if age > max_age:
        return (
            False,
            f"health file is {age:.0f} s old (limit {max_age:.0f} s): the daemon (pid {health.pid}) is stuck or gone"
            + where,
        )
    if health.last_receive_ok is False:
        if local_only:
            return True, (
                f"degraded, not a local fault (pid {health.pid}): the last receive failed: {health.last_error}" + where
            )
        return False, f"the last receive failed (pid {health.pid}): {health.last_error}" + where
    if health.last_receive_ok is None:
        return True, f"starting (pid {health.pid}): no receive has completed yet" + where
    return True, (
        f"ok (pid {health.pid}): last receive {now - (health.last_receive_at or now):.0f} s ago, "
        f"{health.in_flight} in flight, {health.handled} handled (as of {max(0.0, age):.0f} s ago: the "
        "daemon rewrites its health file every few seconds)" + where
    )


def refusals_since(path: Path, since: float) -> list[dict[str, Any]]:
    """The refusals (rejected, security, deferred) the daemon writing `path` recorded at or after
    `since`; none when the file is missing or unreadable."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    found = doc.get("refused") if isinstance(doc, dict) else None
    return [
        r for r in found or [] if isinstance(r, dict) and isinstance(r.get("at"), (int, float)) and r["at"] >= since
    ]


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

"""What a function's process may reach on the filesystem (its Landlock sandbox), and what is in force.

Each function process confines itself before it loads the function (cfn_provider.functions.confine,
run by cfn_provider.functions.runtime) to the paths `paths_for` gives it:

- read and execute: the system (/usr, /lib*, /bin, /sbin, /etc), /sys, the Python install and its
  site-packages, the daemon's own package, the loopback CA bundles, the function's own folder, and
  of /proc its own /proc/PID (/proc/self) and the entries that are no process's (cpuinfo,
  meminfo, sys, ...; not kcore, kmsg, kallsyms, keys): never another process's environ, fd, mem;
- read and write: /tmp, /var/tmp, /dev/shm; devices under /dev (read, write, ioctl);
- nothing else: not the state directory, not systemd's credentials directory ($CREDENTIALS_DIRECTORY),
  not another function's folder, not a home folder, /srv, /var/lib, /run.

Where a folder it may reach holds one it may not (the state directory under /tmp, another function
under its own folder), that folder is not given whole: each of its entries is, except the ones
on the way to what is kept out (and symlinks, which are followed only to where they lead). When
that folder is the function's own, the names in it and beneath it may still be listed (import
lists the folders on its path), not read. So a
daemon whose state lives under /tmp gives its functions the other entries of /tmp, but not /tmp
itself: a function then cannot create files directly in /tmp.

`--function-sandbox` (cfn_provider.config.Settings.function_sandbox): `best-effort` (the default)
sandboxes where the kernel has Landlock and says at start what is in force; `required` refuses
to start without it; `off` gives functions the filesystem of the daemon's user (they stay non-dumpable).
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import Literal, TypedDict, get_args

from ..logs import get_logger
from . import confine

Mode = Literal["best-effort", "required", "off"]
MODES: tuple[Mode, ...] = get_args(Mode)
SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/sys")
PROC_KEPT_OUT = {"kcore", "kmsg", "kpagecount", "kpageflags", "kpagecgroup", "kallsyms", "keys", "key-users"}
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
DEVICES = ("/dev",)
MAX_RULES = 2000  # paths of one sandbox (a folder split around what is kept out can have many entries)
# the daemon's own code (the runtime's files are there), as the path finds it and where its files are
PACKAGE = (str(Path(__file__).parent.parent), str(Path(__file__).resolve().parent.parent))

log = get_logger("lambda")


class Paths(TypedDict):
    """The set-up's `sandbox` (cfn_provider.functions.process.Setup)."""

    read: list[str]
    write: list[str]
    devices: list[str]
    listed: list[str]  # folders split around a kept-out one: their entries' names may be listed, no more
    required: bool


class _State:
    mode: Mode = "best-effort"
    kept_out: set[str] = set()  # the state and credentials directories, every function's folder
    extra_read: set[str] = set()  # the loopback CA bundles' folder


def configure(mode: Mode, kept_out: list[str | Path]) -> None:
    """The daemon's choice (at start): the mode, and the folders no function may reach."""
    _State.mode = mode
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    for path in [*kept_out, *([credentials] if credentials else [])]:
        keep_out(path)


def mode() -> Mode:
    return _State.mode


def keep_out(path: str | Path) -> None:
    """A folder no function may reach (a function's folder: no other function may)."""
    _State.kept_out.add(os.path.realpath(path))


def allow_read(path: str | Path) -> None:
    """A folder every function may read (the loopback CA bundles)."""
    _State.extra_read.add(os.path.realpath(path))


def in_force() -> dict[str, object]:
    """What protects functions on this machine, for the start-up log line; StartupError-worthy
    reason in `missing` when `required` cannot be met."""
    abi = confine.landlock_abi()
    doc: dict[str, object] = {"mode": _State.mode, "nondumpable": True}
    if _State.mode == "off":
        doc["landlock"] = "off (--function-sandbox off)"
    elif abi:
        doc["landlock"] = f"ABI {abi}" + (" with signal and abstract-socket scoping" if abi >= 6 else "")
    else:
        doc["landlock"] = "unavailable (the kernel has no Landlock, or a seccomp filter refuses it)"
    return doc


def paths_for(code: str) -> Paths | None:
    """The sandbox of a function whose folder is `code` (None when the mode is off)."""
    if _State.mode == "off":
        return None
    own = os.path.realpath(code)
    # what contains the function's own folder cannot be kept from it; what is gone needs no keeping
    kept = {p for p in _State.kept_out if p != own and not _under(own, p) and os.path.lexists(p)}
    budget, listed, unlisted = [MAX_RULES], list[str](), list[str]()  # only its own folder's splits are listed
    read = [*_fixed(), *_split(own, kept, budget, listed), *_proc()]
    devices = [p for root in DEVICES for p in _split(root, kept, budget, unlisted)]
    for root in (*SYSTEM, *sorted(_State.extra_read)):
        read += _split(root, kept, budget, unlisted)
    write = [p for root in SCRATCH for p in _split(root, kept, budget, unlisted)]  # last: /tmp splits the most
    required = _State.mode == "required"
    return {"read": read, "write": write, "devices": devices, "listed": listed, "required": required}


def _fixed() -> list[str]:
    """The interpreter, its standard library, its site-packages and the daemon's package: given whole."""
    found = {os.path.dirname(os.path.realpath(sys.executable)), *PACKAGE}
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()):
        found.update({path, os.path.realpath(path)})
    return sorted(found)


def _proc() -> list[str]:
    """/proc's entries that are no process's (cpuinfo, meminfo, sys, ...; not the kernel's memory):
    the runtime adds its own /proc/PID, so no other process's files (environ, fd, mem) are reached."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [
        f"/proc/{n}"
        for n in sorted(names)
        if not n.isdigit() and n not in PROC_KEPT_OUT and not os.path.islink(f"/proc/{n}")
    ]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _split(root: str, kept: set[str], budget: list[int], listed: list[str]) -> list[str]:
    """`root` whole, or (when it holds a kept-out folder) its entries but those on the way to one
    (`root` is then `listed`: Python's import lists the folders on its path)."""
    real = os.path.realpath(root)
    if not os.path.exists(real) or any(_under(real, k) for k in kept):
        return []
    if not any(_under(k, real) for k in kept):
        budget[0] -= 1
        return [real] if budget[0] >= 0 else []
    out: list[str] = []
    try:
        entries = sorted(os.scandir(real), key=lambda e: e.name)
    except OSError:
        return []
    listed.append(real)
    for entry in entries:
        if entry.is_symlink():
            continue  # reached, if at all, where it leads
        out += _split(entry.path, kept, budget, listed)
    return out

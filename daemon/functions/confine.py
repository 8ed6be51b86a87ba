"""A process confining itself, without privileges: non-dumpable, and Landlock's filesystem sandbox.

Standard library only (ctypes): the daemon imports it (`nondumpable` at start, `landlock_abi`
to say what is in force), and a function's runtime (cfn_provider.functions.runtime) executes
this file by its path, after reading its set-up and before loading the function, to call
`confine` with the paths the daemon chose (cfn_provider.functions.sandbox).

- Non-dumpable (prctl PR_SET_DUMPABLE 0): the kernel makes the process's /proc files (environ,
  mem, fd, maps, cwd, ...) root's, so another process of the same user cannot read them nor
  ptrace it. execve makes a process dumpable again, so each process does it for itself.
- Landlock (Linux 5.13+, where enabled): after prctl PR_SET_NO_NEW_PRIVS, the process and
  everything it starts may open files only beneath the folders allowed, with the rights allowed
  (read and execute; read and write). From ABI 6 (Linux 6.12) it may also not signal nor reach
  the abstract unix sockets of processes outside its sandbox. (Reading another process's /proc
  files is not refused by Landlock itself on every kernel: the sandbox gives no /proc/PID but its own.)

Landlock's system calls are 444, 445 and 446 on every Linux architecture (the unified table).
"""

import ctypes
import os

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
MAKES = sum(1 << n for n in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a file (not a folder) may hold
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ | WRITE_FILE | MAKES | REFER | TRUNCATE
DEVICES = READ | WRITE_FILE | TRUNCATE | IOCTL_DEV


class Unconfined(Exception):
    """The kernel refused a step of the sandbox (the message says which, and its errno)."""


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _Ruleset(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def _libc() -> "ctypes.CDLL":
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise Unconfined(f"{what}: {os.strerror(errno)} (errno {errno})")
    return result


def nondumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process; whether the kernel took it."""
    try:
        return int(_libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (an old kernel, not enabled, not Linux)."""
    try:
        version = _libc().syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def handled(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows (each is refused unless a rule allows it)."""
    rights = READ | WRITE_FILE | MAKES
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def confine(read: "list[str]", write: "list[str]", devices: "list[str]", listed: "list[str]") -> int:
    """Landlock this process (and what it starts) to `read` (read, execute), `write` (read, write,
    create, remove), `devices` (read, write, ioctl) and `listed` (list folders) beneath those
    paths; the ABI in force.
    Unconfined when the kernel has no Landlock or refuses a step; a path that is gone is skipped."""
    abi = landlock_abi()
    if abi < 1:
        raise Unconfined("the kernel has no Landlock (Linux 5.13+ with landlock among its LSMs)")
    libc, rights = _libc(), handled(abi)
    attr = _Ruleset(rights, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), size, 0), "landlock_create_ruleset")
    try:
        for paths, access in ((read, READ), (write, WRITE), (devices, DEVICES), (listed, READ_DIR)):
            for path in paths:
                _allow(libc, ruleset, path, access & rights)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(libc.syscall(SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _allow(libc: "ctypes.CDLL", ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= FILE_RIGHTS
        beneath = _PathBeneath(access, fd)
        _check(
            libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(beneath), 0),
            f"landlock_add_rule {path}",
        )
    finally:
        os.close(fd)

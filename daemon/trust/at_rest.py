"""State at rest: the files holding stored answers or keys are the daemon's alone.

The SQLite state file keeps every response body until it is sent (and a NoEcho one for the replay
window, see daemon/stores/sqlite.py), so it can hold secrets; its -wal, -shm and -journal siblings hold the
same pages. At start, before SQLite opens them, each that exists is checked:

- owned by this process's user and open to group or others: **fixed** (group/other bits removed)
  and logged as `state.permissions_fixed`. The daemon creates these files 0600 and its directory
  0700 itself, so a looser one is a leftover (an older version, a restored backup, a copy made under
  another umask): removing access nobody should have is what the operator would do, and refusing
  would turn that leftover into an outage. The exposure that already happened is in the log line.
- owned by someone else and open to group or others: **refused** (StateExposed, exit 2 naming the
  file, its mode and the command that fixes it): the daemon cannot chmod it, and serving on would
  keep secrets readable.

The state directory is checked the same way when it is the daemon's own (the default one:
$STATE_DIRECTORY, else $XDG_STATE_HOME/cfn-provider, else ~/.local/state/cfn-provider). A
directory named by `--state sqlite:///elsewhere/x.db` is the operator's and is left alone (the
daemon will not chmod /var/lib or a home directory): the 0600 files inside it are what protect
the data there.

Key files the handlers read (CFN_PROVIDER_SECRET_KEY_FILE) follow the file rule, except that a key
owned by another user (root) may be group-readable: root:cfn-provider 0440 is the usual way to
hand a key to a service account. World access is refused there too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..errors import StartupError
from ..logs import get_logger

log = get_logger("atrest")
SQLITE_SIBLINGS = ("", "-wal", "-shm", "-journal")
KEY_FILE_VARIABLES = ("CFN_PROVIDER_SECRET_KEY_FILE",)  # handlers/random_secret.py's server key


class StateExposed(StartupError, ValueError):
    """A state or key file is open to other users and the daemon cannot fix it."""


def secure(path: Path, what: str, euid: int | None = None, group_ok_if_foreign: bool = False) -> None:
    """Fix or refuse `path` (see the module docstring); nothing when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    loose = mode & 0o077
    if not loose:
        return
    euid = os.geteuid() if euid is None else euid
    if st.st_uid == euid:
        os.chmod(path, mode & ~0o077)
        log.warning(
            "state.permissions_fixed",
            path=str(path),
            what=what,
            was=f"{mode:04o}",
            now=f"{mode & ~0o077:04o}",
            detail="it was open to group/others; anything stored in it may have been read",
        )
        return
    if group_ok_if_foreign and not mode & 0o007:
        return
    who = "others" if group_ok_if_foreign else "group/others"
    raise StateExposed(
        f"{what} {path} is open to {who} (mode {mode:04o}) and owned by uid {st.st_uid}, not this process's "
        f"uid {euid}, so the daemon cannot fix it. As its owner run: "
        f"chmod {'o-rwx' if group_ok_if_foreign else 'go-rwx'} {path}  (or run the daemon as its owner)"
    )


def secure_sqlite(db: Path, state_dir: Path, euid: int | None = None) -> None:
    """The SQLite state file and its siblings; their directory too when it is `state_dir`."""
    if _same(db.parent, state_dir):
        secure(db.parent, "state directory", euid)
    for suffix in SQLITE_SIBLINGS:
        secure(Path(f"{db}{suffix}"), "state file", euid)


def secure_key_files(environ: Mapping[str, str] = os.environ, euid: int | None = None) -> None:
    """Every key file a handler is configured to read."""
    for name in KEY_FILE_VARIABLES:
        if environ.get(name):
            secure(Path(environ[name]), f"key file ({name})", euid, group_ok_if_foreign=True)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False

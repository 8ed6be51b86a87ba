"""The daemon's part in isolating its functions: itself non-dumpable, the sandbox set from its settings, said once.

`isolate` runs when the service is made (before its router checks any function): the daemon makes
itself non-dumpable (its /proc files, environ among them, become root's: no function process of
the same user can read its settings, tokens or credentials) and tells cfn_provider.functions.sandbox
what no function may reach: the state directory (and the health file), the web listener's key and
token files, systemd's credentials directory. `say_in_force` logs, once at start, what protects
the functions on this machine, and refuses to start when the sandbox is required but missing.
"""

from __future__ import annotations

from pathlib import Path

from .config import Settings, default_state_dir, health_dir
from .errors import StartupError
from .functions import confine, sandbox
from .logs import get_logger

log = get_logger("lambda")


class SandboxUnavailable(StartupError):
    """--function-sandbox required, and this kernel (or a seccomp filter) gives no Landlock."""


def isolate(settings: Settings) -> None:
    confine.nondumpable()
    kept: list[str | Path] = [health_dir(settings.state), default_state_dir()]
    kept += [f for f in (settings.health_file, settings.web.key_file, settings.web.token_file) if f]
    sandbox.configure(settings.function_sandbox, kept)


def say_in_force() -> None:
    """The `function_sandbox` log line (a warning when functions are not sandboxed)."""
    doc = sandbox.in_force()
    landlocked = str(doc["landlock"]).startswith("ABI")
    if doc["mode"] == "required" and not landlocked:
        raise SandboxUnavailable(f"--function-sandbox required, but Landlock is {doc['landlock']}")
    if landlocked:
        log.info("function_sandbox", **doc)
    else:
        log.warning(
            "function_sandbox",
            **doc,
            detail="functions are non-dumpable but may read whatever the daemon's user may read",
        )

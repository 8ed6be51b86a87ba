"""Where handler modules are imported from: the one rule for `run`, `handlers` and `simulate`.

A `--handler TYPE=MODULE[:ATTR]` module is imported from the installed packages (and PYTHONPATH,
Python's own setting), or from a folder the operator names with `--handler-path DIR` (the config
file's `handler-path`, CFN_PROVIDER_HANDLER_PATH). Never from the working directory by accident:
a daemon that imports from wherever it was started can be made to run a module planted there
(a shared /tmp, a checkout, a container's WORKDIR) with the operator's credentials, and a stray
`resource.py` or `json.py` there would shadow the modules the daemon itself imports. `simulate`
follows the same rule; its default `--handler-path` is the current folder, because it runs the
author's own code on the author's machine, and it says so.

Handler folders go at the END of sys.path, so they never shadow the standard library, the daemon
or an installed package; and a top-level module that is both in a handler folder and installed
elsewhere is refused by name, rather than silently resolved to the installed one.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from ..errors import StartupError


class HandlerPathError(StartupError):
    """A handler folder does not exist, or a module cannot be imported under the rule (the message
    says how to fix it)."""


def add(folders: Iterable[str | Path]) -> tuple[str, ...]:
    """Append each folder (made absolute) to sys.path once; the absolute folders, in order."""
    added: list[str] = []
    for folder in folders:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise HandlerPathError(f"--handler-path {folder}: no such folder")
        text = str(path)
        if text not in added:
            added.append(text)
        if text not in sys.path:
            sys.path.append(text)
    if added:
        importlib.invalidate_caches()
    return tuple(added)


def import_module(name: str, folders: tuple[str, ...] = ()) -> ModuleType:
    """Import `name` under the rule; HandlerPathError naming the fix when it cannot be found or is ambiguous."""
    if folders:
        _refuse_ambiguous(name.split(".")[0], folders)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
            raise  # the handler module exists; something it imports does not
        raise HandlerPathError(not_found(name, folders)) from None


def _refuse_ambiguous(top: str, folders: tuple[str, ...]) -> None:
    """A top-level name in a handler folder that something else already answers to is refused."""
    mine = next((f for f in folders if importlib.machinery.PathFinder.find_spec(top, [f]) is not None), None)
    if mine is None:
        return
    loaded = sys.modules.get(top)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None) or "built in"
        where = None if origin != "built in" and Path(origin).resolve().is_relative_to(mine) else origin
    else:
        spec = importlib.machinery.PathFinder.find_spec(top, [p for p in sys.path if _resolved(p) not in folders])
        where = spec.origin if spec is not None else ("built in" if top in sys.builtin_module_names else None)
    if where is not None:
        raise HandlerPathError(
            f"module {top!r} is in the handler folder {mine} and also elsewhere on the path "
            f"({where}), which would be imported instead: rename yours, or leave the "
            f"folder out of --handler-path to serve the installed one"
        )


def _resolved(entry: str) -> str:
    try:
        return str(Path(entry or ".").resolve())
    except (OSError, RuntimeError):
        return entry


def not_found(name: str, folders: tuple[str, ...]) -> str:
    top = name.split(".")[0]
    searched = ", ".join(folders) if folders else "none given"
    text = (
        f"no module named {name!r}. Handler modules are imported from installed packages, PYTHONPATH and "
        f"the --handler-path folders ({searched})"
    )
    cwd = Path.cwd()
    if str(cwd) not in folders and ((cwd / f"{top}.py").is_file() or (cwd / top).is_dir()):
        text += (
            f"; {top} is in the current folder {cwd}, which is not searched unless named: "
            f"add --handler-path {cwd} (or handler-path in the config file)"
        )
    else:
        text += "; install its package, or name its folder with --handler-path DIR"
    return text

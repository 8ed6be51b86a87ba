"""The stale-install check of a developer's editable install: a module added since `make venv` says so.

`make venv` installs this checkout in setuptools' strict editable mode: a tree of links, one per
file, under build/__editable__.*, which the import system and type checkers both see as the
installed package. A module or package added to daemon/ or handlers/ after that has no link yet,
so importing it would fail with a bare "No module named ...". `watch()` (called by the package's
__init__ when it is such a link) puts a last-resort finder on sys.meta_path: it is asked only
about a `cfn_provider.*` name no other finder found, and when the checkout has that module it
raises an ImportError that says to run `make venv`. A normal install (a wheel, the container)
has no links and gets no finder.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import StartupError

HINT = "the editable install predates it: run `make venv` to rebuild the virtualenv's links"


class StaleInstall(StartupError, ModuleNotFoundError):
    """A module the source checkout has and the editable install does not link (yet)."""


def source_of(installed: Path) -> Path | None:
    """The checkout folder an installed package folder links to (from any of its links), if any."""
    for entry in sorted(installed.iterdir()):
        if entry.is_symlink():
            return entry.resolve().parent
    return None


def _is_source_module(folder: Path, name: str) -> bool:
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def missing(installed: Path) -> list[Path]:
    """Source modules and packages that the package installed at `installed` (a folder of links,
    with folders of links for its subpackages) does not link: what a `make venv` would add."""
    out = []
    for folder in sorted({installed, *(p for p in installed.rglob("*") if p.is_dir() and not p.is_symlink())}):
        source = source_of(folder)
        if source is None:
            continue
        for path in sorted(source.iterdir()):
            name = path.stem if path.suffix == ".py" else path.name
            if name.isidentifier() and _is_source_module(source, name) and not _is_installed(folder, name):
                out.append(path)
    return out


def _is_installed(folder: Path, name: str) -> bool:
    return (folder / f"{name}.py").is_symlink() or (folder / name).is_dir()


class _StaleFinder(importlib.abc.MetaPathFinder):
    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> None:
        if not fullname.startswith(self.package + ".") or not path:
            return None
        name = fullname.rpartition(".")[2]
        for folder in map(Path, path):
            source = source_of(folder) if folder.is_dir() else None
            if source is not None and _is_source_module(source, name):
                raise StaleInstall(
                    f"{fullname} is in {source} but not in the installed package at {folder}: {HINT}", name=fullname
                )
        return None


def watch(package: str, init_file: str) -> None:
    """Put the stale-install finder on sys.meta_path (last) when `init_file`, the package's
    __init__, is a link of an editable install."""
    if not Path(init_file).is_symlink():
        return
    if not any(isinstance(f, _StaleFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_StaleFinder(package))

"""Which of a template's custom resource types the `--handler` options serve, checked before anything
runs: a type no handler serves is refused (a typo gets "did you mean"), a handler for a type the
template never uses is named (a warning)."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from ..template.values import is_custom
from .state import SimulateError


def custom_types(doc: Mapping[str, Any]) -> list[str]:
    """The custom resource types `doc`'s Resources use (sorted, once each)."""
    resources = doc.get("Resources")
    if not isinstance(resources, Mapping):
        return []
    found = {r.get("Type") for r in resources.values() if isinstance(r, Mapping)}
    return sorted(t for t in found if isinstance(t, str) and is_custom(t))


def handler_types(handlers: Iterable[str]) -> list[str]:
    """The TYPE (or glob) of each `--handler TYPE[=SPEC]`."""
    return [h.partition("=")[0].strip() for h in handlers]


def _served(rtype: str, patterns: list[str]) -> bool:
    return any(rtype == p or fnmatch.fnmatchcase(rtype, p) for p in patterns)


def check(doc: Mapping[str, Any], handlers: Iterable[str]) -> list[str]:
    """Raise SimulateError when a custom type of `doc` has no handler (naming the closest handler
    types given); else the warnings: each handler whose type the template never uses."""
    patterns = handler_types(handlers)
    used = custom_types(doc)
    missing = [t for t in used if not _served(t, patterns)]
    if missing:
        lines = []
        for rtype in missing:
            close = difflib.get_close_matches(rtype, patterns, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            lines.append(f"{rtype}{hint}")
        given = ", ".join(patterns) if patterns else "none"
        raise SimulateError(
            f"no --handler serves {'; '.join(lines)}: nothing was run. Handler types given: {given}. "
            "Add --handler 'TYPE=MODULE[:ATTR]' (or a bare TYPE for an installed handler), or fix the "
            "template's Type."
        )
    return [
        f"--handler {p}: the template uses no resource of that type (types it uses: {', '.join(used) or 'none'})"
        for p in patterns
        if not any(_served(t, [p]) for t in used)
    ]

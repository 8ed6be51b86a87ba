"""ResourceType -> handler.

Sources, highest precedence first: `--handler TYPE=MODULE[:ATTR]` / config, then the entry
point group `cfn_provider.handlers` (entry point name = ResourceType). Exact types win over
glob patterns (`Custom::Acme*`); among patterns the longest wins, ties broken by name, so
routing is deterministic. Configured handlers load at start-up (a typo fails fast);
entry points load on first use and fail with the plugin's name. A configured target
`lambda:MODULE.FUNCTION` is a Lambda custom-resource function run unchanged (daemon.lambda_adapter).
"""
from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable

ENTRY_POINT_GROUP = "cfn_provider.handlers"
ACTIONS = ("create", "update", "delete")


class HandlerError(Exception):
    """A handler could not be loaded or does not honour the contract."""


@dataclass
class Route:
    pattern: str
    spec: str  # "module[:attr]" as configured, for messages
    source: str  # "config" or "entry point <dist>"
    _load: Callable[[], Any] = field(repr=False)
    _handler: Any = field(default=None, repr=False)

    def handler(self) -> Any:
        if self._handler is None:
            try:
                obj = self._load()
            except Exception as exc:
                raise HandlerError(f"handler {self.spec!r} for {self.pattern} ({self.source}) failed to load: {exc}") from exc
            missing = [a for a in ACTIONS if not callable(getattr(obj, a, None))]
            if missing:
                raise HandlerError(f"handler {self.spec!r} for {self.pattern} has no callable {', '.join(missing)}")
            self._handler = obj
        return self._handler


def import_spec(spec: str) -> Any:
    """'pkg.module' or 'pkg.module:attr' -> the module or the attribute."""
    module_name, _, attr = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


LAMBDA_PREFIX = "lambda:"


def load_spec(spec: str) -> Any:
    """A configured target: 'module[:attr]', or 'lambda:module.function' (a Lambda function)."""
    if spec.startswith(LAMBDA_PREFIX):
        from .lambda_adapter import load

        return load(spec)
    return import_spec(spec)


def parse_handler_option(value: str) -> tuple[str, str]:
    """'Custom::Thing=mypkg.thing' -> ('Custom::Thing', 'mypkg.thing')."""
    rtype, sep, spec = value.partition("=")
    if not sep or not rtype.strip() or not spec.strip():
        raise ValueError(f"{value!r} is not TYPE=MODULE[:ATTR]")
    if spec.strip().startswith(LAMBDA_PREFIX):
        from .lambda_adapter import parse_target

        parse_target(spec.strip())  # ValueError naming the expected form
    return rtype.strip(), spec.strip()


class Router:
    def __init__(self, configured: Iterable[tuple[str, str | Any]] = (), use_entry_points: bool = True):
        routes: dict[str, Route] = {}
        if use_entry_points:
            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                dist = getattr(ep.dist, "name", "?")
                routes[ep.name] = Route(ep.name, ep.value, f"entry point of {dist}", ep.load)
        for rtype, target in configured:  # configured handlers override entry points
            if isinstance(target, str):
                route = Route(rtype, target, "config", lambda s=target: load_spec(s))
            else:
                route = Route(rtype, repr(target), "config", lambda o=target: o)
            route.handler()  # fail fast on a configuration mistake
            routes[rtype] = route
        self.exact = {k: r for k, r in routes.items() if not _is_pattern(k)}
        self.patterns = sorted((r for k, r in routes.items() if _is_pattern(k)), key=lambda r: (-len(r.pattern), r.pattern))

    def route(self, resource_type: str) -> Route | None:
        if resource_type in self.exact:
            return self.exact[resource_type]
        return next((r for r in self.patterns if fnmatch.fnmatchcase(resource_type, r.pattern)), None)

    def routes(self) -> list[Route]:
        return sorted(self.exact.values(), key=lambda r: r.pattern) + self.patterns


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")

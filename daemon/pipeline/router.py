"""ResourceType -> handler.

Nothing is served that the operator did not name. Each `--handler` value (or config entry) is
either `TYPE=MODULE[:ATTR]` (serve TYPE with that module or object) or a bare `TYPE`: serve
the handler registered as TYPE in the entry point group `cfn_provider.handlers` (the
built-ins, Custom::Command / Custom::Echo / Custom::ElasticIpPool / Custom::RandomSecret,
and any installed plugin's). Installed entry points that are not named are *available*
(`cfn-provider handlers` lists them) but never served: a template author cannot reach a
handler with AWS powers just because the package that ships it is installed.

Exact types win over glob patterns (`Custom::Acme*`); among patterns the longest wins, ties
broken by name, so routing is deterministic. Every named handler loads at start-up (a typo
fails fast). Modules are imported under one rule (handler_path: installed packages, PYTHONPATH and
the `--handler-path` folders; never the working directory by accident). A target
`lambda:MODULE.FUNCTION` is a Lambda custom-resource function run unchanged, in processes of its
own (cfn_provider.functions), with its `functions` settings; its folder is found the same way.
`fc:MODULE.FUNCTION` is an Alibaba Function Compute function, served the same way (fc_target).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from ..errors import StartupError
from . import handler_path

ENTRY_POINT_GROUP = "cfn_provider.handlers"
ACTIONS = ("create", "update", "delete")


class HandlerError(StartupError):
    """A handler could not be loaded or does not honour the contract (at start: nothing is served;
    a handler loaded later, a poll step's: its request is answered FAILED)."""


@dataclass
class Route:
    pattern: str
    spec: str  # "module[:attr]" as configured, for messages
    source: str  # "module" (named with a module path or object), "built-in" or "entry point of <dist>"
    _load: Callable[[], Any] = field(repr=False)
    _handler: Any = field(default=None, repr=False)

    def handler(self) -> Any:
        if self._handler is None:
            try:
                obj = self._load()
            except Exception as exc:
                origin = "" if self.source == "module" else f" ({self.source})"
                raise HandlerError(f"handler {self.spec!r} for {self.pattern}{origin} failed to load: {exc}") from exc
            missing = [a for a in ACTIONS if not callable(getattr(obj, a, None))]
            if missing:
                raise HandlerError(f"handler {self.spec!r} for {self.pattern} has no callable {', '.join(missing)}")
            self._handler = obj
        return self._handler


def import_spec(spec: str, folders: tuple[str, ...] = ()) -> Any:
    """'pkg.module' or 'pkg.module:attr' -> the module or the attribute (imported under handler_path's rule)."""
    module_name, _, attr = spec.partition(":")
    obj = handler_path.import_module(module_name, folders)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


LAMBDA_PREFIX = "lambda:"
FC_PREFIX = "fc:"  # an Alibaba Function Compute function (ROS transports only: cfn_provider.functions.fc_target)


def load_spec(spec: str, resource_type: str = "", function: Any = None, folders: tuple[str, ...] = ()) -> Any:
    """A configured target: 'module[:attr]', or 'lambda:module.function' (a Lambda function, with
    its settings `function`, cfn_provider.functions.settings.FunctionSettings); `folders`: the
    --handler-path folders."""
    if spec.startswith(LAMBDA_PREFIX):
        from ..functions.target import load

        return load(spec, resource_type, function, folders)
    if spec.startswith(FC_PREFIX):
        from ..functions import fc_target

        return fc_target.load(spec, resource_type, function, folders)
    return import_spec(spec, folders)


def parse_handler_option(value: str) -> tuple[str, str | None]:
    """'Custom::Thing=mypkg.thing' -> ('Custom::Thing', 'mypkg.thing'); a bare 'Custom::Thing'
    -> ('Custom::Thing', None): the built-in or entry point registered under that name."""
    rtype, sep, spec = value.partition("=")
    if not sep and _is_pattern(rtype):
        raise ValueError(
            f"{value!r}: a pattern needs a handler (TYPE=MODULE[:ATTR]); a bare TYPE names one built-in or entry point"
        )
    if not rtype.strip() or (sep and not spec.strip()) or (not sep and not _BARE_TYPE.match(rtype.strip())):
        raise ValueError(f"{value!r} is not TYPE=MODULE[:ATTR] or TYPE (a built-in or entry point)")
    if spec.strip().startswith(LAMBDA_PREFIX):
        from ..functions.target import parse_target

        parse_target(spec.strip())  # ValueError naming the expected form
    if spec.strip().startswith(FC_PREFIX):
        from ..functions.fc_target import parse_fc_target

        parse_fc_target(spec.strip())
    return rtype.strip(), (spec.strip() if sep else None)


_BARE_TYPE = re.compile(r"^[A-Za-z0-9_@:-]+$")  # a ResourceType, not something that looks like a module path
PACKAGE = "cfn-sns-provider"  # entry points of this distribution are the built-ins


def entry_point_origin(dist: str) -> str:
    return "built-in" if dist == PACKAGE else f"entry point of {dist}"


def _given(handler: Any) -> Callable[[], Any]:
    """A loader for a handler object given as it is (not as a module path)."""
    return lambda: handler


class Router:
    """`configured`: (TYPE, "MODULE[:ATTR]" | object | None) pairs, None naming the entry point
    registered as TYPE. `use_entry_points=False`: none are available to name (tests). `functions`:
    the settings of `lambda:` targets, by the TYPE they serve. `handler_paths`: the --handler-path
    folders modules are also imported from (handler_path)."""

    def __init__(
        self,
        configured: Iterable[tuple[str, str | Any]] = (),
        use_entry_points: bool = True,
        functions: Mapping[str, Any] | None = None,
        handler_paths: Iterable[str] = (),
    ):
        try:
            self.handler_paths = handler_path.add(handler_paths)
        except handler_path.HandlerPathError as exc:
            raise HandlerError(str(exc)) from None
        routes: dict[str, Route] = {}
        available: dict[str, Route] = {}
        if use_entry_points:
            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                origin = entry_point_origin(getattr(ep.dist, "name", "?"))
                available[ep.name] = Route(ep.name, ep.value, origin, ep.load)
        for rtype, target in configured:  # the last naming of a type wins
            if target is None:
                if rtype not in available:
                    raise HandlerError(
                        f"no built-in or installed entry point is registered as {rtype}; "
                        f"available: {', '.join(available) or 'none'} "
                        "(or give a module: --handler TYPE=MODULE[:ATTR])"
                    )
                route = available[rtype]
            elif isinstance(target, str):
                route = Route(
                    rtype,
                    target,
                    "module",
                    functools.partial(load_spec, target, rtype, (functions or {}).get(rtype), self.handler_paths),
                )
            else:
                route = Route(rtype, repr(target), "module", _given(target))
            route.handler()  # fail fast on a configuration mistake
            routes[rtype] = route
        self.available = [r for k, r in available.items() if k not in routes]  # named nowhere: never served
        self.exact = {k: r for k, r in routes.items() if not _is_pattern(k)}
        self.patterns = sorted(
            (r for k, r in routes.items() if _is_pattern(k)), key=lambda r: (-len(r.pattern), r.pattern)
        )

    def route(self, resource_type: str) -> Route | None:
        if resource_type in self.exact:
            return self.exact[resource_type]
        return next((r for r in self.patterns if fnmatch.fnmatchcase(resource_type, r.pattern)), None)

    def routes(self) -> list[Route]:
        return sorted(self.exact.values(), key=lambda r: r.pattern) + self.patterns


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")

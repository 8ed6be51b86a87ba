"""Principals: who sent a request, proven by its transport alone, and what each may reach.

Every admitted request carries a principal (`Request.principal`), set by the code that took it in,
never from a field of its body:
- the web listener: the name of the path token it came with (`NAME TOKEN` lines of
  --web-token-file; a line holding only a token is the tenant `default`);
- SQS: the tenant whose `topics` lists the verified SNS TopicArn; else `default`;
- MNS: the tenant whose `topics` lists the notification's topic; else `default` (the queue's).

`default` is every transport's default principal: requests from it keep what they had before
principals (store keys, per-stack handler state such as RandomSecret's values). Another principal's
requests are kept apart by construction: their store keys name the principal
(cfn_provider.pipeline.request.idempotency_key), a stack belongs to the first principal that named
it (cfn_provider.pipeline.tenancy), and a handler's per-stack state derives from it.

The operator may give a tenant only some handlers: `[tenants.NAME] handlers = ["Custom::A", ...]` in
the TOML config (or `--tenant-handler NAME=TYPE`, repeatable); a tenant with no such list gets
every handler the daemon serves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Final

from ..errors import StartupError

DEFAULT: Final = "default"  # every transport's default principal (old records and values are its)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NONE_MARK = "-"  # `handlers = []`: a tenant given no handler at all (`--tenant-handler NAME=-`)
NAME_RULE = "1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)"


class TenantError(StartupError, ValueError):
    """A tenant setting that cannot be used (the message names it): nothing starts."""


def checked_name(name: str, where: str) -> str:
    if not NAME.match(name):
        raise TenantError(f"{where}: tenant name {name[:70]!r} must be {NAME_RULE}")
    return name


@dataclass(frozen=True)
class Tenants:
    """The operator's tenant settings: `handlers` NAME -> the ResourceTypes (or globs) it may use,
    `topics` a topic (SNS TopicArn, MNS topic) -> the tenant that sends through it."""

    handlers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    topics: Mapping[str, str] = field(default_factory=dict)

    def allows(self, principal: str, resource_type: str) -> bool:
        """Whether `principal` may use the handler of `resource_type` (no list: every one served)."""
        allowed = self.handlers.get(principal)
        if allowed is None:
            return True
        return any(name != NONE_MARK and fnmatchcase(resource_type, name) for name in allowed)

    def of_topic(self, topic: str | None) -> str:
        """The principal of a request that came through `topic` (None: a bare message, the queue's)."""
        return self.topics.get(topic or "", DEFAULT) if topic else DEFAULT


def from_options(handler_options: Iterable[str], topic_options: Iterable[str]) -> Tenants:
    """Tenants from `--tenant-handler NAME=TYPE` and `--tenant-topic NAME=TOPIC` values."""
    handlers: dict[str, set[str]] = {}
    for value in handler_options:
        name, rtype = _pair(value, "--tenant-handler", "TYPE")
        handlers.setdefault(name, set()).add(rtype)
    topics: dict[str, str] = {}
    for value in topic_options:
        name, topic = _pair(value, "--tenant-topic", "TOPIC")
        if topics.get(topic, name) != name:
            raise TenantError(f"--tenant-topic: {topic!r} is given to two tenants ({topics[topic]}, {name})")
        topics[topic] = name
    return Tenants({k: frozenset(v) for k, v in handlers.items()}, topics)


def _pair(value: str, option: str, what: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not rest.strip():
        raise TenantError(f"{option} {value[:80]!r}: give NAME={what}")
    return checked_name(name.strip(), option), rest.strip()


def config_options(table: Any, path: str) -> tuple[list[str], list[str]]:
    """A config file's `[tenants]` table as `--tenant-handler` and `--tenant-topic` values."""
    if not isinstance(table, dict):
        raise TenantError(
            f'config file {path}: [tenants] must be a table of tables, e.g. [tenants.team-a] handlers = ["Custom::A"]'
        )
    handlers: list[str] = []
    topics: list[str] = []
    for name, settings in table.items():
        where = f"config file {path}: [tenants.{name}]"
        checked_name(name, where)
        if not isinstance(settings, dict) or set(settings) - {"handlers", "topics"}:
            raise TenantError(f"{where} takes `handlers` and `topics` (lists of strings)")
        for key, out in (("handlers", handlers), ("topics", topics)):
            values = settings.get(key, [])
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise TenantError(f"{where} {key} must be a list of strings")
            out += [f"{name}={v}" for v in values]
        if "handlers" in settings and not settings["handlers"]:
            handlers.append(f"{name}={NONE_MARK}")
    return handlers, topics

"""The operator's Custom::Command configuration: the TOML file of [commands.NAME] and [types."TYPE"]
entries that cfn_provider.handlers.command selects from (its docstring shows the format)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cfn_provider.config import read_toml
from cfn_provider.errors import HandlerFailure

__all__ = ["CONFIG_ENV", "DEFAULT_PASS_ENV", "DEFAULT_TIMEOUT", "Config", "ConfigError", "Entry", "load_config"]

CONFIG_ENV = "CFN_PROVIDER_COMMAND_CONFIG"
DEFAULT_TIMEOUT = 300.0
DEFAULT_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
_ENTRY_KEYS = {"create", "update", "delete", "timeout", "shell", "cwd", "pass-env", "env", "replace-on", "kill-grace"}
_ACTIONS = ("create", "update", "delete")


class ConfigError(HandlerFailure, RuntimeError):
    """The operator's command configuration is missing or wrong."""

    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


@dataclass(frozen=True)
class Entry:
    """One configured command: its argv (or shell string) per action, and how to run it."""

    name: str
    actions: Mapping[str, list[str] | str]  # argv, or one shell string when shell is on
    timeout: float = DEFAULT_TIMEOUT
    shell: bool = False
    cwd: str | None = None
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    env: Mapping[str, str] = field(default_factory=dict)
    replace_on: tuple[str, ...] = ()
    kill_grace: float = 2.0


@dataclass(frozen=True)
class Config:
    """The whole file: commands a template selects by name, and commands bound to a ResourceType."""

    path: str
    commands: Mapping[str, Entry]
    types: Mapping[str, Entry]


def load_config(path: str | None = None) -> Config:
    """Read and check the file at `path` (default: $CFN_PROVIDER_COMMAND_CONFIG); ConfigError if wrong."""
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(
            f"Custom::Command is not configured on this provider: set {CONFIG_ENV} "
            "to a TOML file of [commands.NAME] entries"
        )
    doc = read_toml(path, "the command configuration", ConfigError)
    unknown = sorted(set(doc) - {"commands", "types"})
    if unknown:
        raise ConfigError(f'{path}: unknown table(s) {", ".join(unknown)}; expected [commands.NAME] or [types."TYPE"]')
    tables = {}
    for table in ("commands", "types"):
        raw = doc.get(table, {})
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ConfigError(f"{path}: [{table}] must hold tables ([{table}.NAME])")
        tables[table] = {name: _entry(path, f"{table}.{name}", name, spec) for name, spec in raw.items()}
    return Config(path, tables["commands"], tables["types"])


def _entry(path: str, where: str, name: str, spec: dict[str, Any]) -> Entry:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{path}: [{where}] {why}")

    unknown = sorted(set(spec) - _ENTRY_KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_ENTRY_KEYS))}")
    shell = spec.get("shell", False)
    if not isinstance(shell, bool):
        raise bad("shell must be true or false")
    if "create" not in spec:
        raise bad("has no create command")
    actions = _actions(spec, shell, bad)
    timeout = spec.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise bad("timeout must be a number of seconds, above 0 and at most 3600")
    grace = spec.get("kill-grace", 2.0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 60:
        raise bad("kill-grace must be a number of seconds, 0 to 60")
    cwd = spec.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise bad("cwd must be a string")
    pass_env, env, replace_on = _environment(spec, bad)
    return Entry(name, actions, float(timeout), shell, cwd, tuple(pass_env), dict(env), tuple(replace_on), float(grace))


def _actions(spec: dict[str, Any], shell: bool, bad: Callable[[str], ConfigError]) -> dict[str, list[str] | str]:
    """Each action's command: one string with shell = true, else argv (a string is split like a shell would)."""
    actions: dict[str, list[str] | str] = {}
    for action in _ACTIONS:
        if action not in spec:
            continue
        value = spec[action]
        if shell:
            if not isinstance(value, str) or not value.strip():
                raise bad(f"{action} must be one non-empty string when shell = true")
            actions[action] = value
        else:
            if isinstance(value, str):
                value = shlex.split(value)  # split like a shell would, but nothing runs a shell
            if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
                raise bad(f"{action} must be a non-empty list of strings (argv)")
            actions[action] = value
    return actions


def _environment(
    spec: dict[str, Any], bad: Callable[[str], ConfigError]
) -> tuple[list[str], dict[str, str], list[str]]:
    """pass-env, env and replace-on, each checked."""
    pass_env = spec.get("pass-env", list(DEFAULT_PASS_ENV))
    if not isinstance(pass_env, list) or not all(isinstance(v, str) for v in pass_env):
        raise bad("pass-env must be a list of variable names")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise bad('env must be a table of NAME = "value"')
    replace_on = spec.get("replace-on", [])
    if not isinstance(replace_on, list) or not all(isinstance(v, str) for v in replace_on):
        raise bad("replace-on must be a list of property names")
    return pass_env, env, replace_on

"""Per-function settings of `lambda:` targets: where the code is, its environment, its limits and names.

Configured per ResourceType (or pattern) that a `lambda:` handler serves, in the config file

    [handlers]
    "Custom::Thing" = "lambda:index.handler"

    [functions."Custom::Thing"]
    code = "/opt/cfn-functions/thing"      # the function's folder (Lambda's /var/task), first on its path
    environment = { TABLE_NAME = "things", LOG_LEVEL = "INFO" }
    memory_mb = 256                        # its process's data limit (RLIMIT_DATA); default: none
    timeout = 30                           # seconds a call may run (Lambda's Timeout, 1..900); default: the request's
    concurrency = 2                        # processes at once (Lambda's reserved concurrency); default 1
    name = "thing"                         # context.function_name; default from the ResourceType
    log_group = "/cfn-provider/thing"      # context.log_group_name
    log_stream = "thing"                   # context.log_stream_name; default one per process, as Lambda's
    initializer = "index.initializer"      # an `fc:` function's Initializer (MODULE.FUNCTION), run once per process

or on the command line, one setting per `--function TYPE=SETTING=VALUE` (environment variables as
`env.NAME=VALUE`). The config file's table becomes the same strings (`config_strings`), so both
paths meet in `parse_options`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import StartupError

DEFAULT_CONCURRENCY = 1
MAX_CONCURRENCY = 64
# Set by the execution environment itself, as Lambda reserves them: a function cannot override them.
RESERVED = ("_HANDLER", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR", "AWS_EXECUTION_ENV")
RESERVED_PREFIX = "AWS_LAMBDA_"
_KEYS = ("code", "memory_mb", "timeout", "concurrency", "name", "log_group", "log_stream", "initializer")
MAX_TIMEOUT = 900  # Lambda's longest Timeout
_NUMBERS = {"memory_mb": (16, 1 << 20), "timeout": (1, MAX_TIMEOUT), "concurrency": (1, MAX_CONCURRENCY)}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INITIALIZER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_FORMS = {  # the text settings with a form of their own: the pattern, and what it is
    "name": (_NAME, "a Lambda function name (1-64 of A-Z a-z 0-9 - _)"),
    "initializer": (_INITIALIZER, "MODULE.FUNCTION (FC's Initializer, e.g. index.initializer)"),
}


class FunctionSettingError(StartupError, ValueError):
    """A `--function` value or `[functions]` entry that cannot be used (the message names it)."""


@dataclass(frozen=True)
class FunctionSettings:
    """How one registered function runs; every field has a default (an unconfigured function)."""

    code: str | None = None  # None: the folder on the daemon's path its module is found in
    environment: Mapping[str, str] = field(default_factory=dict)
    memory_mb: int | None = None
    timeout: int | None = None  # None: the request's deadline is the call's only limit
    concurrency: int = DEFAULT_CONCURRENCY
    name: str | None = None  # None: from the ResourceType (default_name)
    log_group: str | None = None  # None: /aws/lambda/NAME, as Lambda names it
    log_stream: str | None = None  # None: a new one per process, as Lambda's are per environment
    initializer: str | None = None  # an `fc:` function's MODULE.FUNCTION run once per process (FC's Initializer)


def default_name(resource_type: str) -> str:
    """A Lambda-style function name from the ResourceType or pattern: Custom::Thing -> Custom-Thing."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", resource_type).strip("-")
    return (name or "function")[:64]


def parse_option(value: str) -> tuple[str, str, str]:
    """'Custom::Thing=env.TABLE=things' -> ('Custom::Thing', 'env.TABLE', 'things')."""
    rtype, sep, rest = value.partition("=")
    key, sep2, setting = rest.partition("=")
    key = key.strip()
    if not sep or not sep2 or not rtype.strip() or not key:
        raise FunctionSettingError(
            f"{value!r} is not TYPE=SETTING=VALUE (e.g. 'Custom::Thing=code=/opt/fn/thing' "
            "or 'Custom::Thing=env.TABLE=things')"
        )
    if key not in _KEYS and not key.startswith(("env.", "environment.")):
        raise FunctionSettingError(f"{value!r}: unknown setting {key!r}; known: {', '.join(_KEYS)}, env.NAME")
    return rtype.strip(), key, setting


def parse_options(values: Iterable[str]) -> dict[str, FunctionSettings]:
    """`--function` values (and the config file's table, as strings) -> settings per ResourceType."""
    out: dict[str, FunctionSettings] = {}
    for value in values:
        rtype, key, raw = parse_option(value)
        current = out.get(rtype, FunctionSettings())
        out[rtype] = _apply(current, rtype, key, raw)
    return out


def _apply(current: FunctionSettings, rtype: str, key: str, raw: str) -> FunctionSettings:
    where = f"function setting {rtype} {key}"
    if key.startswith(("env.", "environment.")):
        name = key.partition(".")[2]
        if not _ENV_NAME.match(name):
            raise FunctionSettingError(f"{where}: {name!r} is not an environment variable name")
        if name in RESERVED or name.startswith(RESERVED_PREFIX):
            raise FunctionSettingError(
                f"{where}: {name} is reserved: the execution environment sets it (as Lambda does)"
            )
        return replace(current, environment={**current.environment, name: raw})
    if key in _NUMBERS:
        return _number(current, where, key, raw)
    if key == "code":
        path = Path(raw).expanduser()
        if not path.is_absolute():
            raise FunctionSettingError(f"{where}: {raw!r} is not an absolute path")
        return replace(current, code=str(path))
    form = _FORMS.get(key)
    if form is not None and not form[0].match(raw):
        raise FunctionSettingError(f"{where}: {raw!r} is not {form[1]}")
    if not raw.strip():
        raise FunctionSettingError(f"{where}: empty")
    text: dict[str, Any] = {key: raw}  # name, log_group, log_stream or initializer
    return replace(current, **text)


def _number(current: FunctionSettings, where: str, key: str, raw: str) -> FunctionSettings:
    try:
        number = int(raw)
    except ValueError:
        raise FunctionSettingError(f"{where}: {raw!r} is not a whole number") from None
    low, high = _NUMBERS[key]
    if not low <= number <= high:
        raise FunctionSettingError(f"{where}: {number} is outside {low}..{high}")
    if key == "memory_mb":
        return replace(current, memory_mb=number)
    return replace(current, timeout=number) if key == "timeout" else replace(current, concurrency=number)


def config_strings(table: Any, path: str | os.PathLike[str]) -> list[str]:
    """A config file's `[functions]` table as `--function` strings (environment values as text,
    as Lambda keeps them)."""
    if not isinstance(table, dict):
        raise FunctionSettingError(
            f"config file {path}: [functions] must be a table of tables, "
            'e.g. [functions."Custom::Thing"] with code = "/opt/fn/thing"'
        )
    out: list[str] = []
    for rtype, entry in table.items():
        if not isinstance(entry, dict):
            raise FunctionSettingError(f"config file {path}: [functions] {rtype!r} must be a table")
        for key, value in entry.items():
            if key == "environment":
                if not isinstance(value, dict):
                    raise FunctionSettingError(
                        f'config file {path}: [functions] {rtype!r} environment must be a table of NAME = "value"'
                    )
                out += [f"{rtype}=env.{name}={_text(item)}" for name, item in value.items()]
            elif isinstance(value, (dict, list)):
                raise FunctionSettingError(f"config file {path}: [functions] {rtype!r} {key} must be a single value")
            else:
                out.append(f"{rtype}={key}={_text(value)}")
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def unmatched(functions: Mapping[str, FunctionSettings], lambda_types: Iterable[str]) -> list[str]:
    """Configured functions no `lambda:` handler serves (a typo would otherwise go unnoticed)."""
    served = set(lambda_types)
    return sorted(rtype for rtype in functions if rtype not in served)

"""The command line's `--function TYPE=SETTING=VALUE` option (run, handlers, simulate), and its start-up check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from .settings import FunctionSettingError, parse_options, unmatched

HELP = (
    "A setting of the Lambda function serving TYPE (a `lambda:` handler), repeatable: code=FOLDER (the "
    "function's folder, first on its path; default: where its module is on the daemon's path), env.NAME=VALUE "
    "(an environment variable of its own), memory_mb=N (its process's data limit), timeout=S (seconds a call "
    "may run, Lambda's Timeout; default: the request's deadline), concurrency=N (its "
    "processes at once, default 1), name=NAME (context.function_name), log_group=NAME and log_stream=NAME "
    '(context.log_group_name / log_stream_name). The config file\'s [functions."TYPE"] tables hold the '
    "same. initializer=MODULE.FUNCTION: an fc: function's Initializer. See docs/porting-lambda.md and docs/ros.md."
)


def _parse(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    try:
        return parse_options(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _checked(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Checked as `run` checks them, kept as typed (simulate remembers them for the stack's next steps)."""
    _parse(_ctx, _param, values)
    return values


def function_option(
    help_text: str = HELP, name: str = "function", as_typed: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The --function option; `as_typed`: its value is the strings as typed (checked), not the settings."""
    return click.option(
        "--function",
        name,
        multiple=True,
        callback=_checked if as_typed else _parse,
        envvar=None if as_typed else "CFN_PROVIDER_FUNCTION",
        metavar="TYPE=SETTING=VALUE",
        help=help_text,
    )


def check_served(handlers: Sequence[tuple[str, Any]], functions: dict[str, Any]) -> None:
    """Every configured function must be a `lambda:` handler's: a typo would otherwise go unnoticed
    (FunctionSettingError, a start-up error, naming it)."""
    served = [rtype for rtype, spec in handlers if isinstance(spec, str) and spec.startswith(("lambda:", "fc:"))]
    stray = unmatched(functions, served)
    if stray:
        raise FunctionSettingError(
            f"--function: function settings for {', '.join(stray)}, which no lambda: handler serves "
            "(register it with --handler 'TYPE=lambda:MODULE.FUNCTION')"
        )
    fc = {rtype for rtype, spec in handlers if isinstance(spec, str) and spec.startswith("fc:")}
    lambdas = sorted(t for t, s in functions.items() if getattr(s, "initializer", None) and t not in fc)
    if lambdas:
        raise FunctionSettingError(
            f"--function: initializer for {', '.join(lambdas)}: an initializer is an fc: function's "
            "setting (Function Compute's Initializer); Lambda has none"
        )

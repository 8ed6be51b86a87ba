"""The command line's `--function TYPE=SETTING=VALUE` option (run, handlers), and its start-up check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from .settings import FunctionSettingError, parse_options, unmatched

HELP = (
    "A setting of the Lambda function serving TYPE (a `lambda:` handler), repeatable: code=FOLDER (the "
    "function's folder, first on its path; default: where its module is on the daemon's path), env.NAME=VALUE "
    "(an environment variable of its own), memory_mb=N (its process's data limit), concurrency=N (its "
    "processes at once, default 1), name=NAME (context.function_name), log_group=NAME and log_stream=NAME "
    '(context.log_group_name / log_stream_name). The config file\'s [functions."TYPE"] tables hold the '
    "same. initializer=MODULE.FUNCTION: an fc: function's Initializer. See docs/porting-lambda.md and docs/ros.md."
)


def _parse(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    try:
        return parse_options(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def function_option(help_text: str = HELP) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--function",
        "function",
        multiple=True,
        callback=_parse,
        envvar="CFN_PROVIDER_FUNCTION",
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

"""`cfn-provider handlers`: what `run` would serve with the same options, and why."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from click.core import ParameterSource

from .cli_options import CONFIG_HELP, HANDLER_HELP, HANDLER_PATH_HELP
from .config import load_config_file
from .functions.options import check_served, function_option
from .pipeline.router import HandlerError, Route, Router
from .run_options import ENV, parse_handlers


def _handler_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """--config for `handlers`: the daemon's own config file, of which only the handlers matter here."""
    if path:
        values = load_config_file(path)  # ConfigError: a start-up error (cli_errors)
        chosen = {key: values[key] for key in ("handler", "function", "handler_path") if values.get(key)}
        if chosen:
            ctx.default_map = {**(ctx.default_map or {}), **chosen}
    return path


_WHY = {
    ParameterSource.COMMANDLINE: "named with --handler",
    ParameterSource.ENVIRONMENT: f"named in {ENV}HANDLER",
    ParameterSource.DEFAULT_MAP: "named in the config file",
}


@click.command("handlers")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_handler_config,
    is_eager=True,
    expose_value=False,
    envvar=ENV + "CONFIG",
    help=CONFIG_HELP,
)
@click.option(
    "--handler",
    "handler",
    multiple=True,
    callback=parse_handlers,
    envvar=ENV + "HANDLER",
    metavar="TYPE=MODULE[:ATTR]",
    help=HANDLER_HELP,
)
@function_option()
@click.option(
    "--handler-path",
    "handler_path",
    multiple=True,
    envvar=ENV + "HANDLER_PATH",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help=HANDLER_PATH_HELP,
)
@click.option(
    "--check",
    is_flag=True,
    help="Also load every available handler (built-ins and entry points not served); exit 1 if any fails to load.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option(
    "--from-template",
    "from_template",
    type=click.Path(dir_okay=False, exists=True),
    metavar="TEMPLATE",
    help="Print, instead, the --handler and --function options (and the same as the config file's "
    "[handlers] and [functions] tables) that serve TEMPLATE's custom resources with the Lambda functions "
    "their ServiceToken names (!GetAtt Fn.Arn), read from each AWS::Lambda::Function: Handler, Code (a "
    "local folder), Environment.Variables, Timeout, MemorySize. Nothing is loaded or served.",
)
@click.option(
    "--inline-code",
    "inline_code",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="With --from-template: write each inline function's source (Code.ZipFile) to DIR/LOGICAL_ID/index.py "
    "and use that folder as its code.",
)
@click.pass_context
def handlers_command(
    ctx: click.Context,
    handler: tuple[tuple[str, Any], ...],
    function: dict[str, Any],
    handler_path: tuple[str, ...],
    check: bool,
    as_json: bool,
    from_template: str | None,
    inline_code: str | None,
) -> None:
    """List what `run` would serve with these options, and why: each ResourceType (or glob
    pattern), the handler serving it, where it comes from (a module, a built-in, or the entry
    point of an installed distribution in the group cfn_provider.handlers) and where it was
    named (--handler, CFN_PROVIDER_HANDLER, or the config file). Exact types come first,
    sorted, then patterns in the order they are tried.

    Then the handlers that are installed but NOT served: nothing is served that the operator
    did not name. Serve one with `--handler TYPE` (no module) or `"TYPE" = true` in the config
    file's [handlers] table. Every other ResourceType is answered FAILED "no handler for TYPE".

    Named handlers are imported (as `run` does at start-up: exit 2 if one fails); available
    ones only with --check.

    With --from-template TEMPLATE it prints the options that serve the template's own Lambda
    functions instead (see docs/porting-lambda.md).
    """
    if from_template:
        from .cli_from_template import print_from_template

        print_from_template(from_template, inline_code)
        return
    check_served(handler, function)
    router = Router(handler, functions=function, handler_paths=handler_path)  # HandlerError: exit 2 (cli_errors)
    source = ctx.get_parameter_source("handler")
    why = _WHY.get(source, "named") if source is not None else "named"
    rows = [_row(router, route, why, check) for route in [*router.routes(), *router.available]]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        _print(rows)
    sys.exit(1 if any(r.get("status", "ok") != "ok" for r in rows) else 0)


def _row(router: Router, route: Route, why: str, check: bool) -> dict[str, Any]:
    """One route as listed; with `check`, whether it loads (a served one was loaded with the router)."""
    served = route not in router.available
    row: dict[str, Any] = {
        "resource_type": route.pattern,
        "handler": route.spec,
        "source": route.source,
        "pattern": route.pattern not in router.exact and served,
        "served": served,
        "why": why if served else "available, not named",
    }
    if check and not served:
        try:
            route.handler()
            row["status"] = "ok"
        except HandlerError as exc:
            row["status"] = f"error: {exc}"
    elif check:
        row["status"] = "ok"  # loaded when the router was made
    return row


def _print(rows: list[dict[str, Any]]) -> None:
    """The tables: what is served and why, then what is available but not served; load errors on stderr."""
    serving = [r for r in rows if r["served"]]
    if not serving:
        click.echo(
            "no handlers served: name one with --handler TYPE=MODULE[:ATTR], --handler TYPE "
            "(an available one below) or the config file's [handlers] table"
        )
    else:
        table = [("RESOURCE TYPE", "HANDLER", "FROM", "SERVED BECAUSE")]
        table += [
            (r["resource_type"] + (" (pattern)" if r["pattern"] else ""), r["handler"], r["source"], r["why"])
            for r in serving
        ]
        _echo_table(table)
    available = [r for r in rows if not r["served"]]
    if available:
        click.echo("\navailable, NOT served (serve one with --handler TYPE):")
        _echo_table(
            [("RESOURCE TYPE", "HANDLER", "FROM")]
            + [(r["resource_type"], r["handler"], r["source"]) for r in available]
        )
    for row in rows:
        if row.get("status", "ok") != "ok":
            click.echo(f"{row['resource_type']}: {row['status']}", err=True)


def _echo_table(table: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        cells = [f"{cell:<{w}}" for cell, w in zip(line[:-1], widths, strict=True)] + [line[-1]]  # the last unpadded
        click.echo("  ".join(cells).rstrip())

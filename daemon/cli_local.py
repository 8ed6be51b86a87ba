"""`cfn-provider local-invoke` and `cfn-provider event`: one request through a handler on this machine,
with no stack and no daemon, and the request events to feed it (click wiring; the work is in
cfn_provider.ops.local_invoke)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import click

from .cli_options import HANDLER_HELP, HANDLER_PATH_HELP, property_options
from .functions.options import function_option
from .run_options import parse_handlers


@click.command("local-invoke")
@click.argument("event_file", metavar="EVENT", type=click.File("r", encoding="utf-8"))
@click.option(
    "--handler",
    "handler",
    multiple=True,
    required=True,
    callback=parse_handlers,
    metavar="TYPE=MODULE[:ATTR]",
    help=HANDLER_HELP,
)
@click.option(
    "--handler-path",
    "handler_path",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help=HANDLER_PATH_HELP,
)
@function_option()
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="The daemon's log lines (and a function's own output) on stderr from this level.",
)
def local_invoke_command(
    event_file: IO[str],
    handler: tuple[tuple[str, Any], ...],
    handler_path: tuple[str, ...],
    function: dict[str, Any],
    log_level: str,
) -> None:
    """Run one request EVENT (a JSON file, or - for stdin) through its handler on this machine, with
    no stack, queue or daemon, and print the response body the daemon would upload, as
    `sam local invoke -e EVENT` does for a function. The handler runs exactly as `run` would run it:
    a module in this process, a `lambda:` function (cfnresponse, crhelper) in a process of its own,
    answering the loopback URL the daemon gives it; the event's ResponseURL is never contacted.

    \b
      cfn-provider event create Custom::Thing --property Colour=blue > create.json
      cfn-provider local-invoke create.json --handler 'Custom::Thing=mypkg.thing' --handler-path .
      cfn-provider event create Custom::Thing | \\
        cfn-provider local-invoke - --handler "Custom::Thing=lambda:index.handler" --function "Custom::Thing=code=fn"

    NoEcho Data is printed masked. Exit status: 0 the answer is SUCCESS, 1 it is FAILED (or a
    long-running action's first step: IN_PROGRESS), 2 nothing ran (the event, a handler that does
    not load: `cfn-provider: <why>`)."""
    from . import logs
    from .functions.options import check_served
    from .ops.local_invoke import read_event, run

    check_served(handler, function)
    request = read_event(event_file.read(), "-" if event_file.name == "<stdin>" else event_file.name)
    logs.configure("auto", log_level.lower(), stream=sys.stderr)  # type: ignore[arg-type]
    body = run(request, handler, handler_path, function)
    if body.get("NoEcho") and isinstance(body.get("Data"), dict):
        body["Data"] = {k: "****" for k in body["Data"]}
    click.echo(json.dumps(body, indent=2, ensure_ascii=False))
    sys.exit(0 if body.get("Status") == "SUCCESS" else 1)


@click.command("event")
@click.argument("request_type", metavar="create|update|delete", type=click.Choice(["create", "update", "delete"]))
@click.argument("resource_type", metavar="TYPE")
@property_options
@click.option(
    "--old-property",
    "old_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="update: an OldResourceProperties entry (repeatable; default: none).",
)
@click.option(
    "--physical-id",
    metavar="ID",
    help="update, delete: the PhysicalResourceId (default: cfn-provider-local-LOGICAL_ID).",
)
@click.option("--logical-id", default="Resource", show_default=True, metavar="ID", help="The LogicalResourceId.")
@click.option(
    "--service-timeout",
    type=click.IntRange(1, 3600),
    metavar="SECONDS",
    help="The ServiceTimeout property (default: none, so 3600 s, as CloudFormation).",
)
def event_command(
    request_type: str,
    resource_type: str,
    properties: tuple[str, ...],
    properties_json: str | None,
    old_properties: tuple[str, ...],
    physical_id: str | None,
    logical_id: str,
    service_timeout: int | None,
) -> None:
    """Print a request event for ResourceType TYPE, as CloudFormation sends it (and a Lambda-backed
    custom resource receives it), to feed `cfn-provider local-invoke` or a test, as
    `sam local generate-event` does. The stack is made up (cfn-provider-local in us-east-1) and the
    ResponseURL is a placeholder: local-invoke never contacts it.

    \b
      cfn-provider event create Custom::Thing --property Colour=blue
      cfn-provider event update Custom::Thing --property Colour=red --old-property Colour=blue --physical-id thing-1
      cfn-provider event delete Custom::Thing --physical-id thing-1"""
    from .local.template.values import is_custom
    from .ops.invoke import parse_properties
    from .ops.local_invoke import EventError, make_event

    if not is_custom(resource_type):
        raise EventError(f"{resource_type!r} is not a custom resource type (Custom::NAME)")
    props = parse_properties(properties, properties_json)
    old = parse_properties(old_properties, None) if old_properties else None
    if old is not None and request_type != "update":
        raise EventError("--old-property is for an update event")
    event = make_event(request_type, resource_type, props, old, physical_id, logical_id, service_timeout)
    click.echo(json.dumps(event, indent=2))

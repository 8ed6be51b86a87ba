"""`cfn-provider`: the command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from . import __version__
from .cli_errors import Commands
from .config import Settings, apply_config_file, default_state_url, load_config_file
from .dialects.ros_options import ros_options, transport_settings
from .functions.options import check_served, function_option
from .pipeline.budget import MAX_RECEIVE_COUNT
from .pipeline.router import HandlerError, parse_handler_option

if TYPE_CHECKING:
    from .logs import LogFormat, LogLevel

ENV = "CFN_PROVIDER_"


def _load_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    if path:
        apply_config_file(ctx, path, strict=True)
    return path


def _handlers(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str | None], ...]:
    try:
        return tuple(parse_handler_option(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="cfn-provider")
def main() -> None:
    """Serve AWS CloudFormation custom resources from your own machines.

    CloudFormation publishes each custom-resource request to the SNS topic a template names
    as its ServiceToken; SNS delivers it to an SQS queue; `cfn-provider run` long-polls that
    queue, runs the handler registered for the request's ResourceType, and uploads the answer
    to the request's presigned ResponseURL. Try it with no AWS account: `cfn-provider demo`.

    \b
    Exit status (every command; a command's help adds its own):
      0  done
      1  the command ran and failed (check: not healthy; answer: refused or not delivered; ...)
      2  nothing was done: a usage error, or a start-up error shown as `cfn-provider: <why>`
         (the config file, --state, the transport's settings, a state file open to others,
         the event loop, a handler or function that does not load, a function setting)
    """


@main.command()
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_load_config,
    is_eager=True,
    expose_value=False,
    envvar=ENV + "CONFIG",
    help='TOML file with any of these options (e.g. queue-url = "...", [handlers] table).',
)
@click.option(
    "--queue-url",
    envvar=ENV + "QUEUE_URL",
    help="SQS queue subscribed to the ServiceToken topic (required with --transport sqs).",
)
@click.option(
    "--region", envvar=ENV + "REGION", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile)."
)
@click.option(
    "--topic-arn",
    "topic_arn",
    multiple=True,
    envvar=ENV + "TOPIC_ARN",
    help="Accept SNS notifications only from this topic (repeatable; --transport sqs, MNS topics are "
    "--mns-topic). Default: any topic, with a warning.",
)
@click.option(
    "--handler",
    "handler",
    multiple=True,
    callback=_handlers,
    envvar=ENV + "HANDLER",
    metavar="TYPE=MODULE[:ATTR]",
    help="Serve ResourceType TYPE (or a glob like 'Custom::Acme*') with a module or object "
    "having create/update/delete (repeatable). A bare TYPE serves the built-in or "
    "installed entry point (group cfn_provider.handlers) registered as TYPE, e.g. "
    "--handler Custom::RandomSecret. Nothing else is served: installed handlers are "
    "only available to name (see `cfn-provider handlers`).",
)
@function_option()
@click.option(
    "--handler-path",
    "handler_path",
    multiple=True,
    envvar=ENV + "HANDLER_PATH",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Also import handler modules from this folder (repeatable; "
    "in the environment a PATH-style list). Never from the working directory unless named here.",
)
@click.option(
    "--state",
    envvar=ENV + "STATE",
    default=default_state_url,
    show_default="sqlite under the state directory",
    help="Idempotency store: sqlite:///ABSOLUTE/PATH.db (or, in fleet mode, dynamodb://TABLE).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    envvar=ENV + "CONCURRENCY",
    help="Requests worked on at once; a receive never asks for more messages than there are free slots.",
)
@click.option(
    "--visibility-timeout",
    type=click.IntRange(5, 43200),
    default=60,
    show_default=True,
    envvar=ENV + "VISIBILITY_TIMEOUT",
    help="Seconds a received message stays hidden (--transport web: a request's store lease); "
    "renewed every third of it while in flight.",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(0, 3600),
    default=30.0,
    show_default=True,
    envvar=ENV + "GRACE_PERIOD",
    help="On SIGTERM/SIGINT, seconds in-flight requests get to finish before they are handed "
    "back to the queue (or answered FAILED when their deadline is too near), counted from "
    "the signal. The long poll open at the signal (up to 20 s) ends meanwhile, its messages "
    "handed straight back, so the process exits after the longer of the two.",
)
@click.option(
    "--verify-signatures/--no-verify-signatures",
    default=True,
    show_default=True,
    envvar=ENV + "VERIFY_SIGNATURES",
    help="Check each SNS notification's signature (--transport sqs). Off: raw delivery is accepted and "
    "trust rests on the queue policy.",
)
@click.option(
    "--allow-response-url",
    "allow_response_url",
    multiple=True,
    envvar=ENV + "ALLOW_RESPONSE_URL",
    metavar="PREFIX",
    help="Also allow ResponseURLs under this URL prefix (e.g. an emulator). "
    "Default: only CloudFormation's own response buckets "
    "(cloudformation-custom-resource-response-REGION on S3, https).",
)
@click.option(
    "--trust-signing-cert-url",
    "trust_signing_cert_url",
    multiple=True,
    metavar="PREFIX",
    envvar=ENV + "TRUST_SIGNING_CERT_URL",
    help="For emulators and tests only: also fetch SNS signing certificates from this URL prefix.",
)
@click.option(
    "--health-file",
    envvar=ENV + "HEALTH_FILE",
    type=click.Path(dir_okay=False),
    help="Where the daemon keeps its liveness file for `cfn-provider check` "
    "(default: beside the SQLite state file, else in the state directory).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    envvar=ENV + "METRICS_PORT",
    help="Serve Prometheus metrics on this port (off by default).",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    envvar=ENV + "METRICS_ADDRESS",
    help="Address the metrics endpoint listens on (0.0.0.0: every interface; the endpoint has "
    "no authentication, so expose it only to the scraper).",
)
@click.option(
    "--dead-letter-interval",
    type=click.FloatRange(0, 86400),
    default=60.0,
    show_default=True,
    envvar=ENV + "DEAD_LETTER_INTERVAL",
    metavar="SECONDS",
    help="How often to look in the queue's dead-letter queue (from its RedrivePolicy) and answer "
    "FAILED to each request left there unanswered, saying where to look (the store decides "
    "who answers: safe on every fleet member). 0 turns it off.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.1, 300),
    default=5.0,
    show_default=True,
    envvar=ENV + "POLL_INTERVAL",
    metavar="SECONDS",
    help="How often to look in the store for long-running requests whose next poll is due "
    "(a poll this daemon scheduled itself runs on time regardless).",
)
@click.option(
    "--event-loop",
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    default="auto",
    show_default=True,
    envvar=ENV + "EVENT_LOOP",
    help="auto: uvloop where it is installed (Linux/macOS CPython), else asyncio's own loop; uvloop: that or an error.",
)
@click.option("--wait-seconds", type=click.IntRange(0, 20), default=20, hidden=True, envvar=ENV + "WAIT_SECONDS")
@click.option("--max-backoff", type=click.FloatRange(0.1, 300), default=20.0, hidden=True, envvar=ENV + "MAX_BACKOFF")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
    envvar=ENV + "LOG_FORMAT",
    help="auto: console on a terminal, JSON otherwise.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    envvar=ENV + "LOG_LEVEL",
)
@ros_options
def run(log_format: LogFormat, log_level: LogLevel, **options: Any) -> None:
    """Run the provider daemon until SIGTERM/SIGINT (a second signal stops at once).

    \b
    Example:
      cfn-provider run --queue-url https://sqs.eu-west-1.amazonaws.com/123456789012/cfn-provider \\
        --topic-arn arn:aws:sns:eu-west-1:123456789012:cfn-provider \\
        --handler 'Custom::Thing=mypkg.thing' --handler Custom::RandomSecret

    A Lambda custom-resource function (cfnresponse or crhelper) runs unchanged with
    --handler 'Custom::Thing=lambda:index.handler' (Lambda's Handler setting after lambda:),
    in processes of its own; --function 'Custom::Thing=code=/opt/fn/thing' and
    --function 'Custom::Thing=env.TABLE=things' set its folder and environment.

    Every option can also come from a CFN_PROVIDER_<OPTION> environment variable (e.g.
    CFN_PROVIDER_QUEUE_URL) or the --config file. AWS endpoints follow botocore's own
    AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_SQS variables.

    Exit status: 0 stopped by a signal, 1 stopped at once by a second one, 2 did not start
    (a usage error, or `cfn-provider: <why>` on one line).
    """
    from . import logs

    transport = transport_settings(options)
    check_served(options["handler"], options["function"])
    logs.configure(log_format, log_level)
    settings = Settings(
        **transport,
        region=options["region"],
        topic_arns=options["topic_arn"],
        handlers=options["handler"],
        handler_paths=options["handler_path"],
        state=options["state"],
        concurrency=options["concurrency"],
        visibility_timeout=options["visibility_timeout"],
        grace_period=options["grace_period"],
        verify_signatures=options["verify_signatures"],
        allow_response_urls=options["allow_response_url"],
        trust_signing_cert_urls=options["trust_signing_cert_url"],
        wait_seconds=options["wait_seconds"],
        max_backoff=options["max_backoff"],
        health_file=options["health_file"],
        metrics_port=options["metrics_port"],
        metrics_address=options["metrics_address"],
        dead_letter_interval=options["dead_letter_interval"],
        poll_interval=options["poll_interval"],
        event_loop=options["event_loop"],
        functions=options["function"],
    )
    sys.exit(_serve(settings))


def _serve(settings: Settings) -> int:
    from . import loops
    from .service import Service

    async def go() -> int:
        service = Service(settings)
        service.install_signal_handlers()
        return await service.run()

    code = loops.run(go, settings.event_loop)  # a StartupError ends the command (cli_errors): exit 2
    _exit_past_stuck_handlers(code)
    return code


def _exit_past_stuck_handlers(code: int) -> None:
    """A sync handler's thread cannot be killed, and Python would wait for it at exit; its request
    has already been handed back or answered, so leave it behind rather than hang the stop."""
    import logging
    import os
    import threading

    stuck = [t.name for t in threading.enumerate() if t.name.startswith("handler") and t.is_alive()]
    if not stuck:
        return
    import structlog

    structlog.get_logger("service").warning("abandoning_handler_threads", threads=stuck)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@main.command()
@click.option("--logs/--no-logs", default=False, help="Also show the daemon's own log lines (on stderr).")
def demo(logs: bool) -> None:
    """Everything on this machine, no AWS account: an embedded AWS emulator (moto), a topic,
    a queue, a bucket, the daemon, and a scripted stack lifecycle. Prints each request and
    the response read back from S3; exits 0 when every answer is the one expected."""
    try:
        from .local.demo import run_demo
    except ImportError as exc:  # moto is an extra
        raise click.ClickException(
            f"the demo needs the emulator: pip install 'cfn-sns-provider[demo]' ({exc})"
        ) from None
    sys.exit(run_demo(show_logs=logs))


@main.command()
@click.option(
    "--name",
    default="cfn-provider",
    show_default=True,
    help="Name of the topic and queue (the dead-letter queue is NAME-dlq).",
)
@click.option("--topic-arn", help="Adopt this existing SNS topic as the ServiceToken instead of creating NAME.")
@click.option("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile).")
@click.option(
    "--dynamodb-table",
    metavar="NAME",
    help="Also create the DynamoDB table for fleet mode (run --state dynamodb://NAME).",
)
@click.option(
    "--max-receive-count",
    type=click.IntRange(1, 1000),
    default=MAX_RECEIVE_COUNT,
    show_default=True,
    help="Receives before a message moves to the dead-letter queue (the receive budget: see the docs "
    "before lowering it).",
)
@click.option(
    "--visibility-timeout",
    type=click.IntRange(5, 43200),
    default=60,
    show_default=True,
    help="The queue's visibility timeout (use the same value for run).",
)
@click.option(
    "--retention-days",
    type=click.IntRange(1, 14),
    default=14,
    show_default=True,
    help="How long both queues keep messages.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option(
    "--write-config",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write a TOML file for `cfn-provider run --config FILE`.",
)
def bootstrap(
    name: str,
    topic_arn: str | None,
    region: str | None,
    dynamodb_table: str | None,
    max_receive_count: int,
    visibility_timeout: int,
    retention_days: int,
    dry_run: bool,
    write_config: str | None,
) -> None:
    """Create (or adopt) the AWS side of a provider, idempotently: the SNS topic and its policy
    (this account publishes, only the queue subscribes, TLS only), the SQS queue with a
    dead-letter queue and redrive policy (both SSE-SQS), a queue policy that admits only that
    topic (TLS only), the subscription (envelope delivery, so signatures can be checked) and,
    with --dynamodb-table, the fleet-mode table. Policies are merged by Sid: statements you
    added stay. Running it again changes nothing.

    Prints the ServiceToken for templates, the `cfn-provider run` command line and the
    least-privilege IAM policy for the daemon's role (exact ARNs).
    """
    import os
    from pathlib import Path

    import boto3
    import botocore.exceptions

    from .ops.bootstrap import Bootstrap, summary
    from .ops.bootstrap import write_config as write_config_file

    def show(change: Any) -> None:
        click.echo(change.describe(dry_run))

    try:
        session = boto3.Session(region_name=region or os.environ.get("AWS_REGION") or None)
        if dry_run:
            click.echo("Plan (dry run: nothing will be changed):")
        outcome = Bootstrap(
            session,
            name=name,
            topic_arn=topic_arn,
            dynamodb_table=dynamodb_table,
            max_receive_count=max_receive_count,
            visibility_timeout=visibility_timeout,
            retention_days=retention_days,
            dry_run=dry_run,
            log=show,
        ).run()
        if write_config:
            change = write_config_file(Path(write_config), outcome.config_text(visibility_timeout), dry_run)
            outcome.changes.append(change)
            show(change)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise click.ClickException(f"AWS: {exc}") from None
    click.echo("")
    for line in summary(outcome, visibility_timeout, write_config):
        click.echo(line)


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


@main.command("handlers")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_handler_config,
    is_eager=True,
    expose_value=False,
    envvar=ENV + "CONFIG",
    help="The TOML file given to `run` (its [handlers] table and handler setting are used).",
)
@click.option(
    "--handler",
    "handler",
    multiple=True,
    callback=_handlers,
    envvar=ENV + "HANDLER",
    metavar="TYPE=MODULE[:ATTR]",
    help="As for `run` (repeatable).",
)
@function_option("As for `run` (repeatable): where a lambda: function's code is, and its environment.")
@click.option(
    "--handler-path",
    "handler_path",
    multiple=True,
    envvar=ENV + "HANDLER_PATH",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="As for `run` (repeatable).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Also load every available handler (built-ins and entry points not served); exit 1 if any fails to load.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.pass_context
def handlers_command(
    ctx: click.Context,
    handler: tuple[tuple[str, Any], ...],
    function: dict[str, Any],
    handler_path: tuple[str, ...],
    check: bool,
    as_json: bool,
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
    """
    import json

    from .pipeline.router import Router

    check_served(handler, function)
    router = Router(handler, functions=function, handler_paths=handler_path)  # HandlerError: exit 2 (cli_errors)
    source = ctx.get_parameter_source("handler")
    why = _WHY.get(source, "named") if source is not None else "named"
    rows = []
    failed = 0
    for route in [*router.routes(), *router.available]:
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
                failed += 1
        elif check:
            row["status"] = "ok"  # loaded when the router was made
        rows.append(row)

    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
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
    sys.exit(1 if failed else 0)


def _echo_table(table: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        cells = [f"{cell:<{w}}" for cell, w in zip(line[:-1], widths, strict=True)] + [line[-1]]  # the last unpadded
        click.echo("  ".join(cells).rstrip())


from .local.simulate import simulate  # noqa: E402 - the command group lives with its engine

main.add_command(simulate)
from .local.scaffold import init_command  # noqa: E402 - `cfn-provider init NAME`

main.add_command(init_command)
from .ops.commands import answer_command, requests_command  # noqa: E402 - operator commands on the store

main.add_command(requests_command)
main.add_command(answer_command)
from .ops.daemon_commands import check_command, invoke_command, redrive_command  # noqa: E402 - on a daemon

main.add_command(check_command)
main.add_command(redrive_command)
main.add_command(invoke_command)
from .ops.web_token import web_token_command  # noqa: E402 - the web listener's ServiceTokens

main.add_command(web_token_command)


if __name__ == "__main__":  # pragma: no cover
    main()

"""`cfn-provider`: the command line."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from . import __version__, aws_start
from .cli_errors import Commands
from .cli_options import LOGS_HELP, REGION_HELP
from .config import Settings
from .errors import StartupError
from .pipeline.budget import MAX_RECEIVE_COUNT
from .run_options import run_options, settings_from

if TYPE_CHECKING:
    from .logs import LogFormat, LogLevel
    from .ops.bootstrap import Outcome as BootstrapOutcome


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
@run_options
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

    checked = settings_from(options)  # the options checked before the logs are configured: click's errors first
    logs.configure(log_format, log_level)
    sys.exit(_serve(checked))


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
@click.option("--logs/--no-logs", default=False, show_default=True, help=LOGS_HELP)
def demo(logs: bool) -> None:
    """Everything on this machine, no AWS account: an embedded AWS emulator (moto), a topic,
    a queue, a bucket, the daemon, and a scripted stack lifecycle. Prints each request and
    the response read back from S3; exits 0 when every answer is the one expected."""
    try:
        import moto.server  # noqa: F401 - the emulator, imported when it starts: missing, say so before anything runs

        from .local.demo import run_demo
    except ImportError as exc:  # moto is an extra
        from .local.provider_source import install_hint

        raise StartupError(
            f"the demo needs the emulator (moto, the demo extra: {install_hint('demo')}): {exc}"
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
@click.option("--region", help=REGION_HELP)
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
    from .ops.bootstrap import summary

    steps = dict(
        name=name,
        topic_arn=topic_arn,
        dynamodb_table=dynamodb_table,
        max_receive_count=max_receive_count,
        visibility_timeout=visibility_timeout,
        retention_days=retention_days,
        dry_run=dry_run,
    )
    outcome = _bootstrap(region, write_config, steps)
    click.echo("")
    for line in summary(outcome, visibility_timeout, write_config):
        click.echo(line)


def _bootstrap(region: str | None, config_file: str | None, steps: dict[str, Any]) -> BootstrapOutcome:
    """The steps (cfn_provider.ops.bootstrap.Bootstrap), each change printed as it is made, then the
    config file when one is asked for; a failure is the command's error, not a traceback."""
    import os
    from pathlib import Path

    import boto3
    import botocore.exceptions

    from .ops.bootstrap import Bootstrap
    from .ops.bootstrap import write_config as write_config_file

    dry_run = steps["dry_run"]

    def show(change: Any) -> None:
        click.echo(change.describe(dry_run))

    region = region or os.environ.get("AWS_REGION") or aws_start.configured_region()
    aws_start.require(region, "bootstrap")  # nothing done yet: one line, exit 2
    try:
        session = boto3.Session(region_name=region)
        if dry_run:
            click.echo("Plan (dry run: nothing will be changed):")
        outcome = Bootstrap(session, **steps, log=show).run()
        if config_file:
            change = write_config_file(Path(config_file), outcome.config_text(steps["visibility_timeout"]), dry_run)
            outcome.changes.append(change)
            show(change)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise click.ClickException(f"AWS: {exc}") from None
    return outcome


from .cli_handlers import handlers_command  # noqa: E402 - what `run` would serve

main.add_command(handlers_command)
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
from .cli_local import event_command, local_invoke_command  # noqa: E402 - one event, no daemon (as SAM's)

main.add_command(local_invoke_command)
main.add_command(event_command)


if __name__ == "__main__":  # pragma: no cover
    main()

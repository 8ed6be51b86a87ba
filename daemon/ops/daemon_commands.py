"""The operator commands about a running daemon and its queues: `cfn-provider check` (its health)
and `cfn-provider redrive` (its dead-letter queue); click wiring, the work is in
cfn_provider.ops.health and cfn_provider.ops.redrive. Each reads the daemon's own --config file.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ..config import daemon_id, default_state_url
from .commands import config_option, region_option

ENV = "CFN_PROVIDER_"


def daemon_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a daemon, as `run` takes them (flag, CFN_PROVIDER_* variable or the
    --config file): its queue, and where it keeps its state."""
    for option in reversed([
        config_option,
        click.option("--transport", type=click.Choice(["sqs", "mns"]), default="sqs", show_default=True,
                     envvar=ENV + "TRANSPORT", help="As for run."),
        click.option("--queue-url", envvar=ENV + "QUEUE_URL", help="The daemon's queue (as for run)."),
        click.option("--mns-endpoint", envvar=ENV + "MNS_ENDPOINT", metavar="URL", help="As for run (--transport mns)."),
        click.option("--mns-queue", envvar=ENV + "MNS_QUEUE", metavar="NAME", help="As for run (--transport mns)."),
        click.option("--state", envvar=ENV + "STATE", default=default_state_url, show_default="as for run",
                     help="The daemon's --state: health files are kept beside a SQLite state file, else in "
                          "the state directory."),
        click.option("--health-file", envvar=ENV + "HEALTH_FILE", type=click.Path(dir_okay=False),
                     help="The daemon's --health-file, if it was given one."),
    ]):
        command = option(command)
    return command


@click.command("check")
@daemon_options
@click.option("--max-age", type=click.FloatRange(1), default=60.0, show_default=True,
              help="Seconds after which a health file that has not been refreshed counts as stuck.")
def check_command(transport: str, queue_url: str | None, mns_endpoint: str | None, mns_queue: str | None,
                  state: str, health_file: str | None, max_age: float) -> None:
    """Health check of a daemon on this machine (container HEALTHCHECK, systemd, monitoring): exit 0
    when its health file is fresh and its last receive from the queue worked, 1 otherwise, saying
    why; either way it says which daemon it read.

    \b
    Name the daemon as `run` was given it:
      cfn-provider check --config /etc/cfn-provider/config.toml

    or through the same CFN_PROVIDER_* variables (a container's HEALTHCHECK inherits them). Each
    daemon keeps its own health file, named after its queue, beside its SQLite state file (else in
    the state directory). Named by nothing, check reads the only health file there, and refuses
    to guess between several."""
    from . import health

    daemon = daemon_id(transport, queue_url, mns_endpoint, mns_queue)
    path, why = health.locate(state, health_file, daemon)
    if path is None:
        click.echo(why, err=True)
        sys.exit(1)
    ok, why = health.check(path, max_age, expect=daemon)
    click.echo(why, err=not ok)
    sys.exit(0 if ok else 1)


@click.command("redrive")
@config_option
@click.option("--queue-url", required=True, envvar=ENV + "QUEUE_URL", help="The queue the daemon serves.")
@click.option("--dlq-url", help="Its dead-letter queue (default: found from the queue's RedrivePolicy).")
@region_option
@click.option("--max", "limit", type=click.IntRange(0), default=0, help="Move at most this many (0: all).")
@click.option("--dry-run", is_flag=True, help="List what would be moved; move nothing.")
def redrive_command(queue_url: str, dlq_url: str | None, region: str | None, limit: int, dry_run: bool) -> None:
    """Move messages from the dead-letter queue back to the queue, after a fix.

    Requests already answered are recognised by the idempotency store and not run again.
    Each message is listed by its request's type, ResourceType, logical id and RequestId.
    --config FILE reads the daemon's own file (its queue-url and region)."""
    import boto3

    from .redrive import dead_letter_queue_url, redrive as move

    sqs = boto3.client("sqs", region_name=region)
    try:
        dlq_url = dlq_url or dead_letter_queue_url(sqs, queue_url)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    verb = "would move" if dry_run else "moved"
    count = move(sqs, queue_url, dlq_url, limit, dry_run, lambda m: click.echo(f"{verb} {m.message_id}: {m.preview}"))
    click.echo(f"{count} message(s) {verb} from {dlq_url} to {queue_url}")

"""The operator commands about a running daemon: `cfn-provider check` (its health), `redrive` (its
dead-letter queue) and `invoke` (a smoke test through its topic); click wiring, the work is in
cfn_provider.ops.health, .redrive, .invoke and .invoke_stack. Each reads the daemon's own --config file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ..aws_start import require, resolve_region
from ..cli_options import (
    DLQ_URL_HELP,
    HEALTH_FILE_HELP,
    QUEUE_URL_HELP,
    STATE_HELP,
    property_options,
    state_default,
)
from ..config import daemon_id, default_state_url
from ..transports import Transport
from .commands import config_option, region_option
from .daemon_name import NAME_OPTIONS

ENV = "CFN_PROVIDER_"


def daemon_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a daemon, as `run` takes them (flag, CFN_PROVIDER_* variable or the
    --config file): its queue, and where it keeps its state."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        config_option,
        *NAME_OPTIONS,
        click.option("--state", envvar=ENV + "STATE", show_default=state_default(), help=STATE_HELP),
        click.option(
            "--health-file",
            envvar=ENV + "HEALTH_FILE",
            type=click.Path(dir_okay=False),
            help=HEALTH_FILE_HELP,
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("check")
@daemon_options
@click.option(
    "--max-age",
    type=click.FloatRange(1),
    default=60.0,
    show_default=True,
    help="Seconds after which a health file that has not been refreshed counts as stuck.",
)
@click.option(
    "--local-faults-only",
    is_flag=True,
    help="Fail only on this machine's faults (no health file, a stale one); a failing receive is "
    "reported but exits 0: what an instance's self-report to its Auto Scaling group uses.",
)
def check_command(
    transport: Transport,
    queue_url: str | None,
    mns_endpoint: str | None,
    mns_queue: str | None,
    web_address: str,
    web_port: int,
    state: str | None,
    health_file: str | None,
    max_age: float,
    local_faults_only: bool,
) -> None:
    """Health check of a daemon on this machine (container HEALTHCHECK, systemd, monitoring): exit 0
    when its health file is fresh and its last receive from the queue worked, 1 otherwise, saying
    why; either way it says which daemon it read.

    \b
    Name the daemon as `run` was given it:
      cfn-provider check --config /etc/cfn-provider/config.toml

    or through the same CFN_PROVIDER_* variables (a container's HEALTHCHECK inherits them). Each
    daemon keeps its own health file, named after its queue, beside its SQLite state file (else in
    the state directory). Named by nothing, check reads the only health file there, and refuses
    to guess between several. --local-faults-only: a fresh file is healthy even when the last
    receive failed (an SQS or network outage is no reason to replace the machine)."""
    from . import health

    daemon = daemon_id(transport, queue_url, mns_endpoint, mns_queue, f"{web_address}:{web_port}")
    path, why = health.locate(state or default_state_url(daemon), health_file, daemon)
    if path is None:
        click.echo(why, err=True)
        sys.exit(1)
    ok, why = health.check(path, max_age, expect=daemon, local_only=local_faults_only)
    click.echo(why, err=not ok)
    sys.exit(0 if ok else 1)


@click.command("redrive")
@config_option
@click.option("--queue-url", envvar=ENV + "QUEUE_URL", help=QUEUE_URL_HELP)
@click.option("--dlq-url", help=DLQ_URL_HELP)
@region_option
@click.option(
    "--max", "limit", type=click.IntRange(0), default=0, show_default=True, help="Move at most this many (0: all)."
)
@click.option("--dry-run", is_flag=True, help="List what would be moved; move nothing.")
def redrive_command(queue_url: str | None, dlq_url: str | None, region: str | None, limit: int, dry_run: bool) -> None:
    """Move messages from the dead-letter queue back to the queue, after a fix.

    Requests already answered are recognised by the idempotency store and not run again.
    Each message is listed by its request's type, ResourceType, logical id and RequestId.
    --config FILE reads the daemon's own file (its queue-url and region)."""
    import boto3

    if not queue_url:
        raise click.UsageError("name the daemon's queue: --queue-url URL, or --config FILE (its queue-url)")
    from .redrive import dead_letter_queue_url
    from .redrive import redrive as move

    region = resolve_region(region, queue_url, ())
    require(region, "the SQS queue")
    sqs = boto3.client("sqs", region_name=region)
    try:
        dlq_url = dlq_url or dead_letter_queue_url(sqs, queue_url)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    verb = "would move" if dry_run else "moved"
    count = move(sqs, queue_url, dlq_url, limit, dry_run, lambda m: click.echo(f"{verb} {m.message_id}: {m.preview}"))
    click.echo(f"{count} message(s) {verb} from {dlq_url} to {queue_url}")


@click.command("invoke")
@config_option
@click.option(
    "--topic-arn",
    "topic_arn",
    multiple=True,
    envvar=ENV + "TOPIC_ARN",
    metavar="ARN",
    help="The ServiceToken: the topic the daemon's queue is subscribed to (default: the daemon's own "
    "--topic-arn, from --config or CFN_PROVIDER_TOPIC_ARN, when it names exactly one).",
)
@click.option(
    "--resource-type",
    default=None,
    metavar="TYPE",
    help="The ResourceType to send: one the daemon serves, to run its handler's create and delete. "
    "Default: a ping (Custom::CfnProviderPing, which nothing serves): answered FAILED 'no handler' "
    "without running any handler.",
)
@property_options
@click.option(
    "--response-bucket",
    metavar="BUCKET[/PREFIX]",
    help="Publish straight to the topic, with ResponseURLs presigned in this bucket of yours (default "
    "prefix cfn-provider-invoke/). The daemon answers only if it runs with --allow-response-url "
    "for that prefix (printed); meant for emulators and staging daemons.",
)
@click.option(
    "--stack-name",
    metavar="NAME",
    help="Through CloudFormation: the stack's name (default: cfn-provider-invoke-<random>).",
)
@click.option(
    "--timeout",
    type=click.IntRange(5, 3600),
    default=60,
    show_default=True,
    metavar="SECONDS",
    help="The requests' ServiceTimeout: the daemon answers each within it (a handler still running is "
    "answered FAILED), and CloudFormation waits no longer than it.",
)
@click.option("--keep", is_flag=True, help="Send no Delete: keep the stack, or what the Create made.")
@click.option("--queue-url", envvar=ENV + "QUEUE_URL", help=QUEUE_URL_HELP + " invoke: to read its health file.")
@click.option("--state", envvar=ENV + "STATE", show_default=state_default(), help=STATE_HELP)
@click.option("--health-file", envvar=ENV + "HEALTH_FILE", type=click.Path(dir_okay=False), help=HEALTH_FILE_HELP)
@click.option("--poll-interval", type=click.FloatRange(0.05, 60), default=2.0, hidden=True)
def invoke_command(
    topic_arn: tuple[str, ...],
    resource_type: str | None,
    properties: tuple[str, ...],
    properties_json: str | None,
    response_bucket: str | None,
    stack_name: str | None,
    timeout: int,
    keep: bool,
    queue_url: str | None,
    state: str | None,
    health_file: str | None,
    poll_interval: float,
) -> None:
    """Smoke-test a running daemon: send it a Create (then the Delete that cleans up after it) the
    way CloudFormation does, wait for each answer and print it.

    \b
      cfn-provider invoke --config /etc/cfn-provider/config.toml
      cfn-provider invoke --topic-arn ARN --resource-type Custom::Echo --property Colour=blue

    A request the daemon answers must be signed by SNS (it verifies every notification: a message
    put straight on its queue is refused as forged) and must name a ResponseURL it accepts (by
    default only CloudFormation's own response buckets). So by default invoke goes through
    CloudFormation: it creates a one-resource stack whose ServiceToken is the topic, then deletes
    it, exactly the path of a real stack, with nothing changed on the daemon (it needs
    cloudformation:CreateStack, DescribeStacks, DescribeStackEvents and DeleteStack). CloudFormation
    shows a FAILED answer's Reason, not Data. With --response-bucket it publishes to the topic itself
    (sns:Publish, and s3:GetObject/PutObject/DeleteObject on the bucket): quicker, shows the whole
    answer, but the daemon must allow that bucket's URL prefix (an emulator, a staging daemon).

    Exit 0 when every request got the answer expected (SUCCESS; a ping's 'no handler'), 1 when
    the daemon answered otherwise, 2 when an answer did not come (or invoke could not run). When
    no answer comes, invoke reads what the daemon on this machine recorded in its health file (named
    by --config, or --queue-url and --state, as for check) about the messages it refused, and names
    the likely cause (a signature it could not verify, a ResponseURL or topic it does not accept)."""
    import uuid

    import boto3
    import botocore.exceptions

    from .invoke import PING_TYPE, STACK_PREFIX, InvokeError, TopicInvoke, parse_properties, verdict
    from .invoke_stack import StackInvoke

    rtype = resource_type or PING_TYPE
    try:
        if len(topic_arn) != 1:
            raise InvokeError(
                "name the topic to publish to with --topic-arn ARN (the daemon's ServiceToken)"
                if not topic_arn
                else f"the daemon accepts {len(topic_arn)} topics: name one with --topic-arn"
            )
        props = parse_properties(properties, properties_json)
        session = boto3.Session()
        if response_bucket:
            bucket, _, prefix = response_bucket.partition("/")
            prefix = prefix.strip("/") + "/" if prefix.strip("/") else f"{STACK_PREFIX}/"
            refusals = _refusals(state, health_file, queue_url)
            topic = TopicInvoke(
                session, topic_arn[0], bucket, prefix, timeout, click.echo, min(poll_interval, 0.25), refusals
            )
            click.echo(f"invoke: {rtype} through the topic {topic_arn[0]}; answers to {topic.allowed_prefix()}")
            answers = topic.run(rtype, props, keep)
        else:
            name = stack_name or f"{STACK_PREFIX}-{uuid.uuid4().hex[:8]}"
            click.echo(f"invoke: {rtype} through CloudFormation, ServiceToken {topic_arn[0]}")
            answers = StackInvoke(session, topic_arn[0], name, timeout, click.echo, poll_interval).run(
                rtype, props, keep
            )
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise InvokeError(f"invoke: AWS: {exc}") from None  # the one error path: `cfn-provider: <why>`, exit 2
    code, closing = verdict(answers, rtype)
    click.echo(closing, err=code != 0)
    sys.exit(code)


def _refusals(
    state: str | None, health_file: str | None, queue_url: str | None
) -> Callable[[float], tuple[str, list[Any]]]:
    """What the daemon's health file (as `check` finds it) says it refused since a time: (its path, refusals)."""
    from . import health

    def since(when: float) -> tuple[str, list[Any]]:
        daemon = daemon_id("sqs", queue_url)
        path, _ = health.locate(state or default_state_url(daemon), health_file, daemon)
        return (str(path), health.refusals_since(path, when)) if path else ("", [])

    return since

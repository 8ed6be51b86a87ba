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
from ..config import daemon_id, default_state_url
from ..dialects.ros_web_options import WEB_LISTEN_OPTIONS
from ..transports import TRANSPORTS, Transport
from .commands import config_option, region_option

ENV = "CFN_PROVIDER_"


def daemon_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a daemon, as `run` takes them (flag, CFN_PROVIDER_* variable or the
    --config file): its queue, and where it keeps its state."""
    for option in reversed(
        [
            config_option,
            click.option(
                "--transport",
                type=click.Choice(TRANSPORTS),
                default="sqs",
                show_default=True,
                envvar=ENV + "TRANSPORT",
                help="As for run.",
            ),
            click.option("--queue-url", envvar=ENV + "QUEUE_URL", help="The daemon's queue (as for run)."),
            click.option(
                "--mns-endpoint", envvar=ENV + "MNS_ENDPOINT", metavar="URL", help="As for run (--transport mns)."
            ),
            click.option("--mns-queue", envvar=ENV + "MNS_QUEUE", metavar="NAME", help="As for run (--transport mns)."),
            *WEB_LISTEN_OPTIONS,
            click.option(
                "--state",
                envvar=ENV + "STATE",
                default=default_state_url,
                show_default="as for run",
                help="The daemon's --state: health files are kept beside a SQLite state file, else in "
                "the state directory.",
            ),
            click.option(
                "--health-file",
                envvar=ENV + "HEALTH_FILE",
                type=click.Path(dir_okay=False),
                help="The daemon's --health-file, if it was given one.",
            ),
        ]
    ):
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
def check_command(
    transport: Transport,
    queue_url: str | None,
    mns_endpoint: str | None,
    mns_queue: str | None,
    web_address: str,
    web_port: int,
    state: str,
    health_file: str | None,
    max_age: float,
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
    to guess between several."""
    from . import health

    daemon = daemon_id(transport, queue_url, mns_endpoint, mns_queue, f"{web_address}:{web_port}")
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
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A ResourceProperties entry (repeatable; a string, as CloudFormation sends scalars).",
)
@click.option("--properties-json", metavar="JSON", help="ResourceProperties as a JSON object (--property adds to it).")
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
    the daemon answered otherwise, 2 when an answer did not come (or invoke could not run)."""
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
            topic = TopicInvoke(
                session, topic_arn[0], bucket, prefix, timeout, click.echo, poll=min(poll_interval, 0.25)
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
        click.echo(f"cfn-provider invoke: AWS: {exc}", err=True)
        sys.exit(2)
    code, closing = verdict(answers, rtype)
    click.echo(closing, err=code != 0)
    sys.exit(code)

"""`cfn-provider run` options for the transport and Alibaba Cloud ROS (applied in cfn_provider.cli), and
APPLIES_TO: which transports each transport-specific option applies to (one given for another is refused)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from .cli_options import MNS_ENDPOINT_HELP, MNS_QUEUE_HELP, TRANSPORT_HELP
from .dialects.ros import URL_MODES
from .transports import TRANSPORTS, Transport
from .transports.mns import plain_http_refused
from .trust.topics import FORM, allowlist
from .web_options import WEB_ONLY, WEB_OPTIONS, web_settings

ENV = "CFN_PROVIDER_"

# The `run` options that apply to some transports only (by parameter name) and the transports they
# apply to; every option not named here applies to all. Given (on the command line, in the
# environment or in the --config file) with another --transport, an option is refused rather than
# silently ignored: an operator who sets --topic-arn on MNS believes topics are checked.
APPLIES_TO: dict[str, tuple[Transport, ...]] = {
    "queue_url": ("sqs",),
    "topic_arn": ("sqs",),
    "verify_signatures": ("sqs",),
    "trust_signing_cert_url": ("sqs",),
    "mns_endpoint": ("mns",),
    "mns_queue": ("mns",),
    "mns_allow_http": ("mns",),
    "mns_topic": ("mns",),
    "mns_allow_bare_messages": ("mns",),
    "ros_response_url": ("mns", "web"),
    "dead_letter_interval": ("sqs", "mns"),
    "tenant_topic": ("sqs", "mns"),
    **{name: ("web",) for name in WEB_ONLY},
}

RUN_OPTIONS = [
    click.option(
        "--transport",
        type=click.Choice(TRANSPORTS),
        default="sqs",
        show_default=True,
        envvar=ENV + "TRANSPORT",
        help=TRANSPORT_HELP + " Options of another transport are refused.",
    ),
    click.option(
        "--mns-endpoint",
        envvar=ENV + "MNS_ENDPOINT",
        metavar="URL",
        help=MNS_ENDPOINT_HELP + " Credentials come from "
        "ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET or ~/.alibabacloud/credentials.",
    ),
    click.option(
        "--mns-allow-http",
        is_flag=True,
        default=False,
        envvar=ENV + "MNS_ALLOW_HTTP",
        help="Allow an http:// --mns-endpoint (a local emulator or test server only): every MNS "
        "request carries the AccessKey id, a replayable signature and any STS security "
        "token, which plain http shows to the network.",
    ),
    click.option(
        "--mns-queue",
        envvar=ENV + "MNS_QUEUE",
        metavar="NAME",
        help=MNS_QUEUE_HELP,
    ),
    click.option(
        "--mns-topic",
        "mns_topic",
        multiple=True,
        envvar=ENV + "MNS_TOPIC",
        metavar="ARN",
        help=f"With --transport mns: serve notifications only from this topic ({FORM}, the ServiceToken "
        "ROS publishes to; repeatable). Then messages that are not topic notifications are refused "
        "unless --mns-allow-bare-messages. Default: any topic, and bare messages, with a warning.",
    ),
    click.option(
        "--mns-allow-bare-messages",
        is_flag=True,
        default=False,
        envvar=ENV + "MNS_ALLOW_BARE_MESSAGES",
        help="With --mns-topic: also serve messages sent straight to the queue (a ServiceToken "
        "acs:mns:REGION:ACCOUNT:queues/NAME), which name no topic.",
    ),
    click.option(
        "--ros-response-url",
        type=click.Choice(URL_MODES),
        default="auto",
        show_default=True,
        envvar=ENV + "ROS_RESPONSE_URL",
        help="Which URL answers a ROS request: its IntranetResponseURL, its public ResponseURL, or auto "
        "(inside Alibaba Cloud the intranet one first, the public one on connection errors).",
    ),
]


def ros_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `run` with RUN_OPTIONS and WEB_OPTIONS (in --help they follow the options above them)."""
    for option in reversed([*RUN_OPTIONS, *WEB_OPTIONS]):
        command = option(command)
    return command


def transport_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Settings fields from the options, after checking the transport has what it needs and is
    given nothing that belongs to another."""
    ctx = click.get_current_context()
    refuse_other_transports(ctx, options["transport"])
    if options["transport"] == "sqs" and not options["queue_url"]:
        raise click.MissingParameter(ctx=ctx, param=_param(ctx, "queue_url"))
    if options["transport"] == "mns":
        for name in ("mns_endpoint", "mns_queue"):
            if not options[name]:
                raise click.UsageError(f"--transport mns needs --{name.replace('_', '-')}", ctx)
        if not options["mns_allow_http"] and options["mns_endpoint"].lower().startswith("http://"):
            raise click.UsageError(plain_http_refused(options["mns_endpoint"]), ctx)
        try:
            allowlist(options["mns_topic"], options["mns_endpoint"])
        except ValueError as exc:
            raise click.UsageError(str(exc), ctx) from None
    return {
        "queue_url": options["queue_url"] or "",
        "transport": options["transport"],
        "mns_endpoint": options["mns_endpoint"],
        "mns_queue": options["mns_queue"],
        "ros_response_url": options["ros_response_url"],
        "mns_allow_http": options["mns_allow_http"],
        "mns_topics": tuple(options["mns_topic"]),
        "mns_allow_bare_messages": options["mns_allow_bare_messages"],
        **({"web": web_settings(options, ctx)} if options["transport"] == "web" else {}),
    }


_GIVEN = {ParameterSource.COMMANDLINE: "on the command line", ParameterSource.DEFAULT_MAP: "in the --config file"}


def refuse_other_transports(ctx: click.Context, transport: Transport) -> None:
    """A UsageError for the first option of APPLIES_TO given although it does not apply to `transport`."""
    for param in ctx.command.params:
        applies = APPLIES_TO.get(param.name or "")
        source = ctx.get_parameter_source(param.name or "")
        if applies is None or transport in applies or source in (None, ParameterSource.DEFAULT):
            continue
        given = f"by {param.envvar}" if source is ParameterSource.ENVIRONMENT else _GIVEN.get(source, str(source))
        name = "/".join(param.opts + param.secondary_opts)
        raise click.UsageError(
            f"{name} applies to --transport {' or '.join(applies)} only, not {transport} "
            f"(it was given {given}): remove it",
            ctx,
        )


def _param(ctx: click.Context, name: str) -> click.Parameter | None:
    return next((p for p in ctx.command.params if p.name == name), None)

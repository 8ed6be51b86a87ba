"""`cfn-provider run` options for the transport and Alibaba Cloud ROS (applied in cfn_provider.cli)."""
from __future__ import annotations

from typing import Any, Callable

import click

from .ros import URL_MODES
from .ros_web_options import WEB_OPTIONS, refuse_other_transports, web_settings

ENV = "CFN_PROVIDER_"

RUN_OPTIONS = [
    click.option("--transport", type=click.Choice(["sqs", "mns", "web"]), default="sqs", show_default=True,
                 envvar=ENV + "TRANSPORT",
                 help="Where requests come from: sqs (--queue-url; CloudFormation through SNS), mns (--mns-endpoint "
                      "and --mns-queue; Alibaba Cloud ROS) or web (an HTTP(S) listener for ROS's web[sync,idempotent]:URL "
                      "ServiceToken: the --web-* options; print the ServiceToken with `cfn-provider web-token`)."),
    click.option("--mns-endpoint", envvar=ENV + "MNS_ENDPOINT", metavar="URL",
                 help="With --transport mns: https://ACCOUNT.mns.REGION.aliyuncs.com. Credentials come from "
                      "ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET or ~/.alibabacloud/credentials."),
    click.option("--mns-allow-http", is_flag=True, default=False, envvar=ENV + "MNS_ALLOW_HTTP",
                 help="Allow an http:// --mns-endpoint (a local emulator or test server only): every MNS "
                      "request carries the AccessKey id, a replayable signature and any STS security "
                      "token, which plain http shows to the network."),
    click.option("--mns-queue", envvar=ENV + "MNS_QUEUE", metavar="NAME",
                 help="With --transport mns: the queue ROS sends to (ServiceToken acs:mns:REGION:ACCOUNT:queues/NAME)."),
    click.option("--ros-response-url", type=click.Choice(URL_MODES), default="auto", show_default=True,
                 envvar=ENV + "ROS_RESPONSE_URL",
                 help="Which URL answers a ROS request: its IntranetResponseURL, its public ResponseURL, or auto "
                      "(inside Alibaba Cloud the intranet one first, the public one on connection errors)."),
]


def ros_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `run` with RUN_OPTIONS and WEB_OPTIONS (in --help they follow the options above them)."""
    for option in reversed([*RUN_OPTIONS, *WEB_OPTIONS]):
        command = option(command)
    return command


def transport_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Settings fields from the options, after checking the transport has what it needs."""
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
    web = web_settings(options, ctx) if options["transport"] == "web" else None
    return {"queue_url": options["queue_url"] or "", "transport": options["transport"],
            "mns_endpoint": options["mns_endpoint"], "mns_queue": options["mns_queue"],
            "ros_response_url": options["ros_response_url"], "mns_allow_http": options["mns_allow_http"],
            **({"web": web} if web else {})}


def plain_http_refused(endpoint: str) -> str:
    """The error for an http:// MNS endpoint without --mns-allow-http."""
    return (f"--mns-endpoint {endpoint!r} is plain http: every MNS request carries the AccessKey id, a "
            "replayable signature and any STS security token in clear. Use https://ACCOUNT.mns.REGION.aliyuncs.com, "
            "or pass --mns-allow-http (CFN_PROVIDER_MNS_ALLOW_HTTP=1) for a local emulator.")


def _param(ctx: click.Context, name: str) -> click.Parameter | None:
    return next((p for p in ctx.command.params if p.name == name), None)

"""`cfn-provider run`'s options, and the Settings they make (the transport's and ROS's options are in
cfn_provider.ros_options; `--function` in cfn_provider.functions.options)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .aws_start import resolve_region
from .cli_options import (
    ALLOW_RESPONSE_URL_HELP,
    CONFIG_HELP,
    HANDLER_HELP,
    HANDLER_PATH_HELP,
    HEALTH_FILE_HELP,
    QUEUE_URL_HELP,
    REGION_HELP,
    STATE_HELP,
    TRUST_SIGNING_CERT_URL_HELP,
    VERIFY_SIGNATURES_HELP,
    state_default,
)
from .config import Settings, apply_config_file, daemon_id, default_state_url
from .functions.options import check_served, function_option
from .functions.sandbox import MODES as SANDBOX_MODES
from .pipeline.router import parse_handler_option
from .ros_options import ros_options, transport_settings

ENV = "CFN_PROVIDER_"


def _load_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    if path:
        apply_config_file(ctx, path, strict=True)
    return path


def parse_handlers(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str | None], ...]:
    """--handler's callback (run, handlers): each TYPE=MODULE[:ATTR] parsed, or a clear BadParameter."""
    try:
        return tuple(parse_handler_option(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option(
        "--config",
        type=click.Path(dir_okay=False),
        callback=_load_config,
        is_eager=True,
        expose_value=False,
        envvar=ENV + "CONFIG",
        help=CONFIG_HELP,
    ),
    click.option(
        "--queue-url",
        envvar=ENV + "QUEUE_URL",
        help=QUEUE_URL_HELP,
    ),
    click.option("--region", envvar=ENV + "REGION", help=REGION_HELP),
    click.option(
        "--topic-arn",
        "topic_arn",
        multiple=True,
        envvar=ENV + "TOPIC_ARN",
        help="Accept SNS notifications only from this topic (repeatable; --transport sqs, MNS topics are "
        "--mns-topic). Default: any topic, with a warning.",
    ),
    click.option(
        "--handler",
        "handler",
        multiple=True,
        callback=parse_handlers,
        envvar=ENV + "HANDLER",
        metavar="TYPE=MODULE[:ATTR]",
        help=HANDLER_HELP,
    ),
    function_option(),
    click.option(
        "--handler-path",
        "handler_path",
        multiple=True,
        envvar=ENV + "HANDLER_PATH",
        metavar="DIR",
        type=click.Path(file_okay=False),
        help=HANDLER_PATH_HELP,
    ),
    click.option(
        "--tenant-handler",
        "tenant_handler",
        multiple=True,
        envvar=ENV + "TENANT_HANDLER",
        metavar="NAME=TYPE",
        help="Give the tenant NAME (a web token's name, or the tenant of --tenant-topic) the handler of TYPE "
        "(or a glob) among those served (repeatable); a tenant named here gets only those, others get every "
        "one served. Config: [tenants.NAME] handlers = [...].",
    ),
    click.option(
        "--tenant-topic",
        "tenant_topic",
        multiple=True,
        envvar=ENV + "TENANT_TOPIC",
        metavar="NAME=TOPIC",
        help="Requests through this SNS TopicArn (--transport sqs) or MNS topic (mns) are the tenant NAME's "
        "(repeatable); any other topic's are the tenant default's. Config: [tenants.NAME] topics = [...].",
    ),
    click.option(
        "--state",
        envvar=ENV + "STATE",
        show_default=state_default(),
        help=STATE_HELP,
    ),
    click.option(
        "--concurrency",
        type=click.IntRange(1, 1024),
        default=32,
        show_default=True,
        envvar=ENV + "CONCURRENCY",
        help="Requests worked on at once; a receive never asks for more messages than there are free slots.",
    ),
    click.option(
        "--visibility-timeout",
        type=click.IntRange(5, 43200),
        default=60,
        show_default=True,
        envvar=ENV + "VISIBILITY_TIMEOUT",
        help="Seconds a received message stays hidden (--transport web: a request's store lease); "
        "renewed every third of it while in flight.",
    ),
    click.option(
        "--grace-period",
        type=click.FloatRange(0, 3600),
        default=30.0,
        show_default=True,
        envvar=ENV + "GRACE_PERIOD",
        help="On SIGTERM/SIGINT, seconds in-flight requests get to finish before they are handed "
        "back to the queue (or answered FAILED when their deadline is too near), counted from "
        "the signal. The long poll open at the signal (up to 20 s) ends meanwhile, its messages "
        "handed straight back, so the process exits after the longer of the two.",
    ),
    click.option(
        "--verify-signatures/--no-verify-signatures",
        default=True,
        show_default=True,
        envvar=ENV + "VERIFY_SIGNATURES",
        help=VERIFY_SIGNATURES_HELP + " Off: raw delivery is accepted and trust rests on the queue policy.",
    ),
    click.option(
        "--allow-response-url",
        "allow_response_url",
        multiple=True,
        envvar=ENV + "ALLOW_RESPONSE_URL",
        metavar="PREFIX",
        help=ALLOW_RESPONSE_URL_HELP,
    ),
    click.option(
        "--trust-signing-cert-url",
        "trust_signing_cert_url",
        multiple=True,
        metavar="PREFIX",
        envvar=ENV + "TRUST_SIGNING_CERT_URL",
        help=TRUST_SIGNING_CERT_URL_HELP,
    ),
    click.option(
        "--health-file",
        envvar=ENV + "HEALTH_FILE",
        type=click.Path(dir_okay=False),
        help=HEALTH_FILE_HELP,
    ),
    click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        envvar=ENV + "METRICS_PORT",
        help="Serve Prometheus metrics on this port (off by default).",
    ),
    click.option(
        "--metrics-address",
        default="127.0.0.1",
        show_default=True,
        envvar=ENV + "METRICS_ADDRESS",
        help="Address the metrics endpoint listens on (0.0.0.0: every interface; the endpoint has "
        "no authentication, so expose it only to the scraper).",
    ),
    click.option(
        "--dead-letter-interval",
        type=click.FloatRange(0, 86400),
        default=60.0,
        show_default=True,
        envvar=ENV + "DEAD_LETTER_INTERVAL",
        metavar="SECONDS",
        help="How often to look in the queue's dead-letter queue (from its RedrivePolicy) and answer "
        "FAILED to each request left there unanswered, saying where to look (the store decides "
        "who answers: safe on every fleet member). 0 turns it off.",
    ),
    click.option(
        "--poll-interval",
        type=click.FloatRange(0.1, 300),
        default=5.0,
        show_default=True,
        envvar=ENV + "POLL_INTERVAL",
        metavar="SECONDS",
        help="How often to look in the store for long-running requests whose next poll is due "
        "(a poll this daemon scheduled itself runs on time regardless).",
    ),
    click.option(
        "--event-loop",
        type=click.Choice(["auto", "asyncio", "uvloop"]),
        default="auto",
        show_default=True,
        envvar=ENV + "EVENT_LOOP",
        help="auto: uvloop where it is installed (Linux/macOS CPython), else asyncio's own loop; "
        "uvloop: that or an error.",
    ),
    click.option(
        "--function-sandbox",
        type=click.Choice(SANDBOX_MODES),
        default="best-effort",
        show_default=True,
        envvar=ENV + "FUNCTION_SANDBOX",
        help="lambda: functions' filesystem sandbox (Landlock): best-effort where the kernel has it; "
        "required: refuse to start without it; off. See docs/security.md.",
    ),
    click.option("--wait-seconds", type=click.IntRange(0, 20), default=20, hidden=True, envvar=ENV + "WAIT_SECONDS"),
    click.option(
        "--max-backoff", type=click.FloatRange(0.1, 300), default=20.0, hidden=True, envvar=ENV + "MAX_BACKOFF"
    ),
    click.option(
        "--log-format",
        type=click.Choice(["auto", "json", "console"]),
        default="auto",
        show_default=True,
        envvar=ENV + "LOG_FORMAT",
        help="auto: console on a terminal, JSON otherwise.",
    ),
    click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
        default="info",
        show_default=True,
        envvar=ENV + "LOG_LEVEL",
        help="The lowest level of the log lines written.",
    ),
]


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `run` with OPTIONS, then the transport's and ROS's (in --help, in that order)."""
    command = ros_options(command)
    for option in reversed(OPTIONS):
        command = option(command)
    return command


def _daemon(transport: dict[str, Any]) -> str | None:
    """The daemon's id (config.daemon_id) from its transport's settings."""
    web = transport.get("web")
    listen = f"{web.address}:{web.port}" if web is not None else None
    return daemon_id(
        transport["transport"], transport["queue_url"], transport["mns_endpoint"], transport["mns_queue"], listen
    )


def settings_from(options: dict[str, Any]) -> Settings:
    """The daemon's Settings from `run`'s options (`log_format` and `log_level` are taken out before),
    once the transport has what it needs and every --function setting is a lambda: handler's."""
    transport = transport_settings(options)
    check_served(options["handler"], options["function"])
    return Settings(
        **transport,
        region=resolve_region(options["region"], options["queue_url"], options["topic_arn"]),
        topic_arns=options["topic_arn"],
        handlers=options["handler"],
        handler_paths=options["handler_path"],
        state=options["state"] or default_state_url(_daemon(transport)),
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
        tenant_handlers=options["tenant_handler"],
        tenant_topics=options["tenant_topic"],
        function_sandbox=options["function_sandbox"],
    )

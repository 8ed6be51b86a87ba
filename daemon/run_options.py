"""`cfn-provider run`'s options, and the Settings they make (the transport's and ROS's options are in
cfn_provider.dialects.ros_options; `--function` in cfn_provider.functions.options)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .config import Settings, apply_config_file, default_state_url
from .dialects.ros_options import ros_options, transport_settings
from .functions.options import check_served, function_option
from .pipeline.router import parse_handler_option

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
        help='TOML file with any of these options (e.g. queue-url = "...", [handlers] table).',
    ),
    click.option(
        "--queue-url",
        envvar=ENV + "QUEUE_URL",
        help="SQS queue subscribed to the ServiceToken topic (required with --transport sqs).",
    ),
    click.option(
        "--region", envvar=ENV + "REGION", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile)."
    ),
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
        help="Serve ResourceType TYPE (or a glob like 'Custom::Acme*') with a module or object "
        "having create/update/delete (repeatable). A bare TYPE serves the built-in or "
        "installed entry point (group cfn_provider.handlers) registered as TYPE, e.g. "
        "--handler Custom::RandomSecret. Nothing else is served: installed handlers are "
        "only available to name (see `cfn-provider handlers`).",
    ),
    function_option(),
    click.option(
        "--handler-path",
        "handler_path",
        multiple=True,
        envvar=ENV + "HANDLER_PATH",
        metavar="DIR",
        type=click.Path(file_okay=False),
        help="Also import handler modules from this folder (repeatable; "
        "in the environment a PATH-style list). Never from the working directory unless named here.",
    ),
    click.option(
        "--state",
        envvar=ENV + "STATE",
        default=default_state_url,
        show_default="sqlite under the state directory",
        help="Idempotency store: sqlite:///ABSOLUTE/PATH.db (or, in fleet mode, dynamodb://TABLE).",
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
        help="Check each SNS notification's signature (--transport sqs). Off: raw delivery is accepted and "
        "trust rests on the queue policy.",
    ),
    click.option(
        "--allow-response-url",
        "allow_response_url",
        multiple=True,
        envvar=ENV + "ALLOW_RESPONSE_URL",
        metavar="PREFIX",
        help="Also allow ResponseURLs under this URL prefix (e.g. an emulator). "
        "Default: only CloudFormation's own response buckets "
        "(cloudformation-custom-resource-response-REGION on S3, https).",
    ),
    click.option(
        "--trust-signing-cert-url",
        "trust_signing_cert_url",
        multiple=True,
        metavar="PREFIX",
        envvar=ENV + "TRUST_SIGNING_CERT_URL",
        help="For emulators and tests only: also fetch SNS signing certificates from this URL prefix.",
    ),
    click.option(
        "--health-file",
        envvar=ENV + "HEALTH_FILE",
        type=click.Path(dir_okay=False),
        help="Where the daemon keeps its liveness file for `cfn-provider check` "
        "(default: beside the SQLite state file, else in the state directory).",
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
        type=click.Choice(["best-effort", "required", "off"]),
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
    ),
]


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate `run` with OPTIONS, then the transport's and ROS's (in --help, in that order)."""
    command = ros_options(command)
    for option in reversed(OPTIONS):
        command = option(command)
    return command


def settings_from(options: dict[str, Any]) -> Settings:
    """The daemon's Settings from `run`'s options (`log_format` and `log_level` are taken out before),
    once the transport has what it needs and every --function setting is a lambda: handler's."""
    transport = transport_settings(options)
    check_served(options["handler"], options["function"])
    return Settings(
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
        function_sandbox=options["function_sandbox"],
    )

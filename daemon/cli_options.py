"""The help texts of the options several commands share, written once: a command shows the text as
it is, or adds a note of its own after it (tests/test_cli_options.py walks every command's options:
each names its default, and a shared option reads the same everywhere)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .config import default_state_dir
from .functions.options import HELP as FUNCTION_HELP

CONFIG_HELP = (
    "The daemon's TOML config file, as `run` reads it (any of run's options, e.g. queue-url = \"...\", "
    "and a [handlers] table); other commands use the settings they share with run."
)
REGION_HELP = (
    "AWS region (default: AWS_REGION, else AWS_DEFAULT_REGION, else the AWS profile's; run and redrive: "
    "else the one the queue URL names)."
)
QUEUE_URL_HELP = (
    "The daemon's SQS queue, subscribed to the ServiceToken topic (run: required with --transport sqs; "
    "default: the --config file's queue-url)."
)
STATE_HELP = (
    "The daemon's idempotency store: sqlite:///ABSOLUTE/PATH.db, or dynamodb://TABLE in fleet mode "
    "(listing a table needs dynamodb:Scan). Health files are kept beside a SQLite file."
)
HEALTH_FILE_HELP = (
    "The daemon's liveness file, read by `cfn-provider check` (default: beside the SQLite state file, "
    "else in the state directory)."
)
HANDLER_HELP = (
    "Serve ResourceType TYPE (or a glob like 'Custom::Acme*') with a module or object having "
    "create/update/delete (repeatable). A bare TYPE serves the built-in or installed entry point (group "
    "cfn_provider.handlers) registered as TYPE, e.g. --handler Custom::RandomSecret. Nothing else is "
    "served: installed handlers are only available to name (see `cfn-provider handlers`)."
)
HANDLER_PATH_HELP = (
    "Also import handler modules from this folder (repeatable; in the environment a PATH-style list). "
    "Never from the working directory unless named here."
)
ALLOW_RESPONSE_URL_HELP = (
    "Also allow ResponseURLs under this URL prefix (e.g. an emulator; repeatable). Default: only "
    "CloudFormation's own response buckets (cloudformation-custom-resource-response-REGION on S3, https)."
)
TRUST_SIGNING_CERT_URL_HELP = (
    "For emulators and tests only: also fetch SNS signing certificates from this URL prefix (repeatable; "
    "default: only sns.REGION.amazonaws.com over https)."
)
VERIFY_SIGNATURES_HELP = "Check each SNS notification's signature (--transport sqs)."
DLQ_URL_HELP = "The queue's dead-letter queue (default: found from the queue's RedrivePolicy)."
LOGS_HELP = "Also show the daemon's own log lines (handler tracebacks included) on stderr."
WEB_ADDRESS_HELP = "The address the daemon (--transport web) listens on (127.0.0.1: this machine only)."
WEB_PORT_HELP = "The port the daemon (--transport web) listens on (0: any free one)."
TRANSPORT_HELP = (
    "Where requests come from, which decides the dialect of every request: sqs (--queue-url; "
    "CloudFormation through SNS), mns (--mns-endpoint and --mns-queue; Alibaba Cloud ROS) or web "
    "(an HTTP(S) listener for ROS's web[sync,idempotent]:URL ServiceToken: the --web-* options; "
    "print the ServiceToken with `cfn-provider web-token`)."
)
MNS_ENDPOINT_HELP = "With --transport mns: https://ACCOUNT.mns.REGION.aliyuncs.com."
MNS_QUEUE_HELP = "With --transport mns: the queue ROS sends to (ServiceToken acs:mns:REGION:ACCOUNT:queues/NAME)."
PARAMETER_HELP = "A template parameter KEY=VALUE (repeatable); others take their Default."
PROPERTY_HELP = "A ResourceProperties entry (repeatable; a string, as CloudFormation sends scalars)."
PROPERTIES_JSON_HELP = "ResourceProperties as a JSON object (--property adds to it)."

F = TypeVar("F", bound=Callable[..., Any])


def property_options(command: F) -> F:
    """`--property KEY=VALUE` (repeatable, as `properties`) and `--properties-json`, for the commands
    that send a request of their own (`invoke`, `event`)."""
    command = click.option("--properties-json", metavar="JSON", help=PROPERTIES_JSON_HELP)(command)
    return click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help=PROPERTY_HELP)(command)


def state_default() -> str:
    """--state's default as --help shows it: the paths, in this environment's state directory."""
    where = default_state_dir()
    return (
        f"sqlite://{where}/state-QUEUE-HASH.db, the daemon's own, named after its queue (or address); "
        f"sqlite://{where}/state.db when that file exists or no daemon is named; {where} is "
        f"{_state_dir_source()}"
    )


def _state_dir_source() -> str:
    if os.environ.get("STATE_DIRECTORY"):
        return "systemd's $STATE_DIRECTORY"
    if os.environ.get("XDG_STATE_HOME"):
        return "$XDG_STATE_HOME/cfn-provider"
    return "~/.local/state/cfn-provider"


SHARED = {
    "--config": CONFIG_HELP,
    "--region": REGION_HELP,
    "--queue-url": QUEUE_URL_HELP,
    "--state": STATE_HELP,
    "--health-file": HEALTH_FILE_HELP,
    "--handler": HANDLER_HELP,
    "--handler-path": HANDLER_PATH_HELP,
    "--allow-response-url": ALLOW_RESPONSE_URL_HELP,
    "--trust-signing-cert-url": TRUST_SIGNING_CERT_URL_HELP,
    "--verify-signatures": VERIFY_SIGNATURES_HELP,
    "--dlq-url": DLQ_URL_HELP,
    "--logs": LOGS_HELP,
    "--web-address": WEB_ADDRESS_HELP,
    "--web-port": WEB_PORT_HELP,
    "--transport": TRANSPORT_HELP,
    "--mns-endpoint": MNS_ENDPOINT_HELP,
    "--mns-queue": MNS_QUEUE_HELP,
    "--parameter": PARAMETER_HELP,
    "--function": FUNCTION_HELP,
}

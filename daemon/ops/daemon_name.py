"""The options that name a daemon (its transport and queue, or the address it listens on), as `run`
takes them, for the operator commands that must find its files: its default state file and its
health file are named after it (cfn_provider.config.default_state_url, health_path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..cli_options import MNS_ENDPOINT_HELP, MNS_QUEUE_HELP, QUEUE_URL_HELP, TRANSPORT_HELP
from ..config import daemon_id, default_state_url
from ..transports import TRANSPORTS
from ..web_options import WEB_LISTEN_OPTIONS

ENV = "CFN_PROVIDER_"

NAME_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option(
        "--transport",
        type=click.Choice(TRANSPORTS),
        default="sqs",
        show_default=True,
        envvar=ENV + "TRANSPORT",
        help=TRANSPORT_HELP,
    ),
    click.option("--queue-url", envvar=ENV + "QUEUE_URL", help=QUEUE_URL_HELP),
    click.option("--mns-endpoint", envvar=ENV + "MNS_ENDPOINT", metavar="URL", help=MNS_ENDPOINT_HELP),
    click.option("--mns-queue", envvar=ENV + "MNS_QUEUE", metavar="NAME", help=MNS_QUEUE_HELP),
    *WEB_LISTEN_OPTIONS,
]


def name_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(NAME_OPTIONS):
        command = option(command)
    return command


def daemon_of(options: dict[str, Any]) -> str | None:
    """The daemon's id (config.daemon_id) from NAME_OPTIONS' values."""
    return daemon_id(
        options["transport"],
        options["queue_url"],
        options["mns_endpoint"],
        options["mns_queue"],
        f"{options['web_address']}:{options['web_port']}",
    )


def state_of(state: str | None, options: dict[str, Any]) -> str:
    """--state as given, else the named daemon's default (its own file, or a shared state.db)."""
    return state or default_state_url(daemon_of(options))

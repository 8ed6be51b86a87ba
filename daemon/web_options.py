"""`cfn-provider run` options for transport web (the HTTP(S) listener serving ROS's `web[options]:<url>`
ServiceToken) (applied in cfn_provider.ros_options, whose APPLIES_TO names them web-only)."""

from __future__ import annotations

import os
from typing import Any

import click

from .cli_options import WEB_ADDRESS_HELP, WEB_PORT_HELP
from .trust.sources import networks
from .trust.web_tokens import ENV_TOKEN, TokenError, read_tokens
from .web_settings import (
    MAX_BODY,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_SOURCE,
    WebSettings,
    web_http_refused,
)

ENV = "CFN_PROVIDER_"
WEB_TOKEN_FILE_HELP = (
    "With --transport web: the path tokens, one `NAME TOKEN` line each (NAME the tenant: at most two "
    "tokens of a name valid at once, for rotation; a bare TOKEN line is the tenant `default`; read again "
    f"on SIGHUP). Or {ENV_TOKEN} with the same forms, comma-separated. At least 128 random bits: make one "
    "with `cfn-provider web-token --new --web-token-file FILE` (a tenant's: `--new NAME`)."
)

WEB_LISTEN_OPTIONS = [  # where a web daemon listens, which names it (config.daemon_id): `check` takes them too
    click.option(
        "--web-address",
        default="0.0.0.0",
        show_default=True,
        envvar=ENV + "WEB_ADDRESS",
        metavar="ADDRESS",
        help=WEB_ADDRESS_HELP,
    ),
    click.option(
        "--web-port",
        type=click.IntRange(0, 65535),
        default=8443,
        show_default=True,
        envvar=ENV + "WEB_PORT",
        help=WEB_PORT_HELP,
    ),
]
WEB_OPTIONS = [
    *WEB_LISTEN_OPTIONS,
    click.option(
        "--web-cert",
        type=click.Path(dir_okay=False),
        envvar=ENV + "WEB_CERT",
        metavar="PEM",
        help="With --transport web: the TLS certificate chain (PEM); HTTPS needs it and --web-key. Both "
        "files are read again on SIGHUP, without dropping open connections.",
    ),
    click.option(
        "--web-key",
        type=click.Path(dir_okay=False),
        envvar=ENV + "WEB_KEY",
        metavar="PEM",
        help="With --transport web: the certificate's private key (PEM, unencrypted; mode 600).",
    ),
    click.option(
        "--web-allow-http",
        is_flag=True,
        default=False,
        envvar=ENV + "WEB_ALLOW_HTTP",
        help="With --transport web: listen with plain HTTP (no --web-cert), behind a TLS-terminating "
        "proxy or on loopback only: the path token is the only secret a request carries.",
    ),
    click.option(
        "--web-token-file",
        type=click.Path(dir_okay=False),
        envvar=ENV + "WEB_TOKEN_FILE",
        metavar="FILE",
        help=WEB_TOKEN_FILE_HELP,
    ),
    click.option(
        "--web-allow-source",
        "web_allow_source",
        multiple=True,
        envvar=ENV + "WEB_ALLOW_SOURCE",
        metavar="CIDR",
        help="With --transport web: serve only these source networks (repeatable; "
        "default: any). Behind a load balancer this is the balancer's address.",
    ),
    click.option(
        "--web-max-body",
        type=click.IntRange(1024, 16 * 1024 * 1024),
        default=MAX_BODY,
        show_default=True,
        envvar=ENV + "WEB_MAX_BODY",
        metavar="BYTES",
        help="With --transport web: larger request bodies get 413, unread.",
    ),
    click.option(
        "--web-header-timeout",
        type=click.FloatRange(1, 300),
        default=10.0,
        show_default=True,
        envvar=ENV + "WEB_HEADER_TIMEOUT",
        metavar="SECONDS",
        help="With --transport web: a connection that has not completed its TLS handshake this long after "
        "it opened, or sent a whole request line and headers this long after that (or after its last "
        "response), is closed.",
    ),
    click.option(
        "--web-body-timeout",
        type=click.FloatRange(1, 300),
        default=10.0,
        show_default=True,
        envvar=ENV + "WEB_BODY_TIMEOUT",
        metavar="SECONDS",
        help="With --transport web: a body that has not fully arrived this long after its headers gets 408.",
    ),
    click.option(
        "--web-sync-timeout",
        type=click.FloatRange(5, 43200),
        default=55.0,
        show_default=True,
        envvar=ENV + "WEB_SYNC_TIMEOUT",
        metavar="SECONDS",
        help="With --transport web: the longest a web[sync] caller waits for its answer, whatever the "
        "request's Timeout: keep it below any proxy's or load balancer's idle timeout. A handler "
        "still running then is answered FAILED (timed out) in time.",
    ),
    click.option(
        "--web-max-connections",
        type=click.IntRange(1, 65536),
        default=MAX_CONNECTIONS,
        show_default=True,
        envvar=ENV + "WEB_MAX_CONNECTIONS",
        metavar="N",
        help="With --transport web: connections open at once, in all; past it a new one is closed at once "
        "(keep it below the daemon's open-files limit).",
    ),
    click.option(
        "--web-max-connections-per-source",
        type=click.IntRange(1, 65536),
        default=MAX_CONNECTIONS_PER_SOURCE,
        show_default=True,
        envvar=ENV + "WEB_MAX_CONNECTIONS_PER_SOURCE",
        metavar="N",
        help="With --transport web: connections open at once from one source address; past it a new one "
        "from there is closed at once. Behind a load balancer (one source) set it to --web-max-connections.",
    ),
]

# The options above, by parameter name: they apply to --transport web only (ros_options.APPLIES_TO).
WEB_ONLY = (
    "web_address",
    "web_port",
    "web_cert",
    "web_key",
    "web_allow_http",
    "web_token_file",
    "web_allow_source",
    "web_max_body",
    "web_header_timeout",
    "web_body_timeout",
    "web_sync_timeout",
    "web_max_connections",
    "web_max_connections_per_source",
)


def web_settings(options: dict[str, Any], ctx: click.Context) -> WebSettings:
    """WebSettings from the options, after checking they make a listener that can start."""
    cert, key = options["web_cert"], options["web_key"]
    if bool(cert) != bool(key):
        raise click.UsageError("--web-cert and --web-key go together (the certificate chain and its private key)", ctx)
    if not cert and not options["web_allow_http"]:
        raise click.UsageError(web_http_refused(options["web_address"]), ctx)
    try:
        read_tokens(options["web_token_file"], os.environ.get(ENV_TOKEN))  # the listener reads them again
        allow = networks(options["web_allow_source"])
    except (TokenError, ValueError) as exc:
        raise click.UsageError(str(exc), ctx) from None
    return WebSettings(
        address=options["web_address"],
        port=options["web_port"],
        cert_file=cert,
        key_file=key,
        allow_http=options["web_allow_http"],
        token_file=options["web_token_file"],
        allow_sources=tuple(str(net) for net in allow),
        max_body=options["web_max_body"],
        header_timeout=options["web_header_timeout"],
        body_timeout=options["web_body_timeout"],
        sync_timeout=options["web_sync_timeout"],
        max_connections=options["web_max_connections"],
        max_connections_per_source=min(options["web_max_connections_per_source"], options["web_max_connections"]),
    )

"""`cfn-provider web-token`: make the web listener's path token, and print the ServiceTokens to hand out.

    cfn-provider web-token --new --web-token-file /etc/cfn-provider/web-token --url https://provider.example.com:8443
    cfn-provider web-token --new team-a --web-token-file ...  # a token for the tenant team-a (a line `team-a TOKEN`)
    cfn-provider web-token --rotate --web-token-file ...   # a new first token; the old one stays valid until removed
    cfn-provider web-token --url ... --mode sync           # just the web[sync] ServiceToken (for scripts)

The token is printed on purpose here (it is what a template author needs), never logged.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import click

from ..cli_options import CONFIG_HELP
from ..config import apply_config_file
from ..trust.tenants import DEFAULT, checked_name
from ..trust.web_tokens import Mode, Tokens, named, new_token
from ..web_options import WEB_TOKEN_FILE_HELP

ENV = "CFN_PROVIDER_"


def _config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    if path:
        apply_config_file(ctx, path, strict=False)
    return path


def write_token(path: Path, rotate: bool, tenant: str = DEFAULT) -> None:
    """A new token for `tenant` as its first line in the file (mode 600); with `rotate` the tenant's
    current one stays as its second. Other tenants' lines are kept as they are."""
    lines = [line.strip() for line in path.read_text().splitlines()] if path.exists() else []
    entries = [line for line in lines if line and not line.startswith("#")]
    mine = [line for line in entries if named(line, str(path))[0] == tenant]
    others = [line for line in entries if line not in mine]
    if mine and not rotate:
        raise click.ClickException(f"{path} already holds a token for {tenant}: --rotate adds a new one beside it")
    if rotate and not mine:
        raise click.ClickException(f"{path} holds no token for {tenant} to rotate: make the first with --new")
    fresh = new_token() if tenant == DEFAULT and not any(" " in line for line in entries) else f"{tenant} {new_token()}"
    text = "\n".join([*others, fresh, *mine[:1]]) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


@click.command("web-token")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    callback=_config,
    is_eager=True,
    expose_value=False,
    envvar=ENV + "CONFIG",
    help=CONFIG_HELP,
)
@click.option(
    "--web-token-file",
    type=click.Path(dir_okay=False),
    envvar=ENV + "WEB_TOKEN_FILE",
    metavar="FILE",
    help=WEB_TOKEN_FILE_HELP,
)
@click.option(
    "--url",
    envvar=ENV + "WEB_URL",
    metavar="URL",
    help="The listener's base URL as ROS reaches it (https://HOST[:PORT], a load balancer's name if "
    "there is one): the ServiceTokens are printed for it.",
)
@click.option(
    "--new",
    "new",
    is_flag=False,
    flag_value=DEFAULT,
    default=None,
    metavar="[NAME]",
    help="Write a new random token (256 bits) to --web-token-file (mode 600) for the tenant NAME (a line "
    "`NAME TOKEN`: the principal of every request that comes with it); without NAME, the tenant default.",
)
@click.option(
    "--rotate",
    is_flag=True,
    help="Write a new token for the tenant (--tenant) and keep its current one beside it: both are "
    "valid (after SIGHUP) until you delete the older line and send SIGHUP again.",
)
@click.option(
    "--tenant",
    default=None,
    metavar="NAME",
    help="The tenant whose token --rotate replaces and whose ServiceTokens are printed (default: --new's "
    "NAME, else the file's first line).",
)
@click.option(
    "--mode",
    type=click.Choice(["both", "async", "sync"]),
    default="both",
    show_default=True,
    help="Which ServiceToken to print: async prints only web[...]:URL/TOKEN, sync only web[sync...]:URL/TOKEN/sync.",
)
@click.option(
    "--idempotent/--no-idempotent",
    default=True,
    show_default=True,
    help="Mark the ServiceTokens idempotent, so ROS retries a Create after a network error or a 500 (safe: "
    "the daemon never runs a request twice).",
)
def web_token_command(
    web_token_file: str | None,
    url: str | None,
    new: str | None,
    rotate: bool,
    tenant: str | None,
    mode: Mode | Literal["both"],
    idempotent: bool,
) -> None:
    """Make the web listener's path token (--new, --rotate) and print the ROS ServiceTokens that carry it:
    `web[idempotent]:URL/TOKEN` (asynchronous: the answer is POSTed to ROS's ResponseURL) and
    `web[sync,idempotent]:URL/TOKEN/sync` (synchronous: the HTTP response is the answer). Send the daemon
    SIGHUP after changing the file; it then accepts every token the file holds (at most two)."""
    if (new or rotate) and not web_token_file:
        raise click.UsageError("--new and --rotate write to --web-token-file FILE")
    tenant = checked_name(tenant or new or DEFAULT, "--tenant") if (tenant or new or rotate) else None
    if new or rotate:
        write_token(Path(web_token_file or ""), rotate, tenant or DEFAULT)
        click.echo(
            f"wrote a new token to {web_token_file}"
            + (" (the previous one is its second line)" if rotate else "")
            + "; send the daemon SIGHUP (or start it) to use it",
            err=True,
        )
    tokens = Tokens(web_token_file)  # TokenError: a start-up error, exit 2 (cfn_provider.cli_errors)
    if not url:
        if new or rotate:
            return
        raise click.UsageError(
            "--url https://HOST[:PORT] (the listener as ROS reaches it) is needed to print ServiceTokens"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.query:
        raise click.UsageError(f"--url {url!r}: give https://HOST[:PORT] (a path prefix is kept; no query)")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            "warning: a plain http:// URL shows the token to the network; use it only behind a proxy that "
            "adds TLS, or on loopback",
            err=True,
        )
    async_token, sync_token = tokens.service_tokens(url, idempotent, tenant)
    if mode == "both":
        click.echo(f"asynchronous (the answer is POSTed to ROS's ResponseURL):\n  {async_token}")
        click.echo(f"synchronous (the HTTP response is the answer, within --web-sync-timeout):\n  {sync_token}")
    else:
        click.echo(async_token if mode == "async" else sync_token)
    sys.stdout.flush()

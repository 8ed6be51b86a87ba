"""The web listener's path tokens: the secret in a `web[...]:https://HOST/<token>` ServiceToken.

ROS does not sign the requests it POSTs to a web ServiceToken, so the URL carries the secret:
a random token of at least 128 bits, as its first path segment. It comes from a file (one
token a line, `NAME TOKEN`, `#` comments; re-read on SIGHUP) or from CFN_PROVIDER_WEB_TOKEN
(comma-separated entries of the same form). NAME is the tenant the token is for: the principal
of every request that comes with it (cfn_provider.trust.tenants); a line holding only a token
(every file written before tenants) is the tenant `default`. At most two tokens of one name are
valid at once, so that a token can be rotated: add the new one, reload, hand out the new
ServiceToken, then remove the old one and reload again.

Paths: `/<token>` is the asynchronous mode (`web:`; the answer goes to the ResponseURL) and
`/<token>/sync` the synchronous one (`web[sync]:`; the HTTP response is the answer). A path is
matched against every valid token in constant time (hmac.compare_digest, all of them, always),
and a token is registered with the log redactor, so no log line can show it.
"""

from __future__ import annotations

import hmac
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from .. import logs
from ..errors import TransportConfigError
from .tenants import DEFAULT, NAME, NAME_RULE

ENV_TOKEN = "CFN_PROVIDER_WEB_TOKEN"
MIN_BITS = 128
MAX_TOKENS = 2
ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
HEX = frozenset("0123456789abcdef")
Mode = Literal["async", "sync"]  # what a path asks for: /TOKEN (async) or /TOKEN/sync
ASYNC: Final = "async"
SYNC: Final = "sync"


class TokenError(TransportConfigError):
    """No usable token (missing, too short, not URL-safe, more than two): the listener does not start."""


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def strength(token: str) -> float:
    """Bits a random token of this length and alphabet would carry (hex: 4 a character, else 6)."""
    per_char = 4.0 if set(token.lower()) <= HEX else math.log2(len(ALPHABET))
    return len(token) * per_char


def check(token: str, where: str) -> str:
    """`token` when it is usable as a path token, else TokenError saying why (never showing it)."""
    if not token or set(token) - ALPHABET:
        raise TokenError(
            f"the web token in {where} must use only A-Z a-z 0-9 - _ (URL-safe base64, as "
            "`cfn-provider web-token --new` writes it)"
        )
    if strength(token) < MIN_BITS or len(set(token)) < 8:
        raise TokenError(
            f"the web token in {where} is too weak: it needs at least {MIN_BITS} random bits "
            "(22 URL-safe base64 or 32 hex characters; make one with `cfn-provider web-token --new`)"
        )
    return token


def read_tokens(file: str | None, env_value: str | None) -> tuple[tuple[str, str], ...]:
    """The valid (tenant, token) pairs from `file` (one a line) or `env_value` (comma-separated):
    one or two a tenant."""
    if file and env_value:
        raise TokenError(f"give the web token in --web-token-file or {ENV_TOKEN}, not both")
    if file:
        where = f"--web-token-file {file}"
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenError(f"cannot read {where}: {getattr(exc, 'strerror', None) or type(exc).__name__}") from None
        found = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    elif env_value:
        where = ENV_TOKEN
        found = [part.strip() for part in env_value.split(",") if part.strip()]
    else:
        raise TokenError(
            f"--transport web needs a path token: --web-token-file FILE or {ENV_TOKEN} "
            "(make one with `cfn-provider web-token --new --web-token-file FILE`)"
        )
    if not found:
        raise TokenError(f"{where} holds no token")
    pairs = tuple(named(entry, where) for entry in found)
    for tenant in dict.fromkeys(name for name, _ in pairs):
        count = sum(1 for name, _ in pairs if name == tenant)
        if count > MAX_TOKENS:
            raise TokenError(
                f"{where} holds {count} tokens for tenant {tenant}; at most {MAX_TOKENS} of one name are valid "
                "at once (the current one and, while rotating, the next)"
            )
    if len({token for _, token in pairs}) < len(pairs):
        raise TokenError(f"{where} holds one token twice: each tenant needs a token of its own")
    for _, token in pairs:
        logs.register_secret(token)
    return pairs


def named(entry: str, where: str) -> tuple[str, str]:
    """(tenant, token) of a `NAME TOKEN` entry; a bare `TOKEN` is the tenant `default`."""
    parts = entry.split()
    if len(parts) == 1:
        return DEFAULT, check(parts[0], where)
    if len(parts) != 2 or not NAME.match(parts[0]):
        raise TokenError(f"{where}: an entry is `NAME TOKEN` (NAME {NAME_RULE}) or a token alone")
    return parts[0], check(parts[1], where)


@dataclass(frozen=True)
class Route:
    """What a request path asks for: `mode` ASYNC or SYNC, or None when it names no valid token;
    `tenant`, the name of the token it names (the request's principal)."""

    mode: Mode | None
    tenant: str = DEFAULT


class Tokens:
    """The valid tokens, from a file (re-read by `reload`) or the environment."""

    def __init__(self, file: str | None, env_value: str | None = None) -> None:
        self.file = file
        self.env_value = env_value if env_value is not None else os.environ.get(ENV_TOKEN)
        self.tokens = read_tokens(self.file, self.env_value)

    def reload(self) -> int:
        """Read the tokens again (SIGHUP); how many are valid now. TokenError keeps the old ones."""
        self.tokens = read_tokens(self.file, self.env_value)
        return len(self.tokens)

    def tenants(self) -> list[str]:
        """The tenants the valid tokens are for (their names, never a token), in file order."""
        return list(dict.fromkeys(name for name, _ in self.tokens))

    def route(self, path: str) -> Route:
        """The mode `path` asks for, when its first segment is a valid token; compared in constant time
        with every valid token (whichever matches, and whether any does, takes the same time)."""
        segment, slash, rest = path[1:].partition("/") if path.startswith("/") else ("", "/", "")
        # exactly /TOKEN or /TOKEN/sync
        mode: Mode | None = SYNC if slash and rest == "sync" else (None if slash else ASYNC)
        tenant: str | None = None
        candidate = segment.encode("utf-8", "surrogateescape")
        for name, token in self.tokens:
            if hmac.compare_digest(candidate, token.encode()):
                tenant = name
        return Route(mode, tenant) if tenant is not None else Route(None)

    def service_tokens(self, base_url: str, idempotent: bool = True, tenant: str | None = None) -> list[str]:
        """The ServiceTokens for the current (first) token of `tenant` (None: the file's first line's):
        asynchronous, then synchronous."""
        mine = [token for name, token in self.tokens if tenant is None or name == tenant]
        if not mine:
            raise TokenError(f"no token for tenant {tenant!r}")
        base, token = base_url.rstrip("/"), mine[0]
        extra = ",idempotent" if idempotent else ""
        return [f"web{'[idempotent]' if idempotent else ''}:{base}/{token}", f"web[sync{extra}]:{base}/{token}/sync"]

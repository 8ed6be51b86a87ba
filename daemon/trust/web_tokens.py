"""The web listener's path tokens: the secret in a `web[...]:https://HOST/<token>` ServiceToken.

ROS does not sign the requests it POSTs to a web ServiceToken, so the URL carries the secret:
a random token of at least 128 bits, as its first path segment. It comes from a file (one
token a line, `#` comments; re-read on SIGHUP) or from CFN_PROVIDER_WEB_TOKEN (comma-separated).
At most two are valid at once, so that a token can be rotated: add the new one, reload, hand
out the new ServiceToken, then remove the old one and reload again.

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
from ..config import TransportConfigError

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


def read_tokens(file: str | None, env_value: str | None) -> tuple[str, ...]:
    """The valid tokens from `file` (one a line) or `env_value` (comma-separated): one or two."""
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
    if len(found) > MAX_TOKENS:
        raise TokenError(
            f"{where} holds {len(found)} tokens; at most {MAX_TOKENS} are valid at once (the "
            "current one and, while rotating, the next)"
        )
    tokens = tuple(check(token, where) for token in found)
    for token in tokens:
        logs.register_secret(token)
    return tokens


@dataclass(frozen=True)
class Route:
    """What a request path asks for: `mode` ASYNC or SYNC, or None when it names no valid token."""

    mode: Mode | None


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

    def route(self, path: str) -> Route:
        """The mode `path` asks for, when its first segment is a valid token; compared in constant time
        with every valid token (whichever matches, and whether any does, takes the same time)."""
        segment, slash, rest = path[1:].partition("/") if path.startswith("/") else ("", "/", "")
        # exactly /TOKEN or /TOKEN/sync
        mode: Mode | None = SYNC if slash and rest == "sync" else (None if slash else ASYNC)
        matched = False
        candidate = segment.encode("utf-8", "surrogateescape")
        for token in self.tokens:
            matched |= hmac.compare_digest(candidate, token.encode())
        return Route(mode if matched else None)

    def service_tokens(self, base_url: str, idempotent: bool = True) -> list[str]:
        """The ServiceTokens for the current (first) token: asynchronous, then synchronous."""
        base, token = base_url.rstrip("/"), self.tokens[0]
        extra = ",idempotent" if idempotent else ""
        return [f"web{'[idempotent]' if idempotent else ''}:{base}/{token}", f"web[sync{extra}]:{base}/{token}/sync"]

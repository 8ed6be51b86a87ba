"""Custom::Wait: a resource that is done when a URL answers 2xx, or at a given time (a long-running built-in).

    AppIsUp:
      Type: Custom::Wait
      Properties:
        ServiceToken: !Ref ProviderTopicArn
        Url: https://app.internal.example.com/healthz   # wait until it answers 2xx, or
        # Until: "2026-12-01T09:00:00Z"                  # wait until then (ISO 8601, with a zone), or
        # Seconds: 600                                   # wait this long
        IntervalSeconds: 15                              # optional: between looks, 1..300 (default 10)
        ServiceTimeout: 3600                             # the wait's upper bound, as for any custom resource

Exactly one of Url, Until and Seconds. Create and Update wait (an Update with new properties
waits again); Delete returns at once. It waits through the daemon's poll contract (see
docs/handlers.md, "Long-running resources"): no slot, lease or queue message is held between
looks, the wait survives restarts of the daemon and moves across a fleet; past ServiceTimeout
it is answered FAILED, timed out.

Url is fetched only when it falls under a prefix the operator allows: CFN_PROVIDER_WAIT_URLS,
a comma- or space-separated list of http(s) URL prefixes. It is checked exactly as it will be
fetched (it is sent as written, never normalised), by the daemon's one prefix rule
(cfn_provider.trust.urls.prefix_refusal, as for --allow-response-url): the scheme, host and port
must equal a prefix's and the path be the prefix's or under it by whole segments (`/healthz`
covers `/healthz/deep`, not `/healthzz-internal`), with no dot-segments raw or percent-encoded
(`/healthz/../admin`, `/healthz/%2e%2e/admin`), encoded slashes or backslashes. Nothing is
allowed by default (a template author must not turn the provider into a prober of the
operator's network). Redirects are not followed (one could leave the allowlist): a 3xx is not
done yet. Only the status is read. Reasons name a property and a rule, never the property's value.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from cfn_provider import InProgress
from cfn_provider.errors import HandlerFailure
from cfn_provider.trust.urls import matches_prefix

URLS_ENV = "CFN_PROVIDER_WAIT_URLS"
DEFAULT_INTERVAL, MIN_INTERVAL, MAX_INTERVAL = 10.0, 1.0, 300.0
MAX_SECONDS = 12 * 3600  # Seconds beyond any ServiceTimeout make no sense
PROBE_TIMEOUT = 10.0  # seconds, at most, for one look at the URL
KNOWN = {"ServiceToken", "ServiceTimeout", "Url", "Until", "Seconds", "IntervalSeconds"}


class WaitError(HandlerFailure, ValueError):
    """A property breaks a rule (the message names the property, never its value)."""

    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


def allowed_prefixes(env: Mapping[str, str] | None = None) -> list[str]:
    value = (os.environ if env is None else env).get(URLS_ENV, "")
    return [p for p in re.split(r"[,\s]+", value) if p]


def url_allowed(url: str, prefixes: list[str]) -> bool:
    """An http(s) URL under one of the prefixes, exactly as it will be fetched (see the module docstring)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return False
    return any(matches_prefix(url, prefix) for prefix in prefixes)


def _number(props: Mapping[str, Any], name: str, low: float, high: float, default: float | None = None) -> float:
    raw = props.get(name)
    if raw is None:
        if default is None:
            raise WaitError(f"{name} is required")
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise WaitError(f"{name} must be a number") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise WaitError(f"{name} must be between {low:g} and {high:g}")
    return value


def _until(raw: Any) -> float:
    if not isinstance(raw, str):
        raise WaitError("Until must be an ISO 8601 time string")
    try:
        when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise WaitError("Until must be an ISO 8601 time, e.g. 2026-12-01T09:00:00Z") from None
    if when.tzinfo is None:
        raise WaitError("Until must name its time zone (Z or an offset such as +02:00)")
    return when.timestamp()


def plan(props: Mapping[str, Any], now: float, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The validated wait: {"until": epoch} or {"url": ...}, and the interval. Raises WaitError."""
    unknown = sorted(set(map(str, props)) - KNOWN)
    if unknown:
        raise WaitError(
            f"unknown properties {', '.join(n[:40] for n in unknown[:5])}; "
            "use one of Url, Until, Seconds (and IntervalSeconds)"
        )
    given = [name for name in ("Url", "Until", "Seconds") if props.get(name) not in (None, "")]
    if len(given) != 1:
        raise WaitError("give exactly one of Url, Until and Seconds")
    interval = _number(props, "IntervalSeconds", MIN_INTERVAL, MAX_INTERVAL, DEFAULT_INTERVAL)
    if given[0] == "Seconds":
        return {"until": now + _number(props, "Seconds", 0, MAX_SECONDS), "interval": interval}
    if given[0] == "Until":
        return {"until": _until(props["Until"]), "interval": interval}
    url = props["Url"]
    if not isinstance(url, str) or len(url) > 2048:
        raise WaitError("Url must be a string of at most 2048 characters")
    prefixes = allowed_prefixes(env)
    if not prefixes:
        raise WaitError(f"Url is not allowed: the provider's operator allows no URLs ({URLS_ENV} is empty)")
    if not url_allowed(url, prefixes):
        raise WaitError(f"Url is not under a prefix the provider's operator allows ({URLS_ENV})")
    return {"url": True, "interval": interval, "looks": 0}


async def _answers_2xx(url: str, timeout: float) -> bool:
    try:
        client_timeout = aiohttp.ClientTimeout(total=max(0.5, timeout))
        async with aiohttp.ClientSession(timeout=client_timeout) as session:
            # encoded=True: the URL goes out exactly as checked (yarl would otherwise resolve
            # dot-segments and re-quote it after the check)
            async with session.get(URL(url, encoded=True), allow_redirects=False) as resp:
                return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return False


async def _step(event: Mapping[str, Any], context: Any, progress: dict[str, Any]) -> Any:
    """Done (None: the id is kept or derived), or InProgress with the same plan."""
    now = time.time()
    if "until" in progress:
        left = progress["until"] - now
        if left <= 0:
            return None
        return InProgress(progress, after=max(MIN_INTERVAL, min(progress["interval"], left)))
    budget = min(PROBE_TIMEOUT, context.remaining()) if hasattr(context, "remaining") else PROBE_TIMEOUT
    if await _answers_2xx(event["ResourceProperties"]["Url"], budget):
        return None
    return InProgress({**progress, "looks": int(progress.get("looks", 0)) + 1}, after=progress["interval"])


async def create(event: Mapping[str, Any], context: Any) -> Any:
    return await _step(event, context, plan(event["ResourceProperties"], time.time()))


update = create


async def is_complete(event: Mapping[str, Any], context: Any, progress: Any) -> Any:
    return await _step(event, context, progress)


def delete(event: Mapping[str, Any], context: Any = None) -> None:
    return None  # nothing was made

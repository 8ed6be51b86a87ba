"""URL rules: which ResponseURLs the daemon may call, how URLs appear in logs, when they expire.

A ResponseURL comes from the message, so it is attacker-controlled until proven otherwise.
By default only https URLs on the hosts of the request's dialect are allowed: S3 hosts under
amazonaws.com(.cn) for CloudFormation, ROS and OSS hosts under aliyuncs.com for ROS; anything
else (an emulator, a test stub) must be named as a prefix by the operator.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

# S3's own endpoint forms, optionally behind a bucket name: s3, s3.REGION, s3-REGION (legacy),
# s3.dualstack.REGION, s3-external-1; under amazonaws.com or amazonaws.com.cn. Anything looser
# would admit customer-named hosts such as s3-x.us-east-1.elb.amazonaws.com.
_REGION = r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}"
_S3_HOST = re.compile(
    rf"^(?:[a-z0-9][a-z0-9.-]*\.)?(?:s3|s3[.-]{_REGION}|s3\.dualstack\.{_REGION}|s3-external-1)"
    r"\.amazonaws\.com(?:\.cn)?$"
)
# ROS's own endpoints (public, intranet, VPC; with or without a region) and OSS presigned hosts
# (optionally behind a bucket name; -internal is OSS's intranet form) under aliyuncs.com. Other
# aliyuncs.com names (load balancers, FC, ...) can be customer-controlled and are not allowed.
_ALIYUN_REGION = r"[a-z]{2}(?:-[a-z0-9]+){1,4}"
_ALIYUN_HOST = re.compile(
    rf"^(?:ros(?:-intranet|-vpc)?(?:\.{_ALIYUN_REGION})?"
    rf"|(?:[a-z0-9][a-z0-9-]*\.)?(?:oss-{_ALIYUN_REGION}(?:-internal)?|oss-accelerate(?:-overseas)?))"
    r"\.aliyuncs\.com$"
)


@dataclass(frozen=True)
class HostRule:
    """The hosts a dialect's ResponseURLs may name (besides the operator's prefixes)."""

    pattern: re.Pattern[str]
    description: str  # completes "host 'x' is not ..."


S3_HOSTS = HostRule(_S3_HOST, "an S3 host under amazonaws.com")
ALIYUN_HOSTS = HostRule(_ALIYUN_HOST, "a ROS or OSS host under aliyuncs.com")

# The query runs to whitespace, a quote or a bracket; a renderer's escape pair (\u00e9, \\) stays
# inside it, but an escaped quote (\") ends it, so JSON-rendered lines stay valid JSON.
_URL_IN_TEXT = re.compile(r"(https?://[^\s?#\"'<>\\]+)\?(?!<redacted>)(?:[^\s#\"'<>\\]|\\[^\"\s])*")


class UrlRejected(ValueError):
    """The URL is outside what the daemon is allowed to call."""


def matches_prefix(url: str, prefix: str) -> bool:
    """True when `url` lies under `prefix`, compared as parsed URLs, not as strings.

    `http://127.0.0.1:5000/` does not cover `http://127.0.0.1:50001/`, `/cfn` covers `/cfn/x`
    but not `/cfnother`, and userinfo or dot-segments (`/cfn/../admin`) never match.
    """
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        u_port, p_port = u.port, p.port
    except ValueError:
        return False
    if u.username is not None or u.password is not None:
        return False
    if any(seg in (".", "..") for seg in unquote(u.path).split("/")):
        return False  # /allowed/../elsewhere would leave the prefix once normalised
    base = p.path if p.path.endswith("/") or not p.path else p.path + "/"
    return (
        u.scheme.lower() == p.scheme.lower()
        and (u.hostname or "") == (p.hostname or "")
        and u_port == p_port
        and (u.path == p.path or u.path.startswith(base))
    )


class ResponseUrlPolicy:
    """Decides whether a ResponseURL may be called."""

    def __init__(self, allowed_prefixes: tuple[str, ...] | list[str] = ()):
        self.allowed_prefixes = tuple(allowed_prefixes)

    def check(self, url: str, hosts: HostRule = S3_HOSTS) -> None:
        """Raise UrlRejected with a reason when `url` is not allowed."""
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            raise UrlRejected("URL contains whitespace or control characters")
        if any(matches_prefix(url, p) for p in self.allowed_prefixes):
            return
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise UrlRejected(f"unparseable URL ({exc})") from None
        if parts.scheme != "https":
            raise UrlRejected(f"scheme {parts.scheme or 'none'!r} is not https")
        if parts.username is not None or parts.password is not None:
            raise UrlRejected("URL carries userinfo")
        if port not in (None, 443):
            raise UrlRejected(f"port {port} is not 443")
        host = (parts.hostname or "").lower()
        if not hosts.pattern.match(host):
            raise UrlRejected(f"host {host!r} is not {hosts.description}")


def redact(url: str) -> str:
    """The URL with its query string (the presigned credentials) replaced by a marker."""
    head, sep, _ = url.partition("?")
    return f"{head}?<redacted>" if sep else head


def redact_text(text: str) -> str:
    """Redact the query string of every http(s) URL inside free text."""
    return _URL_IN_TEXT.sub(r"\1?<redacted>", text)


def expires_at(url: str) -> float | None:
    """Epoch seconds after which a presigned URL stops working (SigV4 or SigV2), or None."""
    try:
        query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        if "x-amz-date" in query and "x-amz-expires" in query:
            start = dt.datetime.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ")
            start = start.replace(tzinfo=dt.timezone.utc)
            return start.timestamp() + int(query["x-amz-expires"])
        if "expires" in query:
            return float(int(query["expires"]))
    except (ValueError, OverflowError):
        return None
    return None

"""URL rules: which ResponseURLs the daemon may call, how URLs appear in logs, when they expire.

A ResponseURL comes from the message, so it is attacker-controlled until proven otherwise: a
template author chooses it when they publish to the topic themselves, and a stored answer (with
its NoEcho Data) is re-sent to whatever URL a later message names. By default only https URLs
into the response store of the request's dialect are allowed:
- CloudFormation: its own response buckets, `cloudformation-custom-resource-response-<region
  without dashes>` (AWS's VPC-endpoint guide names them), in virtual-host or path style, on an S3
  endpoint with or without the region (s3, s3.REGION, s3-REGION, s3.dualstack.REGION,
  s3-external-1), in aws, aws-us-gov (amazonaws.com) and aws-cn (amazonaws.com.cn); the bucket's
  region must be the endpoint's when the endpoint names one, and a regionless endpoint (us-east-1's,
  which serves buckets of every region) takes us-east-1's bucket only. Any other bucket (a
  template author's own, or a look-alike name for a region that does not exist) is refused.
- ROS: ROS and OSS hosts under aliyuncs.com.
Anything else (an emulator, a test stub) must be named as a prefix by the operator.
"""
from __future__ import annotations

import datetime as dt
import re
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

# S3's own endpoint forms (without a bucket): s3 (aws only), s3-external-1 (us-east-1), s3.REGION,
# s3-REGION (legacy), s3.dualstack.REGION; under amazonaws.com, or amazonaws.com.cn for cn-* regions.
# Anything looser would admit customer-named hosts such as s3-x.us-east-1.elb.amazonaws.com.
_REGION = r"[a-z]{2}(?:-gov)?-[a-z]+-[0-9]{1,2}"  # ASCII digits (\d would match any script's)
_S3_ENDPOINT = re.compile(
    rf"^(?:s3|s3-external-1|s3[.-](?P<region>{_REGION})|s3\.dualstack\.(?P<dualstack>{_REGION}))"
    r"\.(?P<suffix>amazonaws\.com(?:\.cn)?)\Z"
)
CFN_BUCKET_PREFIX = "cloudformation-custom-resource-response-"
_CFN_BUCKET = re.compile(rf"^{CFN_BUCKET_PREFIX}(?P<region>[a-z]+[0-9]{{1,2}})\Z")
# ROS's own endpoints (public, intranet, VPC; with or without a region) and OSS presigned hosts
# (optionally behind a bucket name; -internal is OSS's intranet form) under aliyuncs.com. Other
# aliyuncs.com names (load balancers, FC, ...) can be customer-controlled and are not allowed.
_ALIYUN_REGION = r"[a-z]{2}(?:-[a-z0-9]+){1,4}"
_ALIYUN_HOST = re.compile(
    rf"^(?:ros(?:-intranet|-vpc)?(?:\.{_ALIYUN_REGION})?"
    rf"|(?:[a-z0-9][a-z0-9-]*\.)?(?:oss-{_ALIYUN_REGION}(?:-internal)?|oss-accelerate(?:-overseas)?))"
    r"\.aliyuncs\.com$"
)


class HostRule:
    """The hosts a dialect's ResponseURLs may name (besides the operator's prefixes): `pattern`
    on the host, `description` completing "host 'x' is not ..."."""

    def __init__(self, pattern: re.Pattern[str], description: str):
        self.pattern, self.description = pattern, description

    def refusal(self, parts: SplitResult) -> str | None:
        """Why `parts` (an https URL without userinfo, on port 443) is not allowed; None when it is."""
        host = (parts.hostname or "").lower()
        return None if self.pattern.match(host) else f"host {host!r} is not {self.description}"


def _s3_endpoint(host: str) -> tuple[str | None, str] | None:
    """(region or None, domain suffix) when `host` is one of S3's own endpoints, else None."""
    m = _S3_ENDPOINT.match(host)
    if m is None:
        return None
    region = m["region"] or m["dualstack"] or ("us-east-1" if host.startswith("s3-external-1.") else None)
    china = m["suffix"].endswith(".cn")
    if china != bool(region and region.startswith("cn-")):
        return None  # amazonaws.com.cn is aws-cn's alone, and aws-cn has no regionless endpoint
    return region, m["suffix"]


class CloudFormationBuckets(HostRule):
    """CloudFormation's response buckets on S3's own endpoints (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(_S3_ENDPOINT, f"CloudFormation's response bucket ({CFN_BUCKET_PREFIX}<region>) on S3")

    def refusal(self, parts: SplitResult) -> str | None:
        if parts.netloc != parts.netloc.lower():
            return "host is not lower-case (CloudFormation's response URLs are)"
        if parts.fragment:
            return "URL carries a fragment"
        host = parts.hostname or ""
        if any(seg in (".", "..") for seg in unquote(parts.path).split("/")):
            return "path has dot-segments"
        endpoint = _s3_endpoint(host)
        if endpoint is not None:  # path style: s3.REGION.amazonaws.com/BUCKET/KEY
            bucket, _, key = parts.path.removeprefix("/").partition("/")
            if not key:
                return "path names no object in a bucket"
        else:  # virtual-host style: BUCKET.s3.REGION.amazonaws.com/KEY
            bucket, _, rest = host.partition(".")
            endpoint = _s3_endpoint(rest)
            if endpoint is None:
                return f"host {host!r} is not {self.description}"
            if not parts.path.removeprefix("/"):
                return "path names no object in the bucket"
        m = _CFN_BUCKET.match(bucket)
        if m is None:
            return f"bucket {bucket[:80]!r} is not CloudFormation's response bucket ({CFN_BUCKET_PREFIX}<region>)"
        region, _suffix = endpoint
        if region is not None:
            if m["region"] != region.replace("-", ""):
                return f"bucket {bucket!r} is not the response bucket of the endpoint's region {region}"
        elif m["region"] != "useast1":
            # s3.amazonaws.com is us-east-1's endpoint, but it serves a bucket of any region, so a
            # made-up name (a region that does not exist yet) could be anyone's bucket there.
            return f"bucket {bucket!r} is not us-east-1's, the only one CloudFormation names on {host!r}"
        return None


S3_HOSTS = CloudFormationBuckets()
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


_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")  # str.isspace() and the C0 controls, DEL


class ResponseUrlPolicy:
    """Decides whether a ResponseURL may be called."""

    def __init__(self, allowed_prefixes: tuple[str, ...] | list[str] = ()):
        self.allowed_prefixes = tuple(allowed_prefixes)

    def check(self, url: str, hosts: HostRule = S3_HOSTS) -> None:
        """Raise UrlRejected with a reason when `url` is not allowed."""
        if _SPACE_OR_CONTROL.search(url):
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
        reason = hosts.refusal(parts)
        if reason is not None:
            raise UrlRejected(reason)


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

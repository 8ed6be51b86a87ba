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
- ROS: ROS's own endpoints under aliyuncs.com (docs/ros.md, "Where ROS answers": the sources).
  No OSS bucket: a bucket name is anyone's to take, a template author's own among them.
Anything else (an emulator, a test stub) must be named as a prefix by the operator.

A prefix (`--allow-response-url`, `--trust-signing-cert-url`, Custom::Wait's CFN_PROVIDER_WAIT_URLS)
is compared with the URL exactly as it will be fetched (the daemon sends URLs as they are, never
normalised): same scheme, host and port, and a path under the prefix's by whole segments, with
nothing a server could read as another path (`path_refusal`, the one rule for every prefix and
for CloudFormation's bucket paths).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from urllib.parse import SplitResult, unquote, urlsplit

from ..errors import InputError

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
# ROS's own endpoints (public, intranet, VPC; with or without a region; ros.vpc-proxy, the VPC
# endpoint Alibaba's API guide names) under aliyuncs.com: the service's names, which no customer
# can hold. Not OSS: any bucket's host (BUCKET.oss-REGION.aliyuncs.com) is its owner's, a template
# author's own bucket among them; other aliyuncs.com names (load balancers, FC, ...) neither.
_ALIYUN_REGION = r"[a-z]{2}(?:-[a-z0-9]+){1,4}"
_ALIYUN_HOST = re.compile(rf"^(?:ros(?:-intranet|-vpc)?(?:\.{_ALIYUN_REGION})?|ros\.vpc-proxy)\.aliyuncs\.com$")


class HostRule:
    """The hosts a dialect's ResponseURLs may name (besides the operator's prefixes): `pattern`
    on the host, `description` completing "host 'x' is not ..."."""

    def __init__(self, pattern: re.Pattern[str], description: str):
        self.pattern, self.description = pattern, description

    def allows_host(self, host: str) -> bool:
        """Whether `host` may be answered on at all (the rest of the URL is `refusal`'s to judge)."""
        return bool(self.pattern.match(host.lower()))

    def refusal(self, parts: SplitResult, host: str) -> str | None:
        """Why `parts` (an https URL without userinfo, on port 443, whose host is `host`, one that
        `allows_host`) is not allowed; None when it is."""
        host = host.lower()
        return None if self.pattern.match(host) else f"host {host!r} is not {self.description}"


@functools.lru_cache(maxsize=256)  # a fleet answers on a handful of hosts; any other host only costs a miss
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

    def allows_host(self, host: str) -> bool:
        host = host.lower()  # an S3 endpoint (path style) or a bucket on one (virtual host)
        return _s3_endpoint(host) is not None or _s3_endpoint(host.partition(".")[2]) is not None

    def refusal(self, parts: SplitResult, host: str) -> str | None:
        if parts.netloc != parts.netloc.lower():
            return "host is not lower-case (CloudFormation's response URLs are)"
        if parts.fragment:
            return "URL carries a fragment"
        unsafe = path_refusal(parts.path)
        if unsafe is not None:
            return unsafe
        endpoint = _s3_endpoint(host)
        if endpoint is None:  # virtual-host style: BUCKET.s3.REGION.amazonaws.com/KEY
            if not parts.path.removeprefix("/"):
                return "path names no object in the bucket"
            return _virtual_host_refusal(host, self.description)
        # path style: s3.REGION.amazonaws.com/BUCKET/KEY
        bucket, _, key = parts.path.removeprefix("/").partition("/")
        if not key:
            return "path names no object in a bucket"
        return _bucket_refusal(bucket, endpoint, host)


@functools.lru_cache(maxsize=256)  # as _s3_endpoint: a handful of hosts, judged once each
def _virtual_host_refusal(host: str, description: str) -> str | None:
    """Why a bucket's own host (BUCKET.ENDPOINT) is not a response bucket's; None when it is one."""
    bucket, _, rest = host.partition(".")
    endpoint = _s3_endpoint(rest)
    if endpoint is None:
        return f"host {host!r} is not {description}"
    return _bucket_refusal(bucket, endpoint, host)


def _bucket_refusal(bucket: str, endpoint: tuple[str | None, str], host: str) -> str | None:
    """Why `bucket` on S3's `endpoint` (of `host`) is not CloudFormation's response bucket."""
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
ALIYUN_HOSTS = HostRule(_ALIYUN_HOST, "a ROS endpoint under aliyuncs.com")


class UrlRejected(InputError, ValueError):
    """The URL is outside what the daemon is allowed to call."""


_RISKY_ESCAPE = re.compile(r"%(?:2[5EeFf]|5[Cc]|3[Bb])")


def path_refusal(path: str) -> str | None:
    """Why `path` (as it will be sent) could reach somewhere else than its segments say; None when
    it cannot. Refused: dot-segments, raw or percent-encoded (however many times: a proxy may
    decode once more) or with a ;parameter (`..;`, which some servers read as `..`); percent-encoded
    slashes (one segment here, two behind a decoding proxy); backslashes, raw or encoded (some
    servers read them as slashes)."""
    decoded = path
    # Decoded to a fixed point: %252e%252e is .. to a server that decodes twice. Only an escape of
    # `.`, `/`, `\\`, `;` or `%` can decode to something these rules see; a path without one
    # (CloudFormation's hold %3A and %7C) reads the same decoded, so it is not decoded at all.
    for _ in range(4 if _RISKY_ESCAPE.search(path) else 0):
        once = unquote(decoded)
        if once == decoded:
            break
        decoded = once
    if "." in decoded and any(segment.split(";")[0] in (".", "..") for segment in decoded.split("/")):
        return "path has dot-segments"
    if decoded is not path and decoded.count("/") != path.count("/"):  # (a path not decoded: the same count)
        return "path has percent-encoded slashes"
    if "\\" in decoded:
        return "path has backslashes"
    return None


def _origin(parts: SplitResult) -> tuple[str, str, int | None]:
    """Scheme, host and port (a scheme's default port as None); ValueError for an unparseable port."""
    scheme = parts.scheme.lower()
    port = parts.port
    return scheme, (parts.hostname or ""), None if port == _DEFAULT_PORTS.get(scheme) else port


_DEFAULT_PORTS = {"http": 80, "https": 443}
# urllib lower-cases a host by Unicode's rules (the Kelvin sign K becomes an ASCII k) and the HTTP
# client passes it on raw, to be IDNA-mapped on the way to DNS: the rules would judge one host and
# the PUT name another. Every host a ResponseURL or a prefix may name is ASCII.
_NOT_ASCII = "host is not ASCII"


def prefix_refusal(url: str, prefix: str) -> str | None:
    """Why `url` does not lie under `prefix`; None when it does. Compared as parsed URLs, exactly
    as the URL will be fetched: the same scheme, host and port (`http://127.0.0.1:5000/` does not
    cover `http://127.0.0.1:50001/`), a path equal to the prefix's or under it by whole segments
    (`/cfn` covers `/cfn/x`, not `/cfnother`), no userinfo, and nothing `path_refusal` refuses."""
    if has_space_or_control(url):
        return "URL contains whitespace or control characters"
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        u_origin, p_origin = _origin(u), _origin(p)
    except ValueError as exc:
        return f"unparseable URL ({exc})"
    if u.username is not None or u.password is not None:
        return "URL carries userinfo"
    if not u.netloc.isascii():
        return _NOT_ASCII
    if u_origin != p_origin:
        return "scheme, host or port differ"
    unsafe = path_refusal(u.path)
    if unsafe is not None:
        return unsafe
    base = p.path if p.path.endswith("/") or not p.path else p.path + "/"
    if not (u.path == p.path or u.path.startswith(base)):
        return f"path is not {p.path or '/'!r} or under it"
    return None


def matches_prefix(url: str, prefix: str) -> bool:
    """True when `url` lies under `prefix` (`prefix_refusal` says why not)."""
    return prefix_refusal(url, prefix) is None


_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")  # str.isspace() and the C0 controls, DEL
_ASCII_SPACE_OR_CONTROL = bytes(range(0x21)) + b"\x7f"  # what the pattern matches of ASCII: 0-32 and DEL


def has_space_or_control(url: str) -> bool:
    """Whether `url` holds whitespace or a control character. An ASCII URL (every real one) is
    answered by deleting the pattern's ASCII characters in one byte pass, half str.isprintable()'s
    time and a fifth of the pattern's scan; any other is scanned by the pattern, unless it is
    printable without a space (every character the pattern matches is one of those)."""
    if url.isascii():
        return len(url.encode().translate(None, _ASCII_SPACE_OR_CONTROL)) != len(url)
    if url.isprintable() and " " not in url:
        return False
    return _SPACE_OR_CONTROL.search(url) is not None


class ResponseUrlPolicy:
    """Decides whether a ResponseURL may be called."""

    def __init__(self, allowed_prefixes: tuple[str, ...] | list[str] = ()):
        self.allowed_prefixes = tuple(allowed_prefixes)

    def check(self, url: str, hosts: HostRule = S3_HOSTS) -> None:
        """Raise UrlRejected with a reason when `url` is not allowed: every rule it breaks, the host
        first (an http URL on a foreign host is refused for its host, not only for its scheme), or,
        when a prefix names its scheme, host and port, why it is not under that prefix."""
        if has_space_or_control(url):
            raise UrlRejected("URL contains whitespace or control characters")
        if self.allowed_prefixes and any(matches_prefix(url, p) for p in self.allowed_prefixes):
            return
        try:
            parts = split_url(url)
            host, refused = _origin_refusals(parts.scheme, parts.netloc, hosts)
        except ValueError as exc:
            raise UrlRejected(f"unparseable URL ({exc})") from None
        if refused:
            reasons = list(refused)
        else:
            reason = hosts.refusal(parts, host)
            if reason is None:
                return
            reasons = [reason]
        for prefix in self.allowed_prefixes:
            try:
                near = _origin(urlsplit(prefix)) == _origin(parts)
            except ValueError:
                continue
            if near:  # the operator allowed this scheme, host and port: say why not this URL
                raise UrlRejected(f"not under --allow-response-url prefix {prefix!r}: {prefix_refusal(url, prefix)}")
        if self.allowed_prefixes:
            reasons.append("under no --allow-response-url prefix")
        raise UrlRejected("; ".join(reasons))


_new_tuple = tuple.__new__  # a named tuple made without its Python-level __new__ (a third of the split's time)


def split_url(url: str) -> SplitResult:
    """urlsplit(url), for a URL without whitespace or control characters (`has_space_or_control`),
    in half its time: an https URL whose authority is ASCII without brackets (every ResponseURL
    the rules can accept) is split here as urlsplit splits it, anything else by urlsplit itself
    (tests/trust/test_url_fast_paths.py holds the two together)."""
    if url.startswith("https://"):
        end = url.find("/", 8)  # the authority ends at the first of / ? # after the scheme
        if end < 0:
            end = len(url)
        for delimiter in "?#":
            at = url.find(delimiter, 8, end)
            if at >= 0:
                end = at
        netloc, path = url[8:end], url[end:]
        if netloc.isascii() and "[" not in netloc and "]" not in netloc:
            path, _, fragment = path.partition("#")
            path, _, query = path.partition("?")
            return _new_tuple(SplitResult, ("https", netloc, path, query, fragment))
    return urlsplit(url)


@functools.lru_cache(maxsize=256)  # a fleet answers on a handful of hosts; any other only costs a miss
def _origin_refusals(scheme: str, netloc: str, hosts: HostRule) -> tuple[str, tuple[str, ...]]:
    """A URL's host (as urllib reads it) and every default rule a URL of `scheme` and `netloc`
    breaks, the host first (the dialect's finer rules, bucket and path, are `hosts.refusal`'s,
    once these hold); ValueError for a port urllib cannot read."""
    parts = SplitResult(scheme, netloc, "", "", "")
    port = parts.port
    reasons = []
    host = parts.hostname or ""
    if not netloc.isascii():
        reasons.append(_NOT_ASCII)
    elif not hosts.allows_host(host):
        reasons.append(f"host {host!r} is not {hosts.description}")
    if scheme != "https":
        reasons.append(f"scheme {scheme or 'none'!r} is not https")
    if "@" in netloc:  # urllib's username and password are set exactly when the netloc holds an @
        reasons.append("URL carries userinfo")
    if port not in (None, 443):
        reasons.append(f"port {port} is not 443")
    return host, tuple(reasons)


def redact(url: str) -> str:
    """The URL with its query string (the presigned credentials) replaced by a marker."""
    head, sep, _ = url.partition("?")
    return f"{head}?<redacted>" if sep else head


def expires_at(url: str) -> float | None:
    """Epoch seconds after which a presigned URL stops working (SigV4 or SigV2), or None."""
    try:
        query = _expiry_fields(urlsplit(url).query)
        if "x-amz-date" in query and "x-amz-expires" in query:
            return _amz_date(query["x-amz-date"]) + int(query["x-amz-expires"])
        if "expires" in query:
            return float(int(query["expires"]))
    except (ValueError, OverflowError):
        return None
    return None


_EXPIRY_FIELDS = frozenset({"x-amz-date", "x-amz-expires", "expires"})


def _expiry_fields(query: str) -> dict[str, str]:
    """`{name.lower(): values[0] for name, values in parse_qs(query).items()}` for the three names
    expiry reads, without decoding the rest of the query (the credential and signature are most of
    it): each pair's name is decoded only when it holds an escape, each wanted value only once."""
    found: dict[str, str] = {}
    seen: set[str] = set()  # the exact names met: parse_qs keeps each one's first value
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        if not sep or not value:  # parse_qs drops a pair without `=` or with an empty value
            continue
        if "%" in name or "+" in name:
            name = unquote(name.replace("+", " "))
        lower = name.lower()
        if lower in _EXPIRY_FIELDS and name not in seen:
            seen.add(name)  # a later spelling of the name replaces an earlier one, as in the dict it stood for
            found[lower] = unquote(value.replace("+", " "))
    return found


_AMZ_DATE = re.compile(r"[0-9]{8}T[0-9]{6}Z")  # ASCII digits, as _REGION (any other goes to strptime)


def _amz_date(value: str) -> float:
    """X-Amz-Date (`20260101T000000Z`, UTC) as epoch seconds; ValueError when it is not one.
    The usual form is read by slicing; any other goes to strptime, whose reading it always was."""
    if _AMZ_DATE.fullmatch(value):
        d = (int(value[0:4]), int(value[4:6]), int(value[6:8]), int(value[9:11]), int(value[11:13]), int(value[13:15]))
        return dt.datetime(*d, tzinfo=dt.UTC).timestamp()
    return dt.datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC).timestamp()

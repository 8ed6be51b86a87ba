"""The ResponseURL rules' fast paths (issue 32) decide exactly as the rules they skip: each is
checked against the full rule, written out here as the code had it, on generated input."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cfn_provider.trust.urls import (
    ALIYUN_HOSTS,
    S3_HOSTS,
    ResponseUrlPolicy,
    UrlRejected,
    _bucket_refusal,
    _s3_endpoint,
    expires_at,
    has_space_or_control,
    path_refusal,
    split_url,
)
from tests.support.hostile_urls import mutated_urls

SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


def full_path_refusal(path: str) -> str | None:
    """path_refusal as it was before the fast path: always decoded to a fixed point."""
    decoded = path
    for _ in range(4):
        once = unquote(decoded)
        if once == decoded:
            break
        decoded = once
    if any(segment.split(";")[0] in (".", "..") for segment in decoded.split("/")):
        return "path has dot-segments"
    if decoded.count("/") != path.count("/"):
        return "path has percent-encoded slashes"
    if "\\" in decoded:
        return "path has backslashes"
    return None


# the characters that make escapes and segments, so generated paths hit every rule often
PATH_PIECES = st.sampled_from(
    [
        "%",
        "2",
        "5",
        "e",
        "E",
        "f",
        "F",
        "c",
        "C",
        "3",
        "b",
        "B",
        "A",
        ".",
        "/",
        "\\",
        ";",
        "a",
        "%25",
        "%2e",
        "%2F",
        "%5c",
        "%3b",
        "%3A",
        "%7C",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PATH_PIECES, max_size=24).map("".join))
def test_path_refusal_decides_as_the_full_decoding(path):
    assert path_refusal(path) == full_path_refusal(path)


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_space_or_control_check_decides_as_the_pattern(text):
    assert has_space_or_control(text) == (SPACE_OR_CONTROL.search(text) is not None)


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F, exclude_categories=())))
def test_space_or_control_check_of_ascii_decides_as_the_pattern(text):
    """ASCII text (every real URL) takes the byte pass: the same answer as the pattern."""
    assert has_space_or_control(text) == (SPACE_OR_CONTROL.search(text) is not None)


def test_space_or_control_on_every_character():
    """Each code point alone (the fast path reads str.isprintable): the same answer as the pattern."""
    wrong = [
        c
        for c in map(chr, range(0x110000))
        if has_space_or_control(f"https://h/{c}") != bool(SPACE_OR_CONTROL.search(c))
    ]
    assert wrong == []


def full_expires_at(url: str) -> float | None:
    """expires_at as it was before the fast path: parse_qs over the whole query, strptime."""
    try:
        query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        if "x-amz-date" in query and "x-amz-expires" in query:
            start = dt.datetime.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ")
            return start.replace(tzinfo=dt.UTC).timestamp() + int(query["x-amz-expires"])
        if "expires" in query:
            return float(int(query["expires"]))
    except (ValueError, OverflowError):
        return None
    return None


QUERY_NAMES = st.sampled_from(
    [
        "X-Amz-Date",
        "x-amz-date",
        "X-AMZ-DATE",
        "X-Amz-%44ate",
        "X-Amz-Expires",
        "x-amz-expires",
        "Expires",
        "expires",
        "%45xpires",
        "X-Amz-Signature",
        "AWSAccessKeyId",
        "a+b",
        "",
    ]
)
QUERY_VALUES = st.sampled_from(
    [
        "20260101T000000Z",
        "20261231T235959Z",
        "20260230T000000Z",
        "2026011T000000Z",
        "2026 1 1T000000Z",
        "20260101T000060Z",
        "%32%30260101T000000Z",
        "7200",
        " 7200",
        "+60",
        "-5",
        "7_200",
        "1e3",
        "1700000000",
        "99999999999999999999999",
        "",
        "x+y",
        "%zz",
    ]
)
PAIRS = st.lists(st.tuples(QUERY_NAMES, st.sampled_from(["=", "", "=="]), QUERY_VALUES), max_size=6)


@settings(max_examples=4000, deadline=None)
@given(PAIRS)
def test_expiry_is_read_as_parse_qs_and_strptime_read_it(pairs):
    query = "&".join(f"{name}{sep}{value}" for name, sep, value in pairs)
    url = f"https://bucket.s3.amazonaws.com/key?{query}"
    assert expires_at(url) == full_expires_at(url), query


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(9998, 1, 1)), st.integers(0, 604800))
def test_every_real_amz_date_is_read_as_strptime_reads_it(when, seconds):
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    url = f"https://b.s3.amazonaws.com/k?X-Amz-Date={stamp}&X-Amz-Expires={seconds}&X-Amz-Signature=x"
    assert expires_at(url) == full_expires_at(url) is not None


# ------------------------------------------------ the split and the host's rules, judged once per host
def full_s3_refusal(parts, host: str) -> str | None:
    """CloudFormationBuckets.refusal as it was before its host's verdict was kept: every rule per URL."""
    if parts.netloc != parts.netloc.lower():
        return "host is not lower-case (CloudFormation's response URLs are)"
    if parts.fragment:
        return "URL carries a fragment"
    unsafe = path_refusal(parts.path)
    if unsafe is not None:
        return unsafe
    endpoint = _s3_endpoint(host)
    if endpoint is not None:
        bucket, _, key = parts.path.removeprefix("/").partition("/")
        if not key:
            return "path names no object in a bucket"
    else:
        bucket, _, rest = host.partition(".")
        endpoint = _s3_endpoint(rest)
        if endpoint is None:
            return f"host {host!r} is not {S3_HOSTS.description}"
        if not parts.path.removeprefix("/"):
            return "path names no object in the bucket"
    return _bucket_refusal(bucket, endpoint, host)


def full_check(url: str, hosts) -> str | None:
    """ResponseUrlPolicy().check's refusal as it was before the fast paths (None: accepted)."""
    if SPACE_OR_CONTROL.search(url):
        return "URL contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"unparseable URL ({exc})"
    reasons = []
    host = parts.hostname or ""
    if not parts.netloc.isascii():
        reasons.append("host is not ASCII")
    elif not hosts.allows_host(host):
        reasons.append(f"host {host!r} is not {hosts.description}")
    if parts.scheme != "https":
        reasons.append(f"scheme {parts.scheme or 'none'!r} is not https")
    if parts.username is not None or parts.password is not None:
        reasons.append("URL carries userinfo")
    if port not in (None, 443):
        reasons.append(f"port {port} is not 443")
    if not reasons:
        reason = full_s3_refusal(parts, host) if hosts is S3_HOSTS else hosts.refusal(parts, host)
        if reason is not None:
            reasons.append(reason)
    return "; ".join(reasons) or None


def refusal(url: str, hosts) -> str | None:
    try:
        ResponseUrlPolicy().check(url, hosts)
    except UrlRejected as exc:
        return str(exc)
    return None


@settings(max_examples=3000, deadline=None)
@given(mutated_urls(most=4), st.sampled_from([S3_HOSTS, ALIYUN_HOSTS]))
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com:443/k?x", S3_HOSTS)
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com:x/k?x", S3_HOSTS)
@example("https://[::1/k", S3_HOSTS)
@example("HTTPS://s3.amazonaws.com/cloudformation-custom-resource-response-useast1/k", S3_HOSTS)
@example("https://s3.amazonaws.com/cloudformation-custom-resource-response-uswest2/k", S3_HOSTS)
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com", S3_HOSTS)
def test_a_url_is_judged_as_by_every_rule_per_url(url: str, hosts) -> None:
    assert refusal(url, hosts) == full_check(url, hosts)
    assert refusal(url, hosts) == full_check(url, hosts)  # again: now from the host's kept verdict


@settings(max_examples=3000, deadline=None)
@given(mutated_urls(most=4))
@example("https://a/b?c#d?e/f")
@example("https://a#b/c")
@example("https://a?b#c")
@example("https://")
@example("https://h\u00e9/p")
@example("https://[::1]:443/p")
def test_a_url_is_split_as_urlsplit_splits_it(url: str) -> None:
    if has_space_or_control(url):
        return  # split_url is only ever given a URL the check has passed
    try:
        expected = urlsplit(url)
    except ValueError:
        with pytest.raises(ValueError):
            split_url(url)
        return
    assert split_url(url) == expected
    assert type(split_url(url)) is type(expected)

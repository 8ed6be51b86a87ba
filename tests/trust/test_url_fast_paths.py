"""The ResponseURL rules' fast paths (issue 32) decide exactly as the rules they skip: each is
checked against the full rule, written out here as the code had it, on generated input."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, unquote, urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from cfn_provider.trust.urls import expires_at, has_space_or_control, path_refusal

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

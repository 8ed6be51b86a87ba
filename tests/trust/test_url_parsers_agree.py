"""The ResponseURL rules judge a URL as the responder sends it.

The rules read a URL with urllib's `urlsplit`; the responder hands the same string to aiohttp as
`yarl.URL(url, encoded=True)`, which connects to its host and port and sends its path and query.
Two parsers of one URL are where parser-differential bypasses start (a rule sees one host, the
client calls another), so on generated URLs, a known-good ResponseURL with hostile characters
dropped in anywhere, every URL the rules accept must be, for yarl, the same scheme, host, port,
path, query and fragment, and carry no userinfo (or be one yarl refuses outright: the responder
reports that as an unusable URL and sends nothing)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from yarl import URL

from cfn_provider.trust.urls import ALIYUN_HOSTS, ResponseUrlPolicy, UrlRejected

QUERY = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261127T000000Z&X-Amz-Expires=7200&X-Amz-Signature=ab"
GOOD = (
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws%3Acloudformation"
    "%3Aus-east-1%3A123456789012%3Astack/s/1%7CThing%7C1" + QUERY,
    "https://s3.eu-west-1.amazonaws.com/cloudformation-custom-resource-response-euwest1/arn%3As/1" + QUERY,
    "https://cloudformation-custom-resource-response-cnnorth1.s3.cn-north-1.amazonaws.com.cn/k" + QUERY,
    "http://127.0.0.1:5000/bucket/key" + QUERY,  # under the operator's prefix below
    "https://ros.cn-hangzhou.aliyuncs.com/response?x=1",
)
PREFIX = "http://127.0.0.1:5000/bucket/"
# what splits, joins, escapes or disguises the parts of a URL, in ASCII and beyond
HOSTILE = st.sampled_from(
    list("@:/\\?#%.;[]!$&'()*+,=~^`{}|<>\"")
    + ["%2e", "%2f", "%40", "%5c", "%3a", "..", "\u0660", "\uff0e"]
    + ["\u00e9", "\u0130", "\u212a", "\u2100", "\ufe6b", "\uff20", "\uff1a", "\uff0f", "\u3002", "xn--", "0x7f"]
    + ["1", "A", "a", "443", "65536", "-1", " ", "\t", "\x00"]
)


def _mutated() -> st.SearchStrategy[str]:
    @st.composite
    def build(draw: st.DrawFn) -> str:
        url = draw(st.sampled_from(GOOD))
        for _ in range(draw(st.integers(1, 3))):
            authority_end = url.find("/", len("https://")) % (len(url) + 1)  # half the draws go there
            at = draw(st.one_of(st.integers(0, len(url)), st.integers(0, authority_end)))
            url = url[:at] + draw(HOSTILE) + url[at:]
        return url

    return build()


def _accepted(url: str) -> bool:
    policy = ResponseUrlPolicy([PREFIX])
    for hosts in (None, ALIYUN_HOSTS):
        try:
            policy.check(url) if hosts is None else policy.check(url, hosts)
        except UrlRejected:
            continue
        return True
    return False


def assert_same_target(url: str) -> None:
    """What the rules read of `url` is what aiohttp will be told to call."""
    ours = urlsplit(url)
    try:
        sent = URL(url, encoded=True)
    except ValueError:
        return  # the responder's send() reports "unusable URL" and calls nothing
    assert sent.scheme == ours.scheme
    assert sent.raw_host is not None and sent.raw_host.isascii(), "a host IDNA would map on the way to DNS"
    assert sent.raw_host.lower() == ours.hostname, "host"
    assert sent.port == (ours.port or {"https": 443, "http": 80}[ours.scheme]), "port"
    assert sent.raw_user is None and sent.raw_password is None, "userinfo"
    assert sent.raw_path == (ours.path or "/"), "path"
    assert sent.raw_query_string == ours.query, "query"
    assert sent.raw_fragment == ours.fragment, "fragment"


@pytest.mark.parametrize("url", GOOD)
def test_every_known_good_url_is_accepted_and_read_alike(url: str) -> None:
    assert _accepted(url)
    assert_same_target(url)


@settings(max_examples=3000, deadline=None)
@given(_mutated())
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com\\@evil.example/k" + QUERY)
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com:\u0664\u0664\u0663/k" + QUERY)
@example("http://127.0.0.1:5000\\@evil.example/bucket/key")
@example("https://ros.cn-\u212ahangzhou.aliyuncs.com/response?x=1")  # the Kelvin sign: lower-cased to k
def test_an_accepted_url_is_sent_where_the_rules_looked(url: str) -> None:
    if _accepted(url):
        assert_same_target(url)

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
from yarl import URL

from cfn_provider.trust.urls import ALIYUN_HOSTS, ResponseUrlPolicy, UrlRejected
from tests.support.hostile_urls import GOOD, PREFIX, QUERY, mutated_urls


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
@given(mutated_urls())
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com\\@evil.example/k" + QUERY)
@example("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com:\u0664\u0664\u0663/k" + QUERY)
@example("http://127.0.0.1:5000\\@evil.example/bucket/key")
@example("https://ros.cn-\u212ahangzhou.aliyuncs.com/response?x=1")  # the Kelvin sign: lower-cased to k
def test_an_accepted_url_is_sent_where_the_rules_looked(url: str) -> None:
    if _accepted(url):
        assert_same_target(url)

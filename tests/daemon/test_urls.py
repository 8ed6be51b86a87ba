"""daemon.urls: which ResponseURLs may be called, how they are logged, when they expire."""
from __future__ import annotations

import datetime as dt

import pytest

from daemon.urls import ResponseUrlPolicy, UrlRejected, expires_at, matches_prefix, redact, redact_text

SIGV4_QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240501T120000Z&X-Amz-SignedHeaders=host"
    "&X-Amz-Expires=7200&X-Amz-Credential=AKIAEXAMPLE%2F20240501%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Signature=0123456789abcdef"
)
CFN_PATH = "/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/MyStack/guid%7CThing%7Creq-1"


def allowed(url: str, prefixes: tuple[str, ...] = ()) -> bool:
    try:
        ResponseUrlPolicy(prefixes).check(url)
    except UrlRejected:
        return False
    return True


# --- default policy: real CloudFormation response hosts are accepted ---------------------

@pytest.mark.parametrize("url", [
    f"https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com{CFN_PATH}?{SIGV4_QUERY}",
    f"https://cloudformation-custom-resource-response-uswest2.s3-us-west-2.amazonaws.com{CFN_PATH}?{SIGV4_QUERY}",
    f"https://cloudformation-custom-resource-response-euwest1.s3.eu-west-1.amazonaws.com{CFN_PATH}",
    f"https://s3.cn-north-1.amazonaws.com.cn/cloudformation-custom-resource-response-cnnorth1{CFN_PATH}",
    f"https://bucket.s3.cn-northwest-1.amazonaws.com.cn{CFN_PATH}",
    f"https://bucket.s3.dualstack.eu-west-1.amazonaws.com{CFN_PATH}",
    f"https://s3.dualstack.us-east-1.amazonaws.com/bucket{CFN_PATH}",
    "https://s3.amazonaws.com/bucket/key",
    "https://s3.us-east-1.amazonaws.com/bucket/key",
    "https://my.dotted.bucket.s3.amazonaws.com/key",
    "https://bucket.s3.amazonaws.com:443/key",
    "https://BUCKET.S3.AMAZONAWS.COM/key",
])
def test_real_s3_response_hosts_are_accepted(url):
    ResponseUrlPolicy().check(url)  # does not raise


# --- default policy: everything else is refused, with a reason ---------------------------

@pytest.mark.parametrize("url, why", [
    ("http://bucket.s3.amazonaws.com/key", "https"),
    ("ftp://bucket.s3.amazonaws.com/key", "https"),
    ("//bucket.s3.amazonaws.com/key", "https"),
    ("https://169.254.169.254/latest/meta-data/", "S3 host"),
    ("http://169.254.169.254/latest/meta-data/", "https"),
    ("https://localhost/key", "S3 host"),
    ("https://127.0.0.1/key", "S3 host"),
    ("https://[::1]/key", "S3 host"),
    ("https://s3.amazonaws.com.evil.example/key", "S3 host"),
    ("https://evil-s3.amazonaws.com/key", "S3 host"),
    ("https://evils3.amazonaws.com/key", "S3 host"),
    ("https://s3.amazonaws.com.cn.evil.example/key", "S3 host"),
    ("https://bucket.s3.amazonaws.co/key", "S3 host"),
    ("https://s3.amazonaws.com@evil.example/key", "userinfo"),
    ("https://user:pw@bucket.s3.amazonaws.com/key", "userinfo"),
    ("https://bucket.s3.amazonaws.com:8443/key", "port"),
    ("https://bucket.s3.amazonaws.com:80/key", "port"),
])
def test_non_s3_or_unsafe_urls_are_rejected_with_a_reason(url, why):
    with pytest.raises(UrlRejected, match=why):
        ResponseUrlPolicy().check(url)


@pytest.mark.parametrize("url", [
    "",
    "not a url",
    "https://",
    "https://[::1/key",  # broken IPv6 literal
    "https://bucket.s3.amazonaws.com:notaport/key",
    "https://bucket.s3.amazonaws.com:99999/key",
    "mailto:someone@s3.amazonaws.com",
])
def test_garbage_is_rejected_not_crashed_on(url):
    with pytest.raises(UrlRejected):
        ResponseUrlPolicy().check(url)


def test_customer_named_non_s3_aws_hosts_are_rejected():
    """Only S3 endpoints: a load balancer someone named `s3-...` is not S3, though under amazonaws.com."""
    assert not allowed("https://s3-attacker-1234567890.us-east-1.elb.amazonaws.com/key")


# --- configured prefixes: compared as parsed URLs ----------------------------------------

def test_configured_prefix_allows_an_emulator_url():
    assert allowed("http://127.0.0.1:5000/bucket/key?X-Amz-Signature=x", ("http://127.0.0.1:5000/",))


def test_prefix_port_must_match_exactly_not_as_a_string_prefix():
    assert not allowed("http://127.0.0.1:50001/bucket/key", ("http://127.0.0.1:5000/",))
    assert not allowed("http://127.0.0.1:5000/bucket/key", ("http://127.0.0.1:50001/",))
    assert not allowed("http://127.0.0.1/bucket/key", ("http://127.0.0.1:5000/",))


def test_prefix_host_must_match_exactly_not_as_a_string_prefix():
    assert not allowed("http://127.0.0.10:5000/key", ("http://127.0.0.1:5000/",))
    assert not allowed("http://127.0.0.1.evil.example:5000/key", ("http://127.0.0.1:5000/",))


def test_prefix_scheme_must_match():
    assert not allowed("https://127.0.0.1:5000/key", ("http://127.0.0.1:5000/",))


def test_prefix_path_must_match():
    prefix = ("http://127.0.0.1:5000/responses/",)
    assert allowed("http://127.0.0.1:5000/responses/abc", prefix)
    assert not allowed("http://127.0.0.1:5000/other/abc", prefix)


def test_prefix_never_matches_userinfo_tricks():
    assert not allowed("http://127.0.0.1:5000@evil.example/key", ("http://127.0.0.1:5000/",))
    assert not matches_prefix("https://good.example@evil.example/", "https://good.example/")
    assert not matches_prefix("https://good.example:pw@good.example/", "https://good.example/")


def test_prefix_does_not_loosen_the_default_rules_for_other_urls():
    prefix = ("http://127.0.0.1:5000/",)
    assert allowed("https://bucket.s3.amazonaws.com/key", prefix)
    assert not allowed("http://169.254.169.254/latest/meta-data/", prefix)


def test_matches_prefix_tolerates_unparseable_input():
    assert not matches_prefix("http://[::1/key", "http://127.0.0.1:5000/")
    assert not matches_prefix("http://127.0.0.1:5000/key", "http://127.0.0.1:notaport/")


# --- redaction: presigned credentials never reach the logs ------------------------------

SECRET_URL = f"https://bucket.s3.amazonaws.com{CFN_PATH}?{SIGV4_QUERY}"


def test_redact_replaces_the_query_string_and_keeps_the_path():
    out = redact(SECRET_URL)
    assert "X-Amz-Signature" not in out and "0123456789abcdef" not in out and "AKIAEXAMPLE" not in out
    assert out == f"https://bucket.s3.amazonaws.com{CFN_PATH}?<redacted>"


def test_redact_leaves_a_url_without_query_unchanged():
    assert redact("https://bucket.s3.amazonaws.com/key") == "https://bucket.s3.amazonaws.com/key"


@pytest.mark.parametrize("url", [SECRET_URL, "https://h/p", "https://h/p?", "https://h/p?a=1?b=2"])
def test_redact_is_idempotent(url):
    assert redact(redact(url)) == redact(url)


def test_redact_text_removes_every_query_string_in_free_text():
    text = (f"PUT {SECRET_URL} failed: 403; retried via \"http://127.0.0.1:5000/b/k?X-Amz-Signature=deadbeef\" "
            f"and '{SECRET_URL}'")
    out = redact_text(text)
    for secret in ("0123456789abcdef", "deadbeef", "AKIAEXAMPLE", "X-Amz-Credential"):
        assert secret not in out
    assert f"https://bucket.s3.amazonaws.com{CFN_PATH}?<redacted>" in out
    assert "http://127.0.0.1:5000/b/k?<redacted>" in out
    assert out.startswith("PUT ") and "failed: 403; retried via" in out


def test_redact_text_leaves_text_without_urls_alone():
    text = "handler raised: KeyError('Bucket') ? what now"
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    f"error at {SECRET_URL} then {SECRET_URL}",
    "https://h/p?a=b",
    "already https://h/p?<redacted> done",
])
def test_redact_text_is_idempotent(text):
    once = redact_text(text)
    assert redact_text(once) == once


def test_redact_text_matches_redact_for_a_bare_url():
    assert redact_text(SECRET_URL) == redact(SECRET_URL)


# --- expiry of presigned URLs -----------------------------------------------------------

def test_expires_at_sigv4_is_date_plus_expires():
    expected = dt.datetime(2024, 5, 1, 14, 0, 0, tzinfo=dt.timezone.utc).timestamp()  # 12:00Z + 7200 s
    assert expires_at(SECRET_URL) == expected


def test_expires_at_sigv2_is_the_expires_epoch():
    url = "https://bucket.s3.amazonaws.com/key?AWSAccessKeyId=AKIAEXAMPLE&Expires=1714572000&Signature=abc%3D"
    assert expires_at(url) == 1714572000.0


@pytest.mark.parametrize("url", [
    "https://bucket.s3.amazonaws.com/key",
    "https://bucket.s3.amazonaws.com/key?X-Amz-Date=20240501T120000Z",  # no X-Amz-Expires
    "https://bucket.s3.amazonaws.com/key?X-Amz-Expires=7200",  # no X-Amz-Date
    "https://bucket.s3.amazonaws.com/key?X-Amz-Date=yesterday&X-Amz-Expires=7200",
    "https://bucket.s3.amazonaws.com/key?X-Amz-Date=20240501T120000Z&X-Amz-Expires=soon",
    "https://bucket.s3.amazonaws.com/key?Expires=tomorrow",
    "https://bucket.s3.amazonaws.com/key?Expires=" + "9" * 400,
    "not a url at all",
])
def test_expires_at_is_none_when_unknown_or_unreadable(url):
    assert expires_at(url) is None


@pytest.mark.parametrize("url, prefix, expected", [
    ("http://127.0.0.1:5000/cfn/../admin", "http://127.0.0.1:5000/cfn/", False),
    ("http://127.0.0.1:5000/cfn/%2e%2e/admin", "http://127.0.0.1:5000/cfn/", False),
    ("http://127.0.0.1:5000/cfn/./x", "http://127.0.0.1:5000/cfn/", False),
    ("http://127.0.0.1:5000/cfnother/x", "http://127.0.0.1:5000/cfn", False),
    ("http://127.0.0.1:5000/cfn/x", "http://127.0.0.1:5000/cfn", True),
    ("http://127.0.0.1:5000/cfn", "http://127.0.0.1:5000/cfn", True),
    ("http://127.0.0.1:5000/bucket/key?X-Amz-Signature=a", "http://127.0.0.1:5000", True),
])
def test_prefixes_match_whole_path_segments_without_dot_segments(url, prefix, expected):
    from daemon.urls import matches_prefix

    assert matches_prefix(url, prefix) is expected

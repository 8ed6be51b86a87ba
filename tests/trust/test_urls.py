"""cfn_provider.trust.urls: which ResponseURLs may be called, how they are logged, when they expire."""

from __future__ import annotations

import datetime as dt

import pytest

from cfn_provider.logs import redact_text
from cfn_provider.trust.urls import ResponseUrlPolicy, UrlRejected, expires_at, matches_prefix, redact

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


# --- default policy: CloudFormation's own response buckets, every S3 endpoint form ---------


def bucket(region: str) -> str:
    return "cloudformation-custom-resource-response-" + region.replace("-", "")


ACCEPTED = [
    # aws, regionless (us-east-1's endpoint and its legacy alias): us-east-1's bucket
    f"https://{bucket('us-east-1')}.s3.amazonaws.com{CFN_PATH}?{SIGV4_QUERY}",
    f"https://s3.amazonaws.com/{bucket('us-east-1')}{CFN_PATH}?{SIGV4_QUERY}",
    f"https://{bucket('us-east-1')}.s3-external-1.amazonaws.com{CFN_PATH}",
    f"https://s3-external-1.amazonaws.com/{bucket('us-east-1')}{CFN_PATH}",
    # aws, regional: dotted, legacy dashed and dual-stack endpoints, both styles
    f"https://{bucket('us-east-1')}.s3.us-east-1.amazonaws.com{CFN_PATH}",
    f"https://{bucket('us-west-2')}.s3-us-west-2.amazonaws.com{CFN_PATH}?{SIGV4_QUERY}",
    f"https://{bucket('eu-west-1')}.s3.eu-west-1.amazonaws.com{CFN_PATH}",
    f"https://{bucket('ap-southeast-2')}.s3.dualstack.ap-southeast-2.amazonaws.com{CFN_PATH}",
    f"https://s3.eu-central-1.amazonaws.com/{bucket('eu-central-1')}{CFN_PATH}",
    f"https://s3-ap-northeast-1.amazonaws.com/{bucket('ap-northeast-1')}{CFN_PATH}",
    f"https://s3.dualstack.me-south-1.amazonaws.com/{bucket('me-south-1')}{CFN_PATH}",
    # aws-us-gov
    f"https://{bucket('us-gov-west-1')}.s3.us-gov-west-1.amazonaws.com{CFN_PATH}",
    f"https://{bucket('us-gov-east-1')}.s3-us-gov-east-1.amazonaws.com{CFN_PATH}",
    f"https://s3.us-gov-west-1.amazonaws.com/{bucket('us-gov-west-1')}{CFN_PATH}",
    # aws-cn
    f"https://{bucket('cn-north-1')}.s3.cn-north-1.amazonaws.com.cn{CFN_PATH}",
    f"https://s3.cn-northwest-1.amazonaws.com.cn/{bucket('cn-northwest-1')}{CFN_PATH}",
    f"https://{bucket('cn-north-1')}.s3.dualstack.cn-north-1.amazonaws.com.cn{CFN_PATH}",
    # SigV2 presigned, explicit default port
    f"https://{bucket('us-east-1')}.s3.amazonaws.com/key?AWSAccessKeyId=AKIAEXAMPLE&Expires=1714572000&Signature=abc%3D",
    f"https://{bucket('us-east-1')}.s3.amazonaws.com:443{CFN_PATH}",
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_cloudformation_response_buckets_are_accepted_in_every_endpoint_form(url):
    ResponseUrlPolicy().check(url)  # does not raise


# --- default policy: everything else is refused, with a reason ---------------------------

B = bucket("us-east-1")
REFUSED = [
    # any other bucket: a template author's own, on any real S3 endpoint
    ("https://bucket.s3.amazonaws.com/key", "not CloudFormation's response bucket"),
    ("https://s3.amazonaws.com/bucket/key", "not CloudFormation's response bucket"),
    ("https://attacker.s3.us-east-1.amazonaws.com/key", "not CloudFormation's response bucket"),
    ("https://my.dotted.bucket.s3.amazonaws.com/key", "not"),
    # look-alike bucket names
    (f"https://{B}-evil.s3.amazonaws.com/key", "not CloudFormation's response bucket"),
    (f"https://s3.amazonaws.com/{B}-evil/key", "not CloudFormation's response bucket"),
    (f"https://evil-{B}.s3.amazonaws.com/key", "not CloudFormation's response bucket"),
    (f"https://{B}x.s3.amazonaws.com/key", "not CloudFormation's response bucket"),
    ("https://cloudformation-custom-resource-response-us-east-1.s3.amazonaws.com/key", "not CloudFormation's"),
    ("https://cloudformation-custom-resource-response-.s3.amazonaws.com/key", "not CloudFormation's"),
    ("https://cloudformation-custom-resource-responses-useast1.s3.amazonaws.com/key", "not CloudFormation's"),
    ("https://cloudformation-custom-resource-response-useast1.evil.s3.amazonaws.com/key", "not"),
    (f"https://s3.amazonaws.com/{B}.evil/key", "not CloudFormation's response bucket"),
    (f"https://s3.amazonaws.com/{B}%2devil/key", "not CloudFormation's response bucket"),
    (f"https://s3.amazonaws.com/x/{B}/key", "not CloudFormation's response bucket"),
    # a made-up region's bucket on the regionless endpoint could be anyone's
    ("https://cloudformation-custom-resource-response-evil1.s3.amazonaws.com/key", "us-east-1"),
    (f"https://{bucket('eu-west-1')}.s3.amazonaws.com/key", "us-east-1"),
    (f"https://s3.amazonaws.com/{bucket('us-west-2')}/key", "us-east-1"),
    # the bucket's region must be the endpoint's
    (f"https://{bucket('us-east-1')}.s3.us-west-2.amazonaws.com/key", "region us-west-2"),
    (f"https://{bucket('eu-west-1')}.s3-eu-west-2.amazonaws.com/key", "region eu-west-2"),
    (f"https://s3.eu-west-1.amazonaws.com/{bucket('eu-west-2')}/key", "region eu-west-1"),
    (f"https://{bucket('cn-north-1')}.s3.cn-northwest-1.amazonaws.com.cn/key", "region cn-northwest-1"),
    (f"https://{bucket('us-gov-west-1')}.s3.us-west-1.amazonaws.com/key", "region us-west-1"),
    # partitions: amazonaws.com.cn is aws-cn's alone, with no regionless endpoint
    (f"https://{bucket('us-east-1')}.s3.us-east-1.amazonaws.com.cn/key", "not CloudFormation's response bucket"),
    (f"https://{bucket('cn-north-1')}.s3.cn-north-1.amazonaws.com/key", "not CloudFormation's response bucket"),
    (f"https://{B}.s3.amazonaws.com.cn/key", "not CloudFormation's response bucket"),
    # other region suffixes and look-alike endpoints
    (f"https://{B}.s3.amazonaws.com.evil.example/key", "not CloudFormation's response bucket"),
    (f"https://{B}.s3.amazonaws.com.cn.evil.example/key", "not"),
    (f"https://{B}.s3.amazonaws.co/key", "not"),
    (f"https://{B}.s3.us-east-1.amazonaws.com./key", "not"),
    (f"https://{B}.s3-website-us-east-1.amazonaws.com/key", "not"),
    (f"https://{B}.s3-accesspoint.us-east-1.amazonaws.com/key", "not"),
    (f"https://{B}.s3.us-east-1.vpce.amazonaws.com/key", "not"),
    (f"https://{B}.s3-x.us-east-1.elb.amazonaws.com/key", "not"),
    ("https://s3-attacker-1234567890.us-east-1.elb.amazonaws.com/key", "not"),
    (f"https://{B}.evil-s3.amazonaws.com/key", "not"),
    (f"https://{B}%2Es3.amazonaws.com/key", "not"),
    (f"https://{B}.s3%2Eamazonaws.com/key", "not"),
    (f"https://{B}.s3.amazonaws.com%2eevil.example/key", "not"),
    # case variants: CloudFormation's URLs are lower-case, and path-style bucket names are exact
    (f"https://{B.upper()}.S3.AMAZONAWS.COM/key", "lower-case"),
    (f"https://{B}.S3.amazonaws.com/key", "lower-case"),
    (f"https://s3.amazonaws.com/{B.upper()}/key", "not CloudFormation's response bucket"),
    # dot-segments, fragments, no object
    (f"https://s3.amazonaws.com/{B}/../attacker/key", "dot-segments"),
    (f"https://s3.amazonaws.com/{B}/%2e%2e/attacker/key", "dot-segments"),
    (f"https://{B}.s3.amazonaws.com/a/./key", "dot-segments"),
    (f"https://{B}.s3.amazonaws.com/key#frag", "fragment"),
    (f"https://s3.amazonaws.com/{B}", "no object"),
    (f"https://s3.amazonaws.com/{B}/", "no object"),
    (f"https://{B}.s3.amazonaws.com/", "no object"),
    (f"https://{B}.s3.amazonaws.com", "no object"),
    # scheme, userinfo, ports
    (f"http://{B}.s3.amazonaws.com/key", "https"),
    (f"ftp://{B}.s3.amazonaws.com/key", "https"),
    (f"//{B}.s3.amazonaws.com/key", "https"),
    (f"https://{B}.s3.amazonaws.com@evil.example/key", "userinfo"),
    (f"https://user:pw@{B}.s3.amazonaws.com/key", "userinfo"),
    (f"https://{B}.s3.amazonaws.com:@evil.example/key", "userinfo"),
    (f"https://{B}.s3.amazonaws.com:8443/key", "port"),
    (f"https://{B}.s3.amazonaws.com:80/key", "port"),
    # not S3 at all
    ("https://169.254.169.254/latest/meta-data/", "not"),
    ("http://169.254.169.254/latest/meta-data/", "https"),
    ("https://localhost/key", "not"),
    ("https://127.0.0.1/key", "not"),
    ("https://[::1]/key", "not"),
    ("https://s3.amazonaws.com.evil.example/key", "not"),
    ("https://evils3.amazonaws.com/key", "not"),
]


@pytest.mark.parametrize("url, why", REFUSED)
def test_anything_but_cloudformations_buckets_is_refused_with_a_reason(url, why):
    with pytest.raises(UrlRejected, match=why):
        ResponseUrlPolicy().check(url)


def test_every_refusal_reason_is_free_of_the_query_string():
    for url, _ in REFUSED:
        try:
            ResponseUrlPolicy().check(url + "?X-Amz-Signature=SECRETSIG")
        except UrlRejected as exc:
            assert "SECRETSIG" not in str(exc)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "https://",
        "https://[::1/key",  # broken IPv6 literal
        f"https://{B}.s3.amazonaws.com:notaport/key",
        f"https://{B}.s3.amazonaws.com:99999/key",
        "mailto:someone@s3.amazonaws.com",
        f"https://{B}.s3.amazonaws.com/key with space",
        f"https://{B}.s3.amazonaws.com/key\r\nX-Injected: 1",
    ],
)
def test_garbage_is_rejected_not_crashed_on(url):
    with pytest.raises(UrlRejected):
        ResponseUrlPolicy().check(url)


def test_ros_hosts_keep_their_own_rule():
    """The ROS dialect answers on ROS's own endpoints only; CloudFormation's buckets are not among them,
    and no OSS bucket is (any bucket is its owner's: a template author's own among them)."""
    from cfn_provider.trust.urls import ALIYUN_HOSTS

    ok = ResponseUrlPolicy()
    for host in (
        "ros.aliyuncs.com",
        "ros.cn-hangzhou.aliyuncs.com",
        "ros-intranet.cn-hangzhou.aliyuncs.com",
        "ros-vpc.ap-southeast-1.aliyuncs.com",
        "ros.vpc-proxy.aliyuncs.com",
    ):
        ok.check(f"https://{host}/callback?x=1", ALIYUN_HOSTS)
    for host in (
        f"{B}.s3.amazonaws.com",
        "evil.fc.aliyuncs.com",
        "loot.oss-cn-hangzhou.aliyuncs.com",
        "bucket.oss-cn-hangzhou-internal.aliyuncs.com",
        "oss-cn-hangzhou.aliyuncs.com",
        "ros.oss-cn-hangzhou.aliyuncs.com",
        "ros-x.oss-accelerate.aliyuncs.com",
        "ros.cn-hangzhou.aliyuncs.com.evil.example",
        "evil-ros.cn-hangzhou.aliyuncs.com",
    ):
        with pytest.raises(UrlRejected, match="not a ROS endpoint"):
            ok.check(f"https://{host}/key", ALIYUN_HOSTS)
    with pytest.raises(UrlRejected, match="not CloudFormation's"):
        ok.check("https://ros.cn-hangzhou.aliyuncs.com/callback")


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


def test_a_host_that_only_unicode_lower_casing_makes_allowed_is_refused():
    """urllib lower-cases a host by Unicode's rules (the Kelvin sign becomes an ASCII k); the HTTP
    client sends the host raw, to be mapped by IDNA on the way to DNS: the rules would judge one
    host and the PUT call another (tests/trust/test_url_parsers_agree.py found it)."""
    from cfn_provider.trust.urls import ALIYUN_HOSTS

    kelvin = "\u212a"
    with pytest.raises(UrlRejected, match="host is not ASCII"):
        ResponseUrlPolicy().check(f"https://ros.cn-{kelvin}hangzhou.aliyuncs.com/callback?x=1", ALIYUN_HOSTS)
    with pytest.raises(UrlRejected, match="host is not ASCII"):
        ResponseUrlPolicy().check(f"https://{B}.s3.amazonaws.com/{kelvin}?x=1".replace("useast1", f"useast1{kelvin}"))
    assert matches_prefix("https://k.example/x", "https://k.example/")
    assert not matches_prefix(f"https://{kelvin}.example/x", "https://k.example/")
    assert not allowed(f"http://local{kelvin}ost:5000/key", ("http://localkost:5000/",))


def test_prefix_does_not_loosen_the_default_rules_for_other_urls():
    prefix = ("http://127.0.0.1:5000/",)
    assert allowed(f"https://{B}.s3.amazonaws.com/key", prefix)
    assert not allowed("https://bucket.s3.amazonaws.com/key", prefix)
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
    text = (
        f'PUT {SECRET_URL} failed: 403; retried via "http://127.0.0.1:5000/b/k?X-Amz-Signature=deadbeef" '
        f"and '{SECRET_URL}'"
    )
    out = redact_text(text)
    for secret in ("0123456789abcdef", "deadbeef", "AKIAEXAMPLE", "X-Amz-Credential"):
        assert secret not in out
    assert f"https://bucket.s3.amazonaws.com{CFN_PATH}?<redacted>" in out
    assert "http://127.0.0.1:5000/b/k?<redacted>" in out
    assert out.startswith("PUT ") and "failed: 403; retried via" in out


def test_redact_text_leaves_text_without_urls_alone():
    text = "handler raised: KeyError('Bucket') ? what now"
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        f"error at {SECRET_URL} then {SECRET_URL}",
        "https://h/p?a=b",
        "already https://h/p?<redacted> done",
    ],
)
def test_redact_text_is_idempotent(text):
    once = redact_text(text)
    assert redact_text(once) == once


def test_redact_text_matches_redact_for_a_bare_url():
    assert redact_text(SECRET_URL) == redact(SECRET_URL)


# --- expiry of presigned URLs -----------------------------------------------------------


def test_expires_at_sigv4_is_date_plus_expires():
    expected = dt.datetime(2024, 5, 1, 14, 0, 0, tzinfo=dt.UTC).timestamp()  # 12:00Z + 7200 s
    assert expires_at(SECRET_URL) == expected


def test_expires_at_sigv2_is_the_expires_epoch():
    url = "https://bucket.s3.amazonaws.com/key?AWSAccessKeyId=AKIAEXAMPLE&Expires=1714572000&Signature=abc%3D"
    assert expires_at(url) == 1714572000.0


@pytest.mark.parametrize(
    "url",
    [
        "https://bucket.s3.amazonaws.com/key",
        "https://bucket.s3.amazonaws.com/key?X-Amz-Date=20240501T120000Z",  # no X-Amz-Expires
        "https://bucket.s3.amazonaws.com/key?X-Amz-Expires=7200",  # no X-Amz-Date
        "https://bucket.s3.amazonaws.com/key?X-Amz-Date=yesterday&X-Amz-Expires=7200",
        "https://bucket.s3.amazonaws.com/key?X-Amz-Date=20240501T120000Z&X-Amz-Expires=soon",
        "https://bucket.s3.amazonaws.com/key?Expires=tomorrow",
        "https://bucket.s3.amazonaws.com/key?Expires=" + "9" * 400,
        "not a url at all",
    ],
)
def test_expires_at_is_none_when_unknown_or_unreadable(url):
    assert expires_at(url) is None


@pytest.mark.parametrize(
    "url, prefix, expected",
    [
        ("http://127.0.0.1:5000/cfn/../admin", "http://127.0.0.1:5000/cfn/", False),
        ("http://127.0.0.1:5000/cfn/%2e%2e/admin", "http://127.0.0.1:5000/cfn/", False),
        ("http://127.0.0.1:5000/cfn/./x", "http://127.0.0.1:5000/cfn/", False),
        ("http://127.0.0.1:5000/cfnother/x", "http://127.0.0.1:5000/cfn", False),
        ("http://127.0.0.1:5000/cfn/x", "http://127.0.0.1:5000/cfn", True),
        ("http://127.0.0.1:5000/cfn", "http://127.0.0.1:5000/cfn", True),
        ("http://127.0.0.1:5000/bucket/key?X-Amz-Signature=a", "http://127.0.0.1:5000", True),
    ],
)
def test_prefixes_match_whole_path_segments_without_dot_segments(url, prefix, expected):
    from cfn_provider.trust.urls import matches_prefix

    assert matches_prefix(url, prefix) is expected


# --- the one prefix rule: whole segments, exactly as fetched (issue 21 item 3) ------------


@pytest.mark.parametrize(
    "path, why",
    [
        ("/cfn/../admin", "dot-segments"),
        ("/cfn/%2e%2e/admin", "dot-segments"),
        ("/cfn/%2E./admin", "dot-segments"),
        ("/cfn/%252e%252e/admin", "dot-segments"),
        ("/cfn/..;/admin", "dot-segments"),
        ("/cfn/.;x/a", "dot-segments"),
        ("/cfn/a%2fb", "percent-encoded slashes"),
        ("/cfn%2F..%2Fadmin", "dot-segments"),
        ("/cfn/a%252Fb", "percent-encoded slashes"),
        ("/cfn/a\\b", "backslashes"),
        ("/cfn/a%5cb", "backslashes"),
    ],
)
def test_a_path_that_could_reach_elsewhere_is_refused_by_one_rule(path, why):
    from cfn_provider.trust.urls import path_refusal, prefix_refusal

    assert path_refusal(path) == f"path has {why}"
    assert prefix_refusal(f"http://127.0.0.1:5000{path}", "http://127.0.0.1:5000/cfn") == f"path has {why}"
    assert not allowed(f"http://127.0.0.1:5000{path}", ("http://127.0.0.1:5000/cfn",))


@pytest.mark.parametrize("path", ["/cfn/a%20b/c", "/cfn/..hidden", "/cfn/a.b", "/cfn/%7Euser", "/cfn/a;b"])
def test_a_plain_path_is_not_refused(path):
    from cfn_provider.trust.urls import path_refusal

    assert path_refusal(path) is None
    assert allowed(f"http://127.0.0.1:5000{path}", ("http://127.0.0.1:5000/cfn",))


def test_a_schemes_own_port_is_the_same_origin():
    assert matches_prefix("http://127.0.0.1:80/cfn/x", "http://127.0.0.1/cfn")
    assert matches_prefix("https://h.example/cfn/x", "https://h.example:443/cfn/")
    assert not matches_prefix("https://h.example:80/cfn/x", "https://h.example/cfn/")


def test_cloudformation_bucket_paths_follow_the_same_rule():
    with pytest.raises(UrlRejected, match="percent-encoded slashes"):
        ResponseUrlPolicy().check(f"https://{B}.s3.amazonaws.com/a%2Fk")
    with pytest.raises(UrlRejected, match="backslashes"):
        ResponseUrlPolicy().check(f"https://s3.amazonaws.com/{B}/a\\b")


# --- what a refusal says (issue 21 item 10) ---------------------------------------------

EMULATOR = ("http://127.0.0.1:5000/",)


@pytest.mark.parametrize(
    "url, says, never",
    [
        # another host: its host is what failed, whatever its scheme; no prefix covers it
        (
            "http://evil.example/loot",
            ["host 'evil.example' is not CloudFormation's", "under no --allow-response-url"],
            "",
        ),
        ("http://169.254.169.254/latest/meta-data/", ["host '169.254.169.254' is not", "scheme 'http'"], ""),
        (
            "https://attacker.oss-cn-hangzhou.aliyuncs.com/k",
            ["host 'attacker.oss-cn-hangzhou.aliyuncs.com' is not"],
            "scheme",
        ),
        ("http://127.0.0.1:6000/bucket/k", ["host '127.0.0.1' is not", "under no --allow-response-url prefix"], ""),
        # the operator's prefix names this scheme, host and port: why this URL is not under it
        ("http://127.0.0.1:5000/bucket/../admin", ["not under --allow-response-url prefix", "dot-segments"], "scheme"),
        ("http://127.0.0.1:5000/bucket/%2e%2e/admin", ["dot-segments"], "scheme"),
        ("http://127.0.0.1:5000/b/a%2Fb", ["percent-encoded slashes"], "scheme"),
        ("http://u@127.0.0.1:5000/bucket/k", ["userinfo"], "scheme"),
    ],
)
def test_a_refusal_says_what_actually_failed(url, says, never):
    with pytest.raises(UrlRejected) as caught:
        ResponseUrlPolicy(EMULATOR).check(url + "?X-Amz-Signature=SECRETSIG")
    reason = str(caught.value)
    assert all(s in reason for s in says), reason
    assert not never or never not in reason, reason
    assert "SECRETSIG" not in reason
    assert reason != "scheme 'http' is not https"

"""SignatureVerifier against real signatures and a real local certificate server."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver
from hypothesis import given, settings
from hypothesis import strategies as st

from cfn_provider.trust.signature import CertificateUnavailable, SignatureError, SignatureVerifier, string_to_sign
from tests.support.sns_signing import CertServer, make_identity, notification, sign_envelope

TOPIC = "arn:aws:sns:us-east-1:123456789012:cfn-provider"
SECRET = "top-secret-message-body"


@pytest.fixture(scope="module")
def identity():
    return make_identity()


@pytest.fixture
def certs():
    with CertServer() as server:
        yield server


@pytest.fixture
async def verifier(certs):
    v = SignatureVerifier(trusted_cert_prefixes=[certs.base_url])
    yield v
    await v.close()


@pytest.fixture
def cert_url(certs, identity):
    return certs.add("cert.pem", identity.cert_pem)


def signed(identity, cert_url, version="2", **kw):
    return sign_envelope(notification(SECRET, TOPIC, cert_url, **kw), identity, version)


# --- accepted ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize("subject", [None, "a subject"])
async def test_valid_notification_accepted(verifier, identity, cert_url, version, subject):
    env = signed(identity, cert_url, version, subject=subject)
    assert ("Subject" in env) == (subject is not None)
    await verifier.verify(env)


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
async def test_confirmation_string_to_sign(verifier, identity, cert_url, kind):
    env = notification("You have chosen to subscribe", TOPIC, cert_url)
    env.update(Type=kind, Token="tok123", SubscribeURL="https://sns.us-east-1.amazonaws.com/?Action=X")
    env = sign_envelope(env, identity)
    await verifier.verify(env)
    with pytest.raises(SignatureError, match="does not match"):
        await verifier.verify(dict(env, Token="other"))
    with pytest.raises(SignatureError, match="SubscribeURL"):
        await verifier.verify({k: v for k, v in env.items() if k != "SubscribeURL"})


# --- tampering / malformed --------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"Message": "tampered"},
        {"MessageId": "00000000-0000-0000-0000-000000000000"},
        {"Subject": "added after signing"},
        {"TopicArn": TOPIC + "-other"},
    ],
)
async def test_tampered_envelope_rejected(verifier, identity, cert_url, change):
    env = dict(signed(identity, cert_url), **change)
    with pytest.raises(SignatureError, match="signature does not match") as exc:
        await verifier.verify(env)
    assert SECRET not in str(exc.value) and "tampered" not in str(exc.value)


async def test_tampered_signature_rejected(verifier, identity, cert_url):
    env = signed(identity, cert_url)
    other = signed(identity, cert_url)  # valid base64, right length, different MessageId
    with pytest.raises(SignatureError, match="does not match"):
        await verifier.verify(dict(env, Signature=other["Signature"]))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"Signature": None}, "Signature"),
        ({"SignatureVersion": "3"}, "SignatureVersion"),
        ({"SignatureVersion": None}, "SignatureVersion"),
        ({"Signature": "not*base64!"}, "base64"),
        ({"Type": "Bogus"}, "Type"),
        ({"MessageId": None}, "MessageId"),
        ({"Timestamp": 12345}, "Timestamp"),
    ],
)
async def test_malformed_envelope_rejected(verifier, identity, cert_url, certs, change, message):
    env = signed(identity, cert_url)
    env.update(change)
    env = {k: v for k, v in env.items() if v is not None}
    with pytest.raises(SignatureError, match=message):
        await verifier.verify(env)
    assert certs.hits == {}


async def test_certificate_from_other_key_rejected(verifier, identity, certs):
    url = certs.add("other.pem", make_identity().cert_pem)
    with pytest.raises(SignatureError, match="does not match"):
        await verifier.verify(signed(identity, url))


# --- certificate URL rules --------------------------------------------------------------


class LoopbackResolver(AbstractResolver):
    """Resolves every name to 127.0.0.1 (nothing leaves the machine) and records what was asked."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def resolve(self, host, port=0, family=socket.AF_INET):
        self.hosts.append(host)
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
async def traced():
    """A verifier on a session whose DNS lookups and request starts are recorded."""
    resolver, started = LoopbackResolver(), []

    async def on_start(session, ctx, params):
        started.append(str(params.url))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver), trace_configs=[trace]) as http:
        yield SignatureVerifier(http=http, fetch_timeout=5), resolver, started


REAL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
PEM = "SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
        "http://sns.us-east-1.amazonaws.com/x.pem",
        "https://evil.example/x.pem",
        "https://sns.us-east-1.amazonaws.com@evil.example/x.pem",
        "https://user:pw@sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com:8443/x.pem",
        "https://sns.us-east-1.amazonaws.com/x.pem.txt",
        "https://sns.us-east-1.amazonaws.com/x.txt?.pem",
        "https://sqs.us-east-1.amazonaws.com/x.pem",
        "https://evil-sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com\\@evil.example/x.pem",
        "https://sns.us-east-1.amazonaws.com./x.pem",
        "ftp://sns.us-east-1.amazonaws.com/x.pem",
        "",
        # SNS's own hosts, but not exactly the one form of a certificate URL (one cache key each)
        "https://sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
        REAL + "?x=1",
        REAL + "?",
        REAL + "#frag",
        REAL.replace(".com/", ".com:443/"),
        REAL.replace("https://", "https://user@"),
        REAL.upper().replace("HTTPS://", "https://"),
        REAL.replace("sns.us-east-1", "SNS.us-east-1"),
        REAL.replace("9c6465fa", "9C6465FA"),
        REAL.replace("SimpleNotificationService", "simplenotificationservice"),
        REAL.replace(".com/", ".com//"),
        REAL.replace(".com/", ".com/a/../"),
        REAL.replace(".com/", ".com/%2e/"),
        REAL.replace("-9c6465", "-%39c6465"),
        REAL.replace("sns.us-east-1", "sns.us-east-\u0661"),  # an Arabic-Indic digit one
        REAL.replace(".pem", ".pem/"),
        REAL.replace(".amazonaws.com", ".amazonaws.com.cn"),  # a non-China region under .cn
        "https://sns.cn-north-1.amazonaws.com/" + PEM,  # a China region outside .cn
        "https://sns.amazonaws.com/" + PEM,
        "https://sns.us-east-1.amazonaws.com.evil.example/" + PEM,
    ],
)
async def test_untrusted_cert_url_rejected_without_any_request(traced, identity, url):
    verifier, resolver, started = traced
    with pytest.raises(SignatureError, match="SigningCertURL"):
        await verifier.verify(signed(identity, url))
    assert resolver.hosts == [] and started == []


@pytest.mark.parametrize(
    "url",
    [
        REAL,
        "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-bb750dd426d95ee9390147a5624348ee.pem",
        "https://sns.cn-north-1.amazonaws.com.cn/" + PEM,
        "https://sns.us-gov-west-1.amazonaws.com/" + PEM,
    ],
)
async def test_sns_cert_url_accepted_and_fetched(traced, identity, url):
    # The resolver points the SNS host at 127.0.0.1:443, where nothing serves TLS: the URL
    # passed the rules (a request was made), and the failure is transient, not a forgery.
    verifier, resolver, started = traced
    with pytest.raises(CertificateUnavailable):
        await verifier.verify(signed(identity, url))
    assert len(started) == 1 and resolver.hosts


class FailingResolver(AbstractResolver):
    """Answers every lookup with the getaddrinfo error `errno` (as the threaded resolver would)."""

    def __init__(self, errno: int) -> None:
        self.errno, self.hosts = errno, []

    async def resolve(self, host, port=0, family=socket.AF_INET):
        self.hosts.append(host)
        raise socket.gaierror(self.errno, "lookup failed")

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("errno, forged", [(socket.EAI_NONAME, True), (socket.EAI_AGAIN, False)])
async def test_a_cert_host_that_does_not_exist_is_a_forgery_a_dns_blip_is_not(identity, errno, forged):
    """NXDOMAIN for sns.<made-up region>.amazonaws.com: no SNS certificate can be there, so the
    message is forged (rejected, not retried); a resolver that cannot answer now is transient."""
    resolver = FailingResolver(errno)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver)) as http:
        v = SignatureVerifier(http=http, fetch_timeout=5)
        url = "https://sns.xx-nowhere-9.amazonaws.com/" + PEM
        with pytest.raises(SignatureError if forged else CertificateUnavailable):
            await v.verify(signed(identity, url))
        assert resolver.hosts == ["sns.xx-nowhere-9.amazonaws.com"]


async def test_cert_server_url_needs_trusted_prefix(certs, identity, cert_url):
    env = signed(identity, cert_url)
    bad_prefixes = [
        [],
        [certs.base_url.replace("http://", "https://")],
        [certs.base_url + "other/"],
        [certs.base_url.rstrip("/") + "1/"],  # port prefix as a string, not as a port
    ]
    for prefixes in bad_prefixes:
        v = SignatureVerifier(trusted_cert_prefixes=prefixes)
        try:
            with pytest.raises(SignatureError, match="SigningCertURL"):
                await v.verify(env)
        finally:
            await v.close()
    userinfo_url = cert_url.replace("http://", "http://user@")
    v = SignatureVerifier(trusted_cert_prefixes=[certs.base_url])
    try:
        with pytest.raises(SignatureError, match="SigningCertURL"):
            await v.verify(signed(identity, userinfo_url))
        assert certs.hits == {}
        await v.verify(env)
        assert certs.hits == {"/cert.pem": 1}
    finally:
        await v.close()


# --- certificate fetching and caching ----------------------------------------------------


async def test_certificate_cached(verifier, identity, cert_url, certs):
    await verifier.verify(signed(identity, cert_url))
    await verifier.verify(signed(identity, cert_url, version="1"))
    assert certs.hits == {"/cert.pem": 1}


async def test_concurrent_fetches_deduplicated(verifier, identity, cert_url, certs):
    envs = [signed(identity, cert_url) for _ in range(8)]
    await asyncio.gather(*(verifier.verify(e) for e in envs))
    assert certs.hits == {"/cert.pem": 1}


async def test_cache_is_bounded_lru(certs, identity):
    a, b = certs.add("a.pem", identity.cert_pem), certs.add("b.pem", identity.cert_pem)
    v = SignatureVerifier(trusted_cert_prefixes=[certs.base_url], cache_size=1)
    try:
        for url in (a, a, b, a):
            await v.verify(signed(identity, url))
    finally:
        await v.close()
    assert certs.hits == {"/a.pem": 2, "/b.pem": 1}


async def test_missing_cert_is_a_forgery_and_not_cached(verifier, identity, certs):
    """A 404 from the certificate host: the URL names no certificate, so the message is forged
    (a security rejection, not a retry). Nothing is cached: a later real certificate still works."""
    url = certs.base_url + "late.pem"
    with pytest.raises(SignatureError, match="HTTP 404"):
        await verifier.verify(signed(identity, url))
    certs.add("late.pem", identity.cert_pem)
    await verifier.verify(signed(identity, url))
    assert certs.hits == {"/late.pem": 2}


async def test_stopped_cert_server_is_transient(verifier, identity, cert_url, certs):
    certs.stop()
    with pytest.raises(CertificateUnavailable):
        await verifier.verify(signed(identity, cert_url))


@pytest.mark.parametrize("days_valid, not_before_days", [(1, 2), (30, -1)])
async def test_certificate_outside_validity_rejected(verifier, certs, days_valid, not_before_days):
    ident = make_identity(days_valid=days_valid, not_before_days=not_before_days)
    url = certs.add("expired.pem", ident.cert_pem)
    with pytest.raises(SignatureError, match="validity"):
        await verifier.verify(signed(ident, url))


async def test_unparseable_certificate_rejected(verifier, identity, certs):
    url = certs.add("junk.pem", b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    with pytest.raises(SignatureError, match="not a valid PEM"):
        await verifier.verify(signed(identity, url))


@pytest.fixture
async def tricky_server(identity):
    """An aiohttp server that redirects, stalls, or sends an oversized body."""
    hits: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        if request.path.startswith("/status-"):
            return web.Response(status=int(request.path[8:11]))
        if request.path == "/redirect.pem":
            raise web.HTTPFound("/target.pem")
        if request.path == "/slow.pem":
            await asyncio.sleep(5)
        if request.path == "/huge.pem":
            return web.Response(body=identity.cert_pem + b"\n" * 70_000)
        return web.Response(body=identity.cert_pem)

    app = web.Application()
    app.router.add_get("/{name}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/", hits
    await runner.cleanup()


@pytest.mark.parametrize(
    "status, forged",
    [
        (400, True),
        (403, True),
        (404, True),
        (410, True),
        (408, False),
        (429, False),
        (500, False),
        (502, False),
        (503, False),
    ],
)
async def test_4xx_is_a_forgery_5xx_is_transient(tricky_server, identity, status, forged):
    base, hits = tricky_server
    v = SignatureVerifier(trusted_cert_prefixes=[base])
    try:
        with pytest.raises(SignatureError if forged else CertificateUnavailable, match=f"HTTP {status}"):
            await v.verify(signed(identity, base + f"status-{status}.pem"))
    finally:
        await v.close()
    assert hits == [f"/status-{status}.pem"]


async def test_redirect_not_followed(tricky_server, identity):
    base, hits = tricky_server
    v = SignatureVerifier(trusted_cert_prefixes=[base])
    try:
        with pytest.raises(SignatureError, match="302"):
            await v.verify(signed(identity, base + "redirect.pem"))
    finally:
        await v.close()
    assert hits == ["/redirect.pem"]


async def test_fetch_timeout_is_transient(tricky_server, identity):
    base, _ = tricky_server
    v = SignatureVerifier(trusted_cert_prefixes=[base], fetch_timeout=0.3)
    try:
        with pytest.raises(CertificateUnavailable):
            await asyncio.wait_for(v.verify(signed(identity, base + "slow.pem")), 3)
    finally:
        await v.close()


async def test_oversized_certificate_rejected(tricky_server, identity):
    base, _ = tricky_server
    v = SignatureVerifier(trusted_cert_prefixes=[base])
    try:
        with pytest.raises(SignatureError, match="64 KiB"):
            await v.verify(signed(identity, base + "huge.pem"))
        await v.verify(signed(identity, base + "ok.pem"))
    finally:
        await v.close()


async def test_close_leaves_callers_session_open(identity, cert_url, certs):
    async with aiohttp.ClientSession() as http:
        v = SignatureVerifier(http=http, trusted_cert_prefixes=[certs.base_url])
        await v.verify(signed(identity, cert_url))
        await v.close()
        assert not http.closed


CONFIRMATION_KEYS = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
SIGNED_KEYS = {  # AWS's "Verifying the signatures of Amazon SNS messages", written out again here
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": CONFIRMATION_KEYS,
    "UnsubscribeConfirmation": CONFIRMATION_KEYS,
}


def slow_string_to_sign(envelope: dict) -> bytes:
    """string_to_sign as it was before its fast path: key by key, in a Python loop."""
    kind = envelope.get("Type")
    keys = SIGNED_KEYS.get(kind) if isinstance(kind, str) else None
    if keys is None:
        raise SignatureError("unknown or missing message Type")
    parts = []
    for key in keys:
        if key == "Subject" and key not in envelope:
            continue
        value = envelope.get(key)
        if not isinstance(value, str):
            raise SignatureError(f"{key} is missing or not a string")
        parts.append(f"{key}\n{value}\n")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        raise SignatureError("a signed field is not valid UTF-8") from None


SIGNED_FIELDS = ("Message", "MessageId", "Subject", "SubscribeURL", "Timestamp", "Token", "TopicArn")
FIELD_VALUES = st.one_of(
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=6),
    st.sampled_from(["", "\n", "a\nb", "\ud800", "é"]),
    st.none(),
    st.integers(),
    st.just(["x"]),
)


def _signed(envelope: dict) -> bytes | str:
    try:
        return string_to_sign(envelope)
    except SignatureError as exc:
        return str(exc)


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(
        st.sampled_from(["Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation", "Other"]), FIELD_VALUES
    ),
    st.dictionaries(st.sampled_from(SIGNED_FIELDS), FIELD_VALUES),
)
def test_the_string_to_sign_is_built_as_key_by_key(kind, fields):
    envelope = {**fields, "Type": kind}
    try:
        expected: bytes | str = slow_string_to_sign(envelope)
    except SignatureError as exc:
        expected = str(exc)
    assert _signed(envelope) == expected

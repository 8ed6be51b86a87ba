"""Responder.put against a real local HTTP server standing in for S3 (tests.support.stub_s3)."""

from __future__ import annotations

import socket
import time

import aiohttp
import pytest

from cfn_provider.pipeline.responder import Delivery, Responder
from cfn_provider.trust.urls import expires_at
from tests.support.stub_s3 import StubS3

BODY = b'{"Status": "SUCCESS", "PhysicalResourceId": "pid", "StackId": "s", "RequestId": "r", "LogicalResourceId": "L"}'
FAST = dict(connect_timeout=2, read_timeout=2, max_backoff=0.05)


@pytest.fixture
def s3():
    with StubS3() as server:
        yield server


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def responder(session):
    return Responder(session, **FAST)


def _target(url: str) -> str:
    """The request target (path + query) of an absolute http URL, byte for byte."""
    rest = url.split("://", 1)[1]
    return rest[rest.index("/") :]


def _free_port() -> int:
    """A port on 127.0.0.1 with nothing listening on it (bound, then released, never listened)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- the request on the wire -------------------------------------------------------------------


async def test_put_sends_an_empty_content_type_header(s3, responder):
    url = s3.url("resp/ct")
    delivery = await responder.put(url, BODY)
    assert delivery.delivered
    [request] = s3.requests_for("resp/ct")
    assert request.method == "PUT"
    content_types = [(k, v) for k, v in request.headers if k.lower() == "content-type"]
    assert content_types == [("Content-Type", "")], request.headers


async def test_put_sends_the_body_exactly(s3, responder):
    body = '{"Reason": "caf\u00e9 \u2603", "Data": {"k": "v"}}'.encode()
    await responder.put(s3.url("resp/body"), body)
    assert s3.bodies("resp/body") == [body]
    [request] = s3.requests_for("resp/body")
    assert request.header("Content-Length") == [str(len(body))]


@pytest.mark.parametrize("sigv2", [False, True], ids=["sigv4", "sigv2"])
async def test_presigned_url_arrives_byte_for_byte(s3, responder, sigv2):
    url = s3.url("resp/bytes", sigv2=sigv2)
    assert "%2F" in url and (not sigv2 or "%2B" in url)
    delivery = await responder.put(url, BODY)
    assert delivery.delivered
    [request] = s3.requests
    assert request.target == _target(url)


async def test_escapes_in_path_and_query_are_neither_decoded_nor_re_encoded(s3, responder):
    # %2F / %2B / %3D must stay escaped (decoding them changes what was signed), lower-case
    # escapes and escaped unreserved characters must not be normalised, '+' must not become %20.
    tricky = "&X-Amz-Security-Token=IQoJ%2Bb3JpZ2lu%2F%2Fwa%3D%3D&odd=%7e%7E+a%252F"
    url = s3.url("resp/a%2Fb~c/d") + tricky
    delivery = await responder.put(url, BODY)
    assert delivery.delivered
    [request] = s3.requests
    assert request.target == _target(url)
    assert request.target.endswith(tricky)


# ---- status handling ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 204])
async def test_2xx_is_delivered_after_one_attempt(s3, responder, status):
    s3.respond_with(status)
    delivery = await responder.put(s3.url("resp/ok"), BODY)
    assert isinstance(delivery, Delivery)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, status, 1)
    assert not delivery.expired
    assert s3.put_count("resp/ok") == 1


async def test_503_twice_then_200_is_delivered_after_three_attempts(s3, responder):
    s3.fail_with(503, times=2)
    delivery = await responder.put(s3.url("resp/503"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 200, 3)
    assert s3.put_count("resp/503") == 3
    assert [r.status for r in s3.requests_for("resp/503")] == [503, 503, 200]
    assert s3.bodies("resp/503") == [BODY]


@pytest.mark.parametrize("status", [500, 502, 504, 408, 429])
async def test_retryable_statuses_are_retried(s3, responder, status):
    s3.fail_with(status, times=1)
    delivery = await responder.put(s3.url("resp/retry"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 200, 2)
    assert [r.status for r in s3.requests_for("resp/retry")] == [status, 200]


async def test_s3_400_request_timeout_is_retried(s3, responder):
    # S3 answers 400 RequestTimeout when it did not get the body in time: retryable, not final
    s3.fail_with(400, times=2, code="RequestTimeout")
    delivery = await responder.put(s3.url("resp/slow-body"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 200, 3)
    assert [r.status for r in s3.requests_for("resp/slow-body")] == [400, 400, 200]
    assert s3.bodies("resp/slow-body") == [BODY]


async def test_other_400_codes_stay_final(s3, responder):
    s3.fail_with(400, code="MalformedXML")
    delivery = await responder.put(s3.url("resp/bad"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (False, 400, 1)
    assert "MalformedXML" in delivery.detail


async def test_403_is_final_and_means_expired(s3, responder):
    s3.fail_with(403)
    delivery = await responder.put(s3.url("resp/403"), BODY)
    assert not delivery.delivered
    assert delivery.status == 403
    assert delivery.attempts == 1
    assert delivery.expired is True
    assert "AccessDenied" in delivery.detail
    assert s3.put_count("resp/403") == 1


@pytest.mark.parametrize("status", [400, 404])
async def test_other_4xx_are_final_after_one_attempt(s3, responder, status):
    s3.fail_with(status)
    delivery = await responder.put(s3.url("resp/final"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (False, status, 1)
    assert delivery.expired is False
    assert s3.put_count("resp/final") == 1


async def test_5xx_until_expiry_gives_up_with_the_last_status(session):
    with StubS3(enforce_expiry=False) as s3:
        s3.fail_with(503)
        url = s3.url("resp/forever503", expires_in=3)
        give_up_at = expires_at(url)
        delivery = await Responder(session, **FAST).put(url, BODY)
        assert not delivery.delivered
        assert delivery.status == 503
        assert delivery.attempts == s3.put_count("resp/forever503") > 1
        assert "expir" in delivery.detail
        assert time.time() >= give_up_at - FAST["max_backoff"] - 0.5


# ---- transport failures ------------------------------------------------------------------------


async def test_connection_refused_is_retried_until_the_url_expires(session):
    port = _free_port()
    expires_in = 3
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    url = (
        f"http://127.0.0.1:{port}/resp/refused?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date={stamp}&X-Amz-Expires={expires_in}&X-Amz-SignedHeaders=host&X-Amz-Signature={'ab' * 32}"
    )
    give_up_at = expires_at(url)
    assert give_up_at is not None and give_up_at > time.time()
    started = time.time()
    delivery = await Responder(session, **FAST).put(url, BODY)
    ended = time.time()
    assert not delivery.delivered
    assert delivery.status is None
    assert delivery.attempts > 1
    assert "expir" in delivery.detail
    # kept trying up to (about) the expiry, and not for long after it
    assert ended >= give_up_at - FAST["max_backoff"] - 0.5
    assert ended - started < 60


@pytest.mark.parametrize("sigv2", [False, True], ids=["sigv4", "sigv2"])
async def test_already_expired_url_makes_no_attempt(s3, responder, sigv2):
    url = s3.url("resp/expired", expires_in=60, sigv2=sigv2, signed_at=time.time() - 3600)
    delivery = await responder.put(url, BODY)
    assert (delivery.delivered, delivery.attempts) == (False, 0)
    assert s3.requests == []


async def test_read_timeout_is_retried(s3, session):
    s3.stall(30, times=1)  # cut short when the stub stops
    responder = Responder(session, connect_timeout=2, read_timeout=0.3, max_backoff=0.05)
    started = time.monotonic()
    delivery = await responder.put(s3.url("resp/stall"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 200, 2)
    assert s3.put_count("resp/stall") == 2
    assert time.monotonic() - started < 20  # gave up on the stalled attempt instead of waiting it out


async def test_connection_reset_is_retried(s3, responder):
    # aiohttp itself resends an idempotent request once when its connection breaks, so one
    # Responder attempt can be two PUTs on the wire; three resets outlast that.
    s3.reset_connections(times=3)
    delivery = await responder.put(s3.url("resp/reset"), BODY)
    assert (delivery.delivered, delivery.status) == (True, 200)
    assert 2 <= delivery.attempts <= 4
    assert [r.action for r in s3.requests_for("resp/reset")] == ["reset", "reset", "reset", "pass"]
    assert s3.bodies("resp/reset") == [BODY]


async def test_connection_reset_until_expiry_gives_up(session):
    with StubS3() as s3:
        s3.reset_connections()
        url = s3.url("resp/always-reset", expires_in=2)
        delivery = await Responder(session, **FAST).put(url, BODY)
        assert not delivery.delivered
        assert delivery.status is None
        assert delivery.attempts > 1
        assert "expir" in delivery.detail
        assert s3.bodies("resp/always-reset") == []


async def test_mixed_faults_then_success(s3, responder):
    s3.fail_with(500, times=1)
    s3.stall(5, times=1, append=True)
    s3.fail_with(429, times=1, append=True)
    responder = Responder(responder.session, connect_timeout=2, read_timeout=0.3, max_backoff=0.05)
    delivery = await responder.put(s3.url("resp/mixed"), BODY)
    assert (delivery.delivered, delivery.status, delivery.attempts) == (True, 200, 4)
    assert [r.action for r in s3.requests_for("resp/mixed")] == ["fail", "stall", "fail", "pass"]


# ---- the overall deadline: URL expiry or the request's deadline, whichever is first -----------


async def test_a_trickling_server_is_cut_off_at_the_urls_expiry(session):
    """Headers one byte at a time, each within the read timeout: only the overall deadline ends it."""
    with StubS3() as s3:
        s3.trickle(0.2)
        url = s3.url("resp/trickle", expires_in=3)
        started = time.monotonic()
        delivery = await Responder(session, **FAST).put(url, BODY)  # read timeout 2 s > 0.2 s between bytes
        elapsed = time.monotonic() - started
        assert (delivery.delivered, delivery.status) == (False, None)
        assert "no answer before the delivery deadline" in delivery.detail
        assert elapsed < 30  # would trickle for as long as the stub runs
        assert [r.action for r in s3.requests_for("resp/trickle")][:1] == ["trickle"]


async def test_a_trickling_server_is_cut_off_at_the_requests_deadline(session):
    with StubS3() as s3:
        s3.trickle(0.2)
        url = s3.url("resp/trickle-deadline", expires_in=3600)
        started = time.monotonic()
        delivery = await Responder(session, **FAST, min_delivery=1).put(url, BODY, deadline=time.time() + 2)
        assert (delivery.delivered, delivery.status) == (False, None)
        assert "deadline" in delivery.detail
        assert time.monotonic() - started < 30  # not the URL's hour


async def test_retries_stop_at_the_requests_deadline_before_the_urls_expiry(session):
    with StubS3() as s3:
        s3.fail_with(503)
        url = s3.url("resp/503-deadline", expires_in=3600)
        started = time.monotonic()
        delivery = await Responder(session, **FAST, min_delivery=1).put(url, BODY, deadline=time.time() + 2)
        assert not delivery.delivered and delivery.status in (503, None)
        assert s3.put_count("resp/503-deadline") >= 1
        assert time.monotonic() - started < 30


async def test_a_passed_deadline_still_gets_a_short_real_try(s3, session):
    """A stale message or a host clock ahead of SNS's: the answer (often FAILED "timed out") is
    still sent; the delivery is bounded by `min_delivery`, not by the URL's hour."""
    delivery = await Responder(session, **FAST, min_delivery=1).put(
        s3.url("resp/late", expires_in=3600), BODY, deadline=time.time() - 3600
    )
    assert (delivery.delivered, delivery.attempts) == (True, 1)
    s3.fail_with(503)
    started = time.monotonic()
    delivery = await Responder(session, **FAST, min_delivery=1).put(
        s3.url("resp/late-503", expires_in=3600), BODY, deadline=time.time() - 3600
    )
    assert not delivery.delivered and time.monotonic() - started < 30


async def test_a_deadline_far_away_changes_nothing(s3, responder):
    s3.fail_with(503, times=2)
    delivery = await responder.put(s3.url("resp/far"), BODY, deadline=time.time() + 3600)
    assert (delivery.delivered, delivery.attempts) == (True, 3)

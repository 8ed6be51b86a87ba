"""cfn_provider.transports.mns against the local MNS server: signing, long polls, receipts, errors, credentials."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from cfn_provider import logs
from cfn_provider.errors import TransportConfigError
from cfn_provider.transports.mns import Credentials, MnsError, MnsQueue, load_credentials, signature, string_to_sign
from tests.dialects.conftest import QUEUE
from tests.support.mns_server import MnsClient, MnsServer
from tests.support.mns_server import string_to_sign as documented_string_to_sign


def test_signature_matches_the_documented_example():
    """Alibaba's own example: GET /MyQueue at Thu, 09 Jul 2015 03:01:34 GMT, key TestAccessSecret."""
    headers = {"Date": "Thu, 09 Jul 2015 03:01:34 GMT", "x-mns-version": "2015-06-06", "Host": "x"}
    assert string_to_sign("GET", headers, "/MyQueue") == (
        "GET\n\n\nThu, 09 Jul 2015 03:01:34 GMT\nx-mns-version:2015-06-06\n/MyQueue"
    )
    assert signature("TestAccessSecret", "GET", headers, "/MyQueue").startswith("uwx3yeWoILzgmvesW0BQSgfM")


def test_string_to_sign_with_body_headers_and_sorted_mns_headers():
    headers = {
        "Content-MD5": "md5==",
        "Content-Type": "text/xml",
        "Date": "D",
        "x-mns-version": "2015-06-06",
        "X-MNS-Delay": "3",
    }
    expected = "PUT\nmd5==\ntext/xml\nD\nx-mns-delay:3\nx-mns-version:2015-06-06\n/queues/q?a=1"
    assert string_to_sign("PUT", headers, "/queues/q?a=1") == expected
    assert documented_string_to_sign("PUT", headers, "/queues/q?a=1") == expected


@pytest.fixture
async def queue(mns: MnsServer):
    async with AsyncExitStack() as stack:
        yield await MnsQueue.open(
            mns.endpoint, QUEUE, Credentials(mns.access_key_id, mns.secret), stack, allow_http=True
        )


async def test_batch_receive_change_visibility_and_delete(mns: MnsServer, queue: MnsQueue):
    client = MnsClient(mns)
    ids = [client.send_message(QUEUE, json.dumps({"n": i})) for i in range(20)]
    assert await queue.has_dead_letter_queue() is False and queue.queue_visibility == 30
    first = await queue.receive(32, 1, 30)  # asks for 32: MNS gives at most 16
    assert len(first) == 16 and [m.id for m in first] == ids[:16]
    assert all(m.receive_count == 1 and m.body.startswith('{"n"') for m in first)
    assert any(c in m.receipt for m in first for c in "+/=")  # handles as MNS makes them
    old = first[0].receipt
    await queue.set_visibility(first[0], 120)
    assert first[0].receipt != old  # the new handle replaces the old one
    with pytest.raises(MnsError, match="ReceiptHandleError"):
        await queue.delete(type(first[0])(**{**first[0].__dict__, "receipt": old}))
    for m in first:
        await queue.delete(m)
    rest = await queue.receive(16, 1, 30)
    assert [m.id for m in rest] == ids[16:]
    await queue.set_visibility(rest[0], 0)  # released: MNS's minimum is 1 s
    assert mns.requests[-1].target.endswith("visibilityTimeout=1")
    assert mns.count("change") == 2 and mns.count("delete") == 17  # the refused stale delete counts too


async def test_visibility_follows_the_daemon_when_the_queue_differs(mns: MnsServer, queue: MnsQueue):
    MnsClient(mns).send_message(QUEUE, "{}")
    await queue.has_dead_letter_queue()  # the queue says 30 s
    [message] = await queue.receive(16, 1, 90)
    assert mns.count("change") == 1 and mns.queue(QUEUE).messages[0].visible_at > time.time() + 80
    MnsClient(mns).send_message(QUEUE, "{}")
    await queue.receive(16, 1, 30)
    assert mns.count("change") == 1  # same as the queue's: no extra call


async def test_long_poll_waits_and_wakes(mns: MnsServer, queue: MnsQueue):
    started = time.monotonic()
    assert await queue.receive(16, 2, 30) == []  # 404 MessageNotExist after the wait
    assert 1.9 <= time.monotonic() - started < 6
    poll = asyncio.ensure_future(queue.receive(16, 20, 30))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await asyncio.to_thread(MnsClient(mns).send_message, QUEUE, "{}")
    assert len(await poll) == 1 and time.monotonic() - started < 4


async def test_a_cancelled_long_poll_stops_at_once(mns: MnsServer, queue: MnsQueue):
    poll = asyncio.ensure_future(queue.receive(16, 20, 30))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    assert time.monotonic() - started < 1.0


async def test_delete_waits_for_a_visibility_change_cancelled_mid_flight(mns: MnsServer, queue: MnsQueue):
    """The heartbeat is cancelled while its change is on the wire: the delete must use the new handle."""
    MnsClient(mns).send_message(QUEUE, "{}")
    [message] = await queue.receive(16, 1, 30)
    beat = asyncio.ensure_future(queue.set_visibility(message, 60))
    await asyncio.sleep(0)
    beat.cancel()
    await queue.delete(message)
    assert mns.queue(QUEUE).live == []


async def test_dead_letter_policy_and_unreadable_attributes(mns: MnsServer):
    mns.create_queue("with-dlq", dlq={"Enabled": "true", "DeadLetterTargetQueue": "dlq", "MaxReceiveCount": "3"})
    async with AsyncExitStack() as stack:
        creds = Credentials(mns.access_key_id, mns.secret)
        for queue, expected in (("with-dlq", True), ("missing", None)):
            assert (
                await (await MnsQueue.open(mns.endpoint, queue, creds, stack, allow_http=True)).has_dead_letter_queue()
                is expected
            )


async def test_server_errors_are_raised_without_secrets(mns: MnsServer):
    async with AsyncExitStack() as stack:
        wrong = await MnsQueue.open(
            mns.endpoint, QUEUE, Credentials(mns.access_key_id, "not-the-secret-123"), stack, allow_http=True
        )
        with pytest.raises(MnsError, match="403 SignatureDoesNotMatch") as exc:
            await wrong.receive(1, 0, 30)
        assert "not-the-secret-123" not in str(exc.value) and "not-the-secret" not in repr(wrong.credentials)
    mns.fail_next("receive", 503, "ServiceUnavailable")
    async with AsyncExitStack() as stack:
        right = await MnsQueue.open(
            mns.endpoint, QUEUE, Credentials(mns.access_key_id, mns.secret), stack, allow_http=True
        )
        with pytest.raises(MnsError, match="503 ServiceUnavailable"):
            await right.receive(1, 0, 30)
        assert await right.receive(1, 0, 30) == []


async def test_security_token_is_sent(mns: MnsServer):
    mns.security_token = "sts-token-abcdefgh"
    async with AsyncExitStack() as stack:
        q = await MnsQueue.open(
            mns.endpoint,
            QUEUE,
            Credentials(mns.access_key_id, mns.secret, "sts-token-abcdefgh"),
            stack,
            allow_http=True,
        )
        assert await q.receive(1, 0, 30) == []


@pytest.mark.parametrize(
    "endpoint, queue",
    [
        ("ftp://x.mns.cn-hangzhou.aliyuncs.com", "q"),
        ("https://x.mns.cn-hangzhou.aliyuncs.com/queues/q", "q"),
        ("https://x.mns.cn-hangzhou.aliyuncs.com", "a/b"),
        ("https://x.mns.cn-hangzhou.aliyuncs.com", ""),
    ],
)
def test_bad_endpoint_or_queue(endpoint, queue):
    with pytest.raises(TransportConfigError):
        MnsQueue(None, endpoint, queue, Credentials("id", "secret"))  # type: ignore[arg-type]


@pytest.mark.parametrize("endpoint", ["http://1.mns.cn-hangzhou.aliyuncs.com", "HTTP://127.0.0.1:9"])
async def test_plain_http_is_refused_unless_allowed(endpoint):
    """Every MNS call carries the AccessKey id, a replayable signature and the STS token."""
    with pytest.raises(TransportConfigError, match="--mns-allow-http"):
        MnsQueue(None, endpoint, "q", Credentials("id", "secret", "sts-token"))  # type: ignore[arg-type]
    async with AsyncExitStack() as stack:
        with pytest.raises(TransportConfigError, match="plain http"):
            await MnsQueue.open(endpoint, "q", Credentials("id", "secret"), stack)
    assert MnsQueue(None, endpoint, "q", Credentials("id", "secret"), allow_http=True).base  # type: ignore[arg-type]


def test_credentials_sources(tmp_path: Path):
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIenv", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "env-secret-0001"}
    assert load_credentials(env, tmp_path) == Credentials("LTAIenv", "env-secret-0001", "", "environment")
    ini = tmp_path / ".alibabacloud" / "credentials"
    ini.parent.mkdir()
    ini.write_text(
        "[default]\ntype = access_key\naccess_key_id = LTAIini\naccess_key_secret = ini-secret-0001\n"
        "[other]\naccess_key_id = LTAIother\naccess_key_secret = other-secret-01\n"
    )
    assert load_credentials({}, tmp_path).access_key_id == "LTAIini"
    assert load_credentials({"ALIBABA_CLOUD_PROFILE": "other"}, tmp_path).access_key_secret == "other-secret-01"
    ini.unlink()
    cli = tmp_path / ".aliyun" / "config.json"
    cli.parent.mkdir()
    cli.write_text(
        json.dumps(
            {
                "current": "p",
                "profiles": [
                    {"name": "p", "mode": "AK", "access_key_id": "LTAIcli", "access_key_secret": "cli-secret-0001"}
                ],
            }
        )
    )
    creds = load_credentials({}, tmp_path)
    assert creds.access_key_id == "LTAIcli" and "cli-secret-0001" not in repr(creds)
    assert "cli-secret-0001" in logs._registered  # redacted from every log line from now on
    cli.unlink()
    with pytest.raises(TransportConfigError, match="ALIBABA_CLOUD_ACCESS_KEY_ID"):
        load_credentials({}, tmp_path)

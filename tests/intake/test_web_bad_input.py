"""What the web listener answers to what it must not run, row by row (docs/ros.md, "Bad input"): nothing
run, nothing stored, nothing sent to a ResponseURL, a clear status; refusals of the path token logged
as security events, limited per source, and never showing the token."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cfn_provider.pipeline.request import idempotency_key
from cfn_provider.stores import open_store
from cfn_provider.trust import sources
from tests.dialects.conftest import JsonLog, ros_request
from tests.support import handlers
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority
from tests.support.web import post

ARN = "arn:aws:cloudformation:us-east-1:123456789012:stack/cfn/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


async def nothing_happened(tmp_path: Path, s3: StubS3, *requests: dict[str, Any]) -> None:
    """No handler started for these requests (a thread another test left behind may still finish), nothing
    was sent to a ResponseURL, nothing is stored."""
    ids = {req.get("RequestId") for req in requests}
    assert not [call for call in handlers.started if call[0] in ids] and not s3.requests
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:
        for req in requests:
            assert await store.get(idempotency_key(req.get("StackId", ""), req.get("RequestId", ""))) is None
    finally:
        await store.close()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/nope",
        "/nope/sync",
        "/{prefix}",
        "/{token}x",
        "/{token}/sync/more",
        "/{token}/other",
        "//{token}",
        "/{token}/",
        "/{token}/sync/",
    ],
)
async def test_a_wrong_or_missing_token_is_404_and_runs_nothing(
    web_daemon, https, stub_s3, tmp_path, json_log, path: str
):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/x"))
    status, _, body = await post(https, d.base + path.format(token=d.token, prefix=d.token[:-1]), req)
    assert (status, json.loads(body)) == (404, {"Error": "not found"})
    await nothing_happened(tmp_path, stub_s3, req)
    [event] = json_log.events(event="security")
    assert event["reason"] == "no valid path token" and event["source"] == "127.0.0.1"
    assert d.token[:8] not in json_log.text and "/nope" not in json_log.text  # not the path, not the token


async def test_refusals_are_limited_per_source_but_valid_tokens_never(web_daemon, https, stub_s3, json_log: JsonLog):
    d = await web_daemon()
    statuses = [(await post(https, d.url(token="w" * 43), b"{}"))[0] for _ in range(int(sources.BURST) + 5)]
    assert statuses[: int(sources.BURST)] == [404] * int(sources.BURST) and set(statuses[int(sources.BURST) :]) == {429}
    assert len(json_log.events(event="security")) == sources.BURST  # then only a summary line, not one per request
    status, _, body = await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/ok")))
    assert status == 200 and json.loads(body)["Status"] == "SUCCESS"  # a valid token: never limited
    await asyncio.sleep(1.5)  # RATE: one more refusal a second, then 429 again
    assert [(await post(https, d.url(token="w" * 43), b"{}"))[0] for _ in range(2)] == [404, 429]


async def test_a_source_outside_the_allowlist_is_refused(web_daemon, https, stub_s3, tmp_path, json_log):
    d = await web_daemon(web={"allow_sources": ("10.0.0.0/8", "192.168.1.7")})
    req = ros_request("Create", stub_s3.url("ros/src"))
    status, _, _ = await post(https, d.url("sync"), req)
    assert status == 403
    await nothing_happened(tmp_path, stub_s3, req)
    assert json_log.events(event="security")[0]["reason"] == "source address is not in --web-allow-source"


async def test_healthz_is_behind_the_source_allowlist_too(web_daemon, https, json_log):
    """--web-allow-source applies to GET /healthz (docs/ros.md): before, any source could read it."""
    d = await web_daemon(web={"allow_sources": ("10.0.0.0/8",)})
    status, _, body = await post(https, f"{d.base}/healthz", b"", method="GET")
    assert status == 403 and "Status" not in json.loads(body)
    assert json_log.events(event="security")[0]["reason"] == "source address is not in --web-allow-source"
    allowed = await web_daemon(web={"allow_sources": ("127.0.0.0/8",)})
    status, _, body = await post(https, f"{allowed.base}/healthz", b"", method="GET")
    assert status == 200 and json.loads(body)["Status"] == "ok"


async def test_an_allowed_source_is_served(web_daemon, https, stub_s3):
    d = await web_daemon(web={"allow_sources": ("127.0.0.0/8",)})
    status, _, _ = await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/src-ok")))
    assert status == 200


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_other_methods_get_405(web_daemon, https, stub_s3, tmp_path, method):
    d = await web_daemon()
    status, headers, _ = await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/m")), method=method)
    assert status == 405 and headers["Allow"] == "POST"
    await nothing_happened(tmp_path, stub_s3)


@pytest.mark.parametrize(
    "body, says",
    [
        (b"not json at all", "not JSON"),
        (b"", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b"\xff\xfe", "not UTF-8"),
        (json.dumps({"RequestType": "Create"}).encode(), "missing or non-string ResponseURL"),
    ],
)
async def test_not_a_request_gets_400(web_daemon, https, stub_s3, tmp_path, json_log, body, says):
    d = await web_daemon()
    status, _, text = await post(https, d.url(), body)
    assert status == 400 and says in json.loads(text)["Error"]
    await nothing_happened(tmp_path, stub_s3)
    assert json_log.events(event="rejected")[0]["status"] == 400


@pytest.mark.parametrize(
    "drop, says", [("ResourceType", "missing fields: ResourceType"), ("RequestType", "missing fields: RequestType")]
)
async def test_a_request_missing_fields_gets_400_naming_them(web_daemon, https, stub_s3, tmp_path, drop, says):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/fields"))
    del req[drop]
    for mode in ("sync", "async"):
        status, _, text = await post(https, d.url(mode), req)
        assert status == 400 and says in json.loads(text)["Error"]
    await nothing_happened(tmp_path, stub_s3, req)


async def test_a_cloudformation_stack_id_gets_400(web_daemon, https, stub_s3, tmp_path, json_log):
    """The transport decides the dialect (docs/ros.md): the web listener serves ROS's web ServiceToken only,
    and ROS's StackId is a plain id; an ARN StackId (CloudFormation's, which reaches the provider through
    SNS) is refused with 400 in both modes, nothing run or stored. (Before, it was served under ROS's rules
    while docs/ros.md said 400.)"""
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/cfn"), stack_id=ARN)
    for key in ("IntranetResponseURL", "StackName", "ResourceOwnerId", "CallerId", "RegionId"):
        del req[key]
    for mode in ("sync", "async"):
        status, _, text = await post(https, d.url(mode), req)
        assert status == 400 and "StackId is an ARN" in json.loads(text)["Error"], text
    await nothing_happened(tmp_path, stub_s3, req)
    assert [e["reason"] for e in json_log.events(event="rejected")][0].endswith("through SNS)")


async def test_an_arn_elsewhere_in_a_ros_request_changes_nothing(web_daemon, https, stub_s3):
    """Only the StackId's form is CloudFormation's tell: other fields of the other dialect are ignored."""
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/arnish"), props={"Role": ARN})
    status, _, text = await post(https, d.url("sync"), req)
    answer = json.loads(text)
    assert status == 200 and answer["Status"] == "SUCCESS" and "NoEcho" not in answer


async def test_a_response_url_outside_the_allowlist_is_refused(web_daemon, https, stub_s3, tmp_path, json_log):
    d = await web_daemon()
    req = ros_request("Create", "http://169.254.169.254/latest/meta-data/?X-Sig=secret")
    status, _, text = await post(https, d.url(), req)
    assert status == 403 and "rejected" in json.loads(text)["Error"] and "secret" not in text.decode()
    await nothing_happened(tmp_path, stub_s3, req)
    [event] = json_log.events(event="security")
    assert "169.254.169.254" in event["reason"] and "secret" not in json_log.text


async def test_a_body_over_the_limit_gets_413_unread(web_daemon, https, stub_s3, tmp_path):
    d = await web_daemon(web={"max_body": 4096})
    big = ros_request("Create", stub_s3.url("ros/big"), props={"Blob": "x" * 5000})
    status, _, text = await post(https, d.url(), big)
    assert status == 413 and "at most 4096" in json.loads(text)["Error"]

    async def chunks():  # no Content-Length: counted as it comes
        yield json.dumps(big).encode()

    status, _, _ = await post(https, d.url(), chunks())
    assert status == 413
    await nothing_happened(tmp_path, stub_s3, big)


async def test_all_slots_busy_gets_503_with_retry_after(web_daemon, https, stub_s3):
    d = await web_daemon(concurrency=1)
    busy = asyncio.ensure_future(
        post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/busy"), props={"SleepSeconds": "1.5"}))
    )
    await asyncio.sleep(0.5)
    status, headers, text = await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/turned-away")))
    assert status == 503 and headers["Retry-After"] == "1" and "slots are busy" in json.loads(text)["Error"]
    assert (await busy)[0] == 200 and d.listener.handled == 1


async def _raw(port: int, ca: CertAuthority) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=ca.client_context(), server_hostname="127.0.0.1")


async def test_slow_headers_are_cut_off(web_daemon, ca: CertAuthority, stub_s3):
    d = await web_daemon(web={"header_timeout": 1.5})
    reader, writer = await _raw(d.listener.port or 0, ca)
    writer.write(f"POST /{d.token}/sync HTTP/1.1\r\nHost: x\r\n".encode())  # ... and never the rest
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 15) == b""  # closed, nothing answered, nothing run
    assert 1.0 <= time.monotonic() - started < 10 and d.listener.handled == 0
    writer.close()


async def test_a_slow_body_gets_408(web_daemon, ca: CertAuthority, stub_s3):
    d = await web_daemon(web={"body_timeout": 1.5})
    reader, writer = await _raw(d.listener.port or 0, ca)
    writer.write(f'POST /{d.token}/sync HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{{"Req'.encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readline(), 15)
    assert head.startswith(b"HTTP/1.1 408") and d.listener.handled == 0
    writer.close()


async def test_expect_100_continue_is_answered_before_the_body(web_daemon, ca: CertAuthority, stub_s3):
    d = await web_daemon()
    body = json.dumps(ros_request("Create", stub_s3.url("ros/expect"))).encode()
    reader, writer = await _raw(d.listener.port or 0, ca)
    writer.write(
        f"POST /{d.token}/sync HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n\r\n".encode()
    )
    assert await asyncio.wait_for(reader.readline(), 15) == b"HTTP/1.1 100 Continue\r\n"
    await reader.readline()
    writer.write(body)
    assert (await asyncio.wait_for(reader.readline(), 15)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_a_connection_that_never_completes_tls_is_closed_at_the_header_timeout(web_daemon, https):
    """The header timeout covers the TLS handshake too: before, a connection that never sent its
    ClientHello was held for asyncio's own 60 s handshake timeout."""
    d = await web_daemon(web={"header_timeout": 1.5})
    reader, writer = await asyncio.open_connection("127.0.0.1", d.listener.port or 0)  # plain TCP: no TLS
    writer.write(b"\x16\x03\x01")  # the first bytes of a ClientHello, and never the rest
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 15) == b""
    assert time.monotonic() - started >= 1.0 and d.listener.handled == 0
    writer.close()
    status, _, _ = await post(https, f"{d.base}/healthz", b"", method="GET")
    assert status == 200  # the listener serves on


async def _silent(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection from `source` (any 127.x address reaches 127.0.0.1 on Linux) that sends nothing."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _closed_at_once(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""  # the header timeout (60 s here) is far off
    except TimeoutError:
        return False


async def test_open_connections_are_capped_per_source_and_in_all(web_daemon, https, stub_s3, json_log):
    d = await web_daemon(web={"header_timeout": 60, "max_connections": 3, "max_connections_per_source": 2})
    port = d.listener.port or 0
    held = [await _silent(port, "127.0.0.1"), await _silent(port, "127.0.0.1")]
    over_source = await _silent(port, "127.0.0.1")  # a third from one address
    assert await _closed_at_once(over_source[0])
    held.append(await _silent(port, "127.0.0.2"))  # another address: room in all for one more
    over_all = await _silent(port, "127.0.0.3")
    assert await _closed_at_once(over_all[0])
    for reader, _ in held:  # the ones within the caps are still open
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(), 0.3)
    [event] = json_log.events(event="web.connections_capped")  # once a minute at most
    assert event["closed"] == 1 and "--web-max-connections" in event["detail"]
    for _, writer in held:
        writer.close()
    req = ros_request("Create", stub_s3.url("ros/capped"))
    for _ in range(50):  # counted out as they close
        try:
            status, _, body = await post(https, d.url("sync"), req)
            break
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    assert status == 200 and json.loads(body)["Status"] == "SUCCESS"

"""cfn_provider.intake.web end to end, in process: ROS requests POSTed over HTTPS (a certificate
from a test CA) to the real listener; async answers reach a local ROS response endpoint (StubS3)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from cfn_provider.dialects.ros import ROS
from cfn_provider.pipeline.request import idempotency_key, stored_parts
from cfn_provider.stores import open_store
from cfn_provider.stores.base import POLLING, SENT
from tests.dialects.conftest import JsonLog, ros_request
from tests.support import handlers
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority, serial_in, serial_of
from tests.support.web import post, posted


async def test_async_answer_goes_to_the_response_url_after_a_durable_claim(
    web_daemon, https, stub_s3: StubS3, tmp_path: Path, json_log: JsonLog
):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/async"), props={"SleepSeconds": "1", "Size": "3"})
    status, headers, body = await post(https, d.url(), req)
    assert (status, json.loads(body)) == (200, {"Accepted": True})
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:  # said 200 only once the request was stored with the request itself: any daemon can run it now
        record = await store.get(idempotency_key(req["StackId"], req["RequestId"]))
        assert record is not None and record.state == POLLING and stored_parts(record.request or "") == (req, ROS)
    finally:
        await store.close()
    answer = await posted(stub_s3, "ros/async")
    assert answer.header("Content-Type") == ["application/json"] and answer.header("Date")[0].endswith(" GMT")
    assert abs(email.utils.parsedate_to_datetime(answer.header("Date")[0]).timestamp() - time.time()) < 60
    doc = json.loads(answer.body)
    assert doc["Status"] == "SUCCESS" and {k: doc[k] for k in ("StackId", "RequestId", "LogicalResourceId")} == {
        k: req[k] for k in ("StackId", "RequestId", "LogicalResourceId")
    }
    assert handlers.count(req["RequestId"]) == 1
    for _ in range(100):  # the step's line follows its POST
        lines = [e for e in json_log.events(event="request") if e.get("request_id") == req["RequestId"]]
        if len(lines) == 2:
            break
        await asyncio.sleep(0.05)
    assert [e["outcome"] for e in lines] == ["accepted", "answered"]
    assert lines[0]["transport"] == "web" and lines[0]["mode"] == "async" and lines[1]["dialect"] == "ros"


async def test_sync_answer_is_the_response_body(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/sync"), props={"Size": "3"})
    status, headers, body = await post(https, d.url("sync"), req)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    doc = json.loads(body)
    assert doc["Status"] == "SUCCESS" and doc["RequestId"] == req["RequestId"] and doc["StackId"] == req["StackId"]
    assert doc["PhysicalResourceId"].startswith("ros-stack-Thing-") and "NoEcho" not in doc
    failed = ros_request("Create", stub_s3.url("ros/sync-failed"), props={"Raise": "quota exceeded"})
    status, _, body = await post(https, d.url("sync"), failed)
    assert status == 200 and json.loads(body)["Status"] == "FAILED" and "quota exceeded" in json.loads(body)["Reason"]
    assert not stub_s3.requests  # a sync answer goes nowhere else
    assert handlers.count(req["RequestId"]) == 1 and handlers.count(failed["RequestId"]) == 0  # raised: not completed


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_sync_deadline_is_capped_by_the_connection(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon(web={"sync_timeout": 6.0})
    req = ros_request("Create", stub_s3.url("ros/capped"), props={"Timeout": "600", "SleepSeconds": "30"})
    started = time.monotonic()
    status, _, body = await post(https, d.url("sync"), req)
    doc = json.loads(body)
    assert status == 200 and doc["Status"] == "FAILED" and "timed out" in doc["Reason"]
    assert time.monotonic() - started < 15  # the caller's limit (6 s), not the request's 600 s


async def test_a_caller_that_hangs_up_mid_handler_gets_the_stored_answer_on_retry(web_daemon, https, stub_s3):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/hangup"), rtype="Custom::Stamped", props={"SleepSeconds": "2"})
    with pytest.raises(asyncio.TimeoutError):
        await post(https, d.url("sync"), req, timeout=0.5)  # hangs up while the handler runs
    status, _, first = await post(https, d.url("sync"), req)  # the retry waits for the running attempt
    assert status == 200 and json.loads(first)["Status"] == "SUCCESS"
    status, _, again = await post(https, d.url("sync"), req)  # and every later copy gets the same body
    assert (status, again) == (200, first)
    assert handlers.count(req["RequestId"]) == 1


async def test_the_disconnected_attempt_stores_its_answer_before_the_retry_comes(
    web_daemon, https, stub_s3, tmp_path: Path
):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/late"), rtype="Custom::Stamped", props={"SleepSeconds": "1"})
    with pytest.raises(asyncio.TimeoutError):
        await post(https, d.url("sync"), req, timeout=0.3)
    key = idempotency_key(req["StackId"], req["RequestId"])
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:
        for _ in range(100):
            record = await store.get(key)
            if record is not None and record.body:
                break
            await asyncio.sleep(0.05)
        assert record is not None and record.body and not record.leased(time.time())  # stored, let go of
    finally:
        await store.close()
    status, _, body = await post(https, d.url("sync"), req)
    assert status == 200 and body == record.body and handlers.count(req["RequestId"]) == 1


async def test_retries_while_the_first_call_runs_never_run_it_twice(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon()
    sync = ros_request("Create", stub_s3.url("ros/r-sync"), rtype="Custom::Stamped", props={"SleepSeconds": "1"})
    asyn = ros_request("Create", stub_s3.url("ros/r-async"), rtype="Custom::Stamped", props={"SleepSeconds": "1"})
    results = await asyncio.gather(
        *[post(https, d.url("sync"), sync) for _ in range(3)], *[post(https, d.url(), asyn) for _ in range(3)]
    )
    assert {r[0] for r in results} == {200}
    assert len({r[2] for r in results[:3]}) == 1  # the waiting copies got the first one's answer
    assert all(json.loads(r[2]) == {"Accepted": True} for r in results[3:])  # async copies are acknowledged
    await posted(stub_s3, "ros/r-async")
    await asyncio.sleep(0.5)
    assert len({r.body for r in stub_s3.requests_for("ros/r-async", "POST")}) == 1
    assert handlers.count(sync["RequestId"]) == 1 and handlers.count(asyn["RequestId"]) == 1
    status, _, body = await post(https, d.url(), asyn)  # a late async copy: acknowledged, not re-run
    assert status == 200 and handlers.count(asyn["RequestId"]) == 1


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_an_async_copy_is_acknowledged_while_the_answer_is_being_delivered(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon()
    stub_s3.stall(4, times=1, key="ros/slow-oss")  # ROS's endpoint takes its time over the first POST
    req = ros_request("Create", stub_s3.url("ros/slow-oss"), rtype="Custom::Stamped")
    assert (await post(https, d.url(), req))[0] == 200
    for _ in range(200):
        if stub_s3.requests_for("ros/slow-oss", "POST"):
            break
        await asyncio.sleep(0.05)
    status, _, body = await post(https, d.url(), req)  # ROS's retry: the answer is stored and on its way
    assert (status, json.loads(body)) == (200, {"Accepted": True})
    assert [r.status for r in stub_s3.requests_for("ros/slow-oss", "POST")] == [None]  # still stalled: no wait
    await posted(stub_s3, "ros/slow-oss")
    assert handlers.count(req["RequestId"]) == 1


async def test_a_long_running_action_is_refused_to_a_waiting_caller(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon(handlers=(("Custom::Polled", "tests.support.polling_handlers"),))
    req = ros_request("Create", stub_s3.url("ros/polled"), rtype="Custom::Polled")
    status, _, body = await post(https, d.url("sync"), req)
    doc = json.loads(body)
    assert (
        status == 200 and doc["Status"] == "FAILED" and "web[sync]" in doc["Reason"] and "InProgress" in doc["Reason"]
    )


async def test_tls_reload_keeps_open_connections_and_serves_the_new_certificate(
    web_daemon, https, ca: CertAuthority, stub_s3: StubS3, tmp_path: Path
):
    d = await web_daemon()
    cert = Path(d.listener.settings.cert_file or "")
    old = serial_in(cert)
    slow = asyncio.ensure_future(
        post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/tls"), props={"SleepSeconds": "1.5"}))
    )
    await asyncio.sleep(0.5)
    ca.issue(cert.with_suffix(""))  # new files in place, then the signal's reload
    d.listener.reload()
    assert d.listener.tls is not None and d.listener.tls.loads == 2
    status, _, body = await slow  # the connection open across the reload finished its request
    assert status == 200 and json.loads(body)["Status"] == "SUCCESS"
    assert await _presented_serial(d.listener.port or 0, ca) == serial_in(cert) != old

    (cert.with_suffix(".key")).write_text("not a key")  # a broken pair is refused; the loaded one is kept
    d.listener.reload()
    assert d.listener.tls.loads == 2 and await _presented_serial(d.listener.port or 0, ca) == serial_in(cert)


async def _presented_serial(port: int, ca: CertAuthority) -> int:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ca.client_context(), server_hostname="127.0.0.1"
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return serial_of(der)


async def test_two_tokens_are_valid_at_once_and_a_reload_retires_one(
    web_daemon, https, stub_s3: StubS3, token_file: Path, json_log: JsonLog
):
    from cfn_provider.trust.web_tokens import new_token

    old = token_file.read_text().split()[0]
    new = new_token()
    token_file.write_text(f"{new}\n{old}\n")
    d = await web_daemon()
    for token in (new, old):
        status, _, _ = await post(https, d.url("sync", token), ros_request("Create", stub_s3.url(f"ros/{token[:4]}")))
        assert status == 200
    token_file.write_text(f"{new}\n")
    d.listener.reload()
    status, _, _ = await post(https, d.url("sync", old), ros_request("Create", stub_s3.url("ros/old")))
    assert status == 404
    assert old not in json_log.text and new not in json_log.text  # never in a log line


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_over_https(web_daemon, stub_s3: StubS3, ca: CertAuthority):
    d = await web_daemon()
    req = ros_request("Create", stub_s3.url("ros/curl"), props={"Size": "1"})
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "--max-time",
        "30",
        "--cacert",
        str(ca.path),
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        json.dumps(req),
        "-w",
        "\n%{http_code}",
        d.url("sync"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    body, _, code = out.decode().rpartition("\n")
    assert (code, json.loads(body)["Status"]) == ("200", "SUCCESS"), err.decode()


async def test_plain_http_only_when_allowed(web_daemon, stub_s3: StubS3):
    from cfn_provider.errors import TransportConfigError

    with pytest.raises(TransportConfigError, match="--web-allow-http"):
        await web_daemon(tls=False, web={"allow_http": False})
    d = await web_daemon(tls=False)
    async with aiohttp.ClientSession() as plain:
        status, _, body = await post(plain, d.url("sync"), ros_request("Create", stub_s3.url("ros/plain")))
    assert d.base.startswith("http://") and status == 200 and json.loads(body)["Status"] == "SUCCESS"


async def test_health_file_and_metrics(web_daemon, https, stub_s3: StubS3, tmp_path: Path):
    from cfn_provider.ops import health

    d = await web_daemon()
    assert d.daemon.service.health_file.parent == tmp_path  # beside the state file, named for this listener
    ok, why = health.check(d.daemon.service.health_file, 60)
    assert ok, why
    await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/m")))
    await post(https, d.url("sync", "x" * 43), ros_request("Create", stub_s3.url("ros/m2")))
    registry = d.daemon.service.metrics.registry
    assert registry.get_sample_value("cfn_provider_web_responses_total", {"mode": "sync", "status": "200"}) == 1
    assert registry.get_sample_value("cfn_provider_web_responses_total", {"mode": "-", "status": "404"}) == 1
    assert (
        registry.get_sample_value(
            "cfn_provider_requests_total", {"request_type": "Create", "outcome": "answered", "status": "SUCCESS"}
        )
        == 1
    )
    status, _, body = await post(https, f"{d.base}/healthz", b"", method="GET")
    assert status == 200 and json.loads(body)["Status"] == "ok"


async def test_stopping_drains_in_flight_and_refuses_new_requests(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon(grace_period=10.0)
    running = asyncio.ensure_future(
        post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/drain"), props={"SleepSeconds": "1.5"}))
    )
    await asyncio.sleep(0.5)
    d.daemon.service.stop()
    status, headers, _ = await post(https, d.url("sync"), ros_request("Create", stub_s3.url("ros/new")))
    assert status == 503 and headers["Retry-After"] == "5"
    status, _, _ = await post(https, f"{d.base}/healthz", b"", method="GET")
    assert status == 503  # a load balancer takes this member out
    status, _, body = await running
    assert status == 200 and json.loads(body)["Status"] == "SUCCESS"  # the in-flight one finished
    assert await asyncio.wait_for(d.daemon.task, 30) == 0  # drained, then stopped (exit 0)


async def test_grace_period_over_releases_or_answers(web_daemon, https, stub_s3: StubS3, tmp_path: Path):
    d = await web_daemon(grace_period=0.5)
    far = ros_request("Create", stub_s3.url("ros/far"), props={"Timeout": "600", "SleepSeconds": "4"})
    near = ros_request("Create", stub_s3.url("ros/near"), props={"Timeout": "30", "SleepSeconds": "4"})
    calls = [asyncio.ensure_future(post(https, d.url("sync"), r)) for r in (far, near)]
    await asyncio.sleep(0.7)
    await d.daemon.stop()
    (far_status, far_headers, _), (near_status, _, near_body) = [await c for c in calls]
    assert far_status == 503 and far_headers["Retry-After"] == "5"  # let go of: a retry runs it elsewhere
    assert near_status == 200 and json.loads(near_body)["Status"] == "FAILED"  # too near its deadline to hand off
    assert "shutting down" in json.loads(near_body)["Reason"]
    store = open_store(f"sqlite://{tmp_path}/state.db")
    try:
        released = await store.get(idempotency_key(far["StackId"], far["RequestId"]))
        assert released is None or not released.leased(time.time())
        answered = await store.get(idempotency_key(near["StackId"], near["RequestId"]))
        assert answered is not None and answered.state == SENT
    finally:
        await store.close()

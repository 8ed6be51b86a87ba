"""A daemon process on transport web SIGKILLed mid-request, then started again on the same port and
state: the sync request's idempotent retry is run once and answered once; an async request already
acknowledged (200) is answered anyway, by the restarted daemon, from the store. And SIGHUP reloads the
certificate of a running daemon."""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.dialects.conftest import ros_request
from tests.support.daemons import REPO, SubprocessDaemon, recorded_calls, stop_gracefully, wait_for_event, wait_until
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority, serial_in, serial_of
from tests.support.web import free_port, listening, post, posted, web_subprocess


@pytest.fixture
def spawn_web(tmp_path: Path, stub_s3: StubS3, ca: CertAuthority, token_file: Path) -> Iterator[Any]:
    """`d = spawn_web("name")`: a daemon process on one port and state for the whole test (restarts reuse them)."""
    cert, key = ca.issue(tmp_path / "server")
    port, started = free_port(), []

    def spawn(name: str) -> SubprocessDaemon:
        daemon = web_subprocess(
            tmp_path,
            stub_s3,
            tmp_path / f"{name}.log",
            port=port,
            token_file=token_file,
            cert=cert,
            key=key,
            extra=("--visibility-timeout", "5", "--poll-interval", "0.5"),
            env={"CFN_TEST_CALLS_FILE": str(tmp_path / "calls"), "CFN_TEST_STARTED_FILE": str(tmp_path / "started")},
        )
        started.append(daemon)
        daemon.start()
        listening(daemon)
        return daemon

    spawn.cert, spawn.port = cert, port  # type: ignore[attr-defined]
    try:
        yield spawn
    finally:
        for daemon in started:
            daemon.stop()


def _started(tmp_path: Path, request_id: str) -> int:
    path = tmp_path / "started"
    return path.read_text().split().count(request_id) if path.exists() else 0


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_sigkill_mid_sync_request_then_idempotent_retry_runs_once(
    spawn_web, https, stub_s3, tmp_path, token_file
):
    first = spawn_web("first")
    url = f"https://127.0.0.1:{spawn_web.port}/{token_file.read_text().split()[0]}/sync"
    req = ros_request("Create", stub_s3.url("crash/sync"), rtype="Custom::Started", props={"SleepSeconds": "3"})
    call = asyncio.ensure_future(post(https, url, req))
    await asyncio.to_thread(wait_until, lambda: _started(tmp_path, req["RequestId"]), 30, "the handler to start")
    first.kill()  # mid-handler: no answer stored, the claim's lease still running
    with pytest.raises(aiohttp.ClientError):
        await call
    spawn_web("second")
    # ROS's retry of an idempotent Create: it waits out the dead lease (5 s here), unless the restart took
    # longer; a request found free only after waiting is not run with what is left of this caller's time
    # (503, Retry-After: 1), the next retry runs it
    status, headers, body = await post(https, url, req)
    if status == 503:
        assert headers["Retry-After"] == "1", body
        status, _, body = await post(https, url, req)
    assert status == 200 and json.loads(body)["Status"] == "SUCCESS"
    status, _, again = await post(https, url, req)
    assert (status, again) == (200, body)  # one answer, however often it is asked for
    assert recorded_calls(tmp_path / "calls") == [f"{req['RequestId']} Create"]  # one completed run
    assert _started(tmp_path, req["RequestId"]) == 2  # the killed one, and the one after the lease ran out
    assert not stub_s3.requests


@pytest.mark.slow  # seconds of real waiting: `make test`, not `make check`
async def test_sigkill_after_an_async_200_is_answered_by_the_next_daemon(
    spawn_web, https, stub_s3, tmp_path, token_file
):
    first = spawn_web("first")
    url = f"https://127.0.0.1:{spawn_web.port}/{token_file.read_text().split()[0]}"
    req = ros_request("Create", stub_s3.url("crash/async"), rtype="Custom::Started", props={"SleepSeconds": "3"})
    status, _, body = await post(https, url, req)
    assert (status, json.loads(body)) == (200, {"Accepted": True})  # ROS will not send it again
    await asyncio.to_thread(wait_until, lambda: _started(tmp_path, req["RequestId"]), 30, "the handler to start")
    first.kill()
    second = spawn_web("second")
    answer = await posted(stub_s3, "crash/async", timeout=40)
    assert json.loads(answer.body)["Status"] == "SUCCESS"
    await asyncio.to_thread(wait_for_event, second, 10, event="request", outcome="answered")
    assert recorded_calls(tmp_path / "calls") == [f"{req['RequestId']} Create"]
    assert len({r.body for r in stub_s3.requests_for("crash/async", "POST")}) == 1
    assert stop_gracefully(second) == 0


async def test_sighup_reloads_the_certificate(spawn_web, ca: CertAuthority, tmp_path: Path):
    daemon = spawn_web("hup")
    before = await _presented(spawn_web.port, ca)
    assert before == serial_in(spawn_web.cert)
    ca.issue(spawn_web.cert.with_suffix(""))
    daemon.signal(signal.SIGHUP)
    await asyncio.to_thread(wait_for_event, daemon, 10, event="web.tls_reloaded")
    assert await _presented(spawn_web.port, ca) == serial_in(spawn_web.cert) != before
    assert daemon.proc is not None and daemon.proc.poll() is None  # still serving
    check = subprocess.run(
        [sys.executable, "-m", "cfn_provider", "check", "--state", f"sqlite://{tmp_path}/state.db"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert check.returncode == 0 and f"ok (pid {daemon.proc.pid})" in check.stdout, check.stdout + check.stderr
    assert stop_gracefully(daemon) == 0


async def _presented(port: int, ca: CertAuthority, context: ssl.SSLContext | None = None) -> int:
    """The serial number of the certificate the listener presents to a client with `context`."""
    context = context or ca.client_context()
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return serial_of(der)


@pytest.mark.slow
async def test_a_sync_retry_after_a_member_died_is_never_failed_for_want_of_time(
    https, stub_s3, tmp_path, token_file, ca: CertAuthority
):
    """Two daemons on one state file, the DEFAULT lease (60 s, longer than the 55 s sync limit). A
    member is SIGKILLed while a web[sync] handler runs; the caller's retry goes to the other member,
    which waits for the dead member's lease within its caller's time. Before: it took the request over
    when the lease lapsed (58 s after the retry came), with no time left, and stored FAILED "timed out
    after 0 s" for every later retry. Now: 503 + Retry-After (the seconds until the lease lapses),
    then the retry after that runs the handler with its full budget, once."""
    cert, key = ca.issue(tmp_path / "server")
    env = {"CFN_TEST_CALLS_FILE": str(tmp_path / "calls"), "CFN_TEST_STARTED_FILE": str(tmp_path / "started")}
    members = {
        name: web_subprocess(
            tmp_path,
            stub_s3,
            tmp_path / f"{name}.log",
            port=free_port(),
            token_file=token_file,
            cert=cert,
            key=key,
            env={**env, "STATE_DIRECTORY": str(tmp_path / name)},
        )  # fmt: skip
        for name in ("a", "b")
    }
    try:
        urls = {}
        for name, member in members.items():
            member.start()
            urls[name] = listening(member) + f"/{token_file.read_text().split()[0]}/sync"
        req = ros_request("Create", stub_s3.url("died/sync"), rtype="Custom::Started", props={"SleepSeconds": "2"})
        call = asyncio.ensure_future(post(https, urls["a"], req))
        await asyncio.to_thread(wait_until, lambda: _started(tmp_path, req["RequestId"]), 30, "the handler to start")
        members["a"].kill()  # mid-handler: its claim's lease (60 s) still running
        with pytest.raises(aiohttp.ClientError):
            await call
        status, headers, body = await post(https, urls["b"], req, timeout=120)  # the retry, at the other member
        assert status == 503, body  # before: 200 with FAILED "timed out after 0 s", stored for good
        retry_after = int(headers["Retry-After"])
        assert 1 <= retry_after <= 60 and b"lease" in body
        await asyncio.sleep(retry_after)  # as ROS does: the server says when
        status, _, body = await post(https, urls["b"], req, timeout=120)
        assert status == 200 and json.loads(body)["Status"] == "SUCCESS", body
        assert (await post(https, urls["b"], req))[2] == body  # the stored answer, to every later retry
        assert recorded_calls(tmp_path / "calls") == [f"{req['RequestId']} Create"]  # one completed run
        assert _started(tmp_path, req["RequestId"]) == 2  # the killed one, and the one with its full budget
    finally:
        for member in members.values():
            member.stop()


async def test_sighup_from_an_rsa_to_an_ec_certificate_serves_only_the_new_one(
    tmp_path: Path, stub_s3, ca: CertAuthority, token_file
):
    """A reload swaps the whole TLS context: before, the EC pair was loaded into the live context beside
    the RSA one, so a client that can only take RSA went on getting the old RSA certificate."""
    cert, key = ca.issue(tmp_path / "server", rsa_key=True)
    port = free_port()
    daemon = web_subprocess(
        tmp_path, stub_s3, tmp_path / "hup.log", port=port, token_file=token_file, cert=cert, key=key
    )
    daemon.start()
    try:
        listening(daemon)
        rsa_serial = serial_in(cert)
        assert await _presented(port, ca, ca.rsa_only_client_context()) == rsa_serial
        ca.issue(tmp_path / "server")  # EC, over the same files
        daemon.signal(signal.SIGHUP)
        await asyncio.to_thread(wait_for_event, daemon, 10, event="web.tls_reloaded")
        assert await _presented(port, ca) == serial_in(cert) != rsa_serial  # an EC-capable client: the new one
        with pytest.raises((ssl.SSLError, ConnectionError)):  # an RSA-only client: none it can take (not the old)
            await _presented(port, ca, ca.rsa_only_client_context())
        assert await _presented(port, ca) == serial_in(cert)  # still serving
    finally:
        daemon.stop()

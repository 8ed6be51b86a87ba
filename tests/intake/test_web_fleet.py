"""Two web listener processes behind a round-robin proxy, one DynamoDB table (dynalite): ROS-style
retries of every request land on both members, callers hang up and retry, and still every request runs
once and gets one answer (sync: the same body for every copy; async: one body POSTed), none lost."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cfn_provider.local.emulator import REGION, TEST_CREDENTIALS
from tests.dialects.conftest import ros_request
from tests.support.daemons import recorded_calls
from tests.support.dynalite import Dynalite
from tests.support.stub_s3 import StubS3
from tests.support.tcp_proxy import RoundRobinProxy
from tests.support.tls import CertAuthority
from tests.support.web import free_port, listening, post, web_subprocess

REQUESTS = 24  # half sync, half async
COPIES = 3  # each sent this many times, at once, through the proxy


@pytest.fixture
def table(tmp_path: Path):
    with Dynalite(tmp_path / "dynalite.log") as db:
        name = f"web-fleet-{uuid.uuid4().hex[:8]}"
        db.create_table(name)
        yield name, {"AWS_ENDPOINT_URL_DYNAMODB": db.endpoint, "AWS_DEFAULT_REGION": REGION, **TEST_CREDENTIALS}


async def _copies(session: aiohttp.ClientSession, url: str, req: dict[str, Any]) -> list[bytes]:
    """COPIES copies at once, one of them hanging up early and retrying; every answer body."""

    async def one(hang_up: bool) -> bytes:
        if hang_up:
            try:
                await post(session, url, req, timeout=0.05)
            except (TimeoutError, aiohttp.ClientError):
                pass
        seen = []
        for _ in range(20):  # 503 (all slots busy) and 500 (a copy that lost its claim) are retried, as ROS does
            status, _, body = await post(session, url, req)
            if status == 200:
                return body
            assert status in (500, 503), (status, body)
            seen.append((status, body[:80]))
            await asyncio.sleep(0.2)
        raise AssertionError(f"never answered: {seen}")

    return list(await asyncio.gather(*(one(i == 0) for i in range(COPIES))))


async def test_two_members_never_run_a_request_twice_and_lose_none(
    table, tmp_path: Path, stub_s3: StubS3, token_file: Path, ca: CertAuthority
):
    name, env = table
    cert, key = ca.issue(tmp_path / "server")
    token = token_file.read_text().split()[0]
    members = [
        web_subprocess(
            tmp_path,
            stub_s3,
            tmp_path / f"{m}.log",
            port=free_port(),
            token_file=token_file,
            cert=cert,
            key=key,
            state=f"dynamodb://{name}",
            env={**env, "CFN_TEST_CALLS_FILE": str(tmp_path / "calls"), "STATE_DIRECTORY": str(tmp_path / m)},
        )
        for m in ("a", "b")
    ]
    try:
        ports = []
        for member in members:
            member.start()
            ports.append(int(listening(member).rsplit(":", 1)[1]))
        with RoundRobinProxy([("127.0.0.1", p) for p in ports]) as lb:
            base = f"https://127.0.0.1:{lb.port}/{token}"
            requests = [
                ros_request(
                    "Create",
                    stub_s3.url(f"fleet/{i}"),
                    rtype="Custom::Stamped",
                    props={"SleepSeconds": str(random.choice((0, 0.2, 0.5)))},
                )
                for i in range(REQUESTS)
            ]
            connector = aiohttp.TCPConnector(ssl=ca.client_context(), force_close=True)  # a connection per copy
            async with aiohttp.ClientSession(connector=connector) as session:
                answers = await asyncio.gather(
                    *(_copies(session, base + ("/sync" if i % 2 == 0 else ""), req) for i, req in enumerate(requests))
                )
                late = await asyncio.gather(
                    *(  # a retry after it was all answered: the same answers, no runs
                        post(session, base + ("/sync" if i % 2 == 0 else ""), req) for i, req in enumerate(requests)
                    )
                )
            assert lb.forwarded >= REQUESTS * COPIES

        for i, bodies in enumerate(answers):
            if i % 2 == 0:
                assert len(set(bodies)) == 1 and json.loads(bodies[0])["Status"] == "SUCCESS"
                assert late[i][2] == bodies[0]
            else:
                assert {json.loads(b)["Accepted"] for b in bodies} == {True}
        for i in range(1, REQUESTS, 2):  # every async request answered at its ResponseURL, with one body
            for _ in range(400):
                if stub_s3.requests_for(f"fleet/{i}", "POST"):
                    break
                await asyncio.sleep(0.05)
            bodies = {r.body for r in stub_s3.requests_for(f"fleet/{i}", "POST")}
            assert len(bodies) == 1 and json.loads(bodies.pop())["Status"] == "SUCCESS", i
        calls = recorded_calls(tmp_path / "calls")
        runs = sorted(calls.count(f"{req['RequestId']} Create") for req in requests)
        assert runs == [1] * REQUESTS, runs  # 0 double runs, 0 lost
        served = [sum(1 for e in m.events() if e.get("event") == "request") for m in members]
        assert all(n > 0 for n in served), served  # both members took copies
    finally:
        for member in members:
            member.stop()

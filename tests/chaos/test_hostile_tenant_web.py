"""Chaos suite: a hostile tenant against another tenant's stacks, on the ROS transports (issue 28 items 1, 2).

A tenant is whoever holds a web token (every template author using its ServiceToken has it) or may
publish to a topic the daemon serves. Here tenant `team-a` (the victim) keeps a key-derived
Custom::RandomSecret; tenant `team-b` (the attacker) has a token (web) or a topic (MNS) of its own and
names the victim's StackId, LogicalResourceId and PhysicalResourceId:

- web: with a fresh RequestId (Update, Delete, a Create in the victim's stack) and with the victim's
  known RequestId, on `/<token>/sync` (the answer would be the HTTP response: no ResponseURL rule
  applies) and on `/<token>` with a ResponseURL the attacker reads (the stub endpoint stands for its
  own OSS bucket);
- MNS: the same requests in notifications of the attacker's own topic, answered (were they run) to
  a ResponseURL the attacker reads.

Every attack: nothing run, nothing answered anywhere, a `security` line (web: 403), no connection to
any host outside the test's own, and the victim's secret in no response, no answer and no log line.
The victim is served as before afterwards. Figures (the hostile-tenant table, with
tests/chaos/test_hostile_tenant*.py): attacks tried, secrets disclosed (in all, and per transport).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from structlog.testing import capture_logs

from cfn_provider.handlers import random_secret as rs
from cfn_provider.trust.web_tokens import new_token
from tests.chaos.conftest import Attacks, scale
from tests.dialects.conftest import QUEUE, ROS_HANDLERS, mns_settings, ros_request
from tests.support.daemons import in_process_daemons
from tests.support.egress import EgressGuard
from tests.support.mns_server import MnsClient, MnsServer, notification_json
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority
from tests.support.web import WEB_HANDLERS, WebDaemon, post, posted, web_settings

SECRET = ("Custom::RandomSecret", None)
OWNER = "1234567890"  # notification_json's default topic owner
VICTIM_TOPIC, ATTACKER_TOPIC = "ros-topic", "team-b-topic"


def full_topic(name: str) -> str:
    return f"acs:mns:cn-hangzhou:{OWNER}:topics/{name}"


@pytest.fixture
def secret_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret.key").write_bytes(os.urandom(32))
    monkeypatch.setenv(rs.KEY_ENV, str(tmp_path / "secret.key"))
    # an Update opens an SSM client (used only with a ParameterName, never here): a region, and nowhere to go
    for name, value in {
        "AWS_DEFAULT_REGION": "cn-hangzhou",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "testing",  # no look for credentials (the metadata service)
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)


def secret_request(kind: str, url: str, **fields: Any) -> dict[str, Any]:
    return ros_request(kind, url, logical="Db", rtype="Custom::RandomSecret", props={"Length": 30}, **fields)


def forgeries(victim: dict[str, Any], physical_id: str, url: Any) -> dict[str, dict[str, Any]]:
    """The attacker's requests naming the victim's resource: `url(name)` is a ResponseURL it reads."""
    ids = {k: victim[k] for k in ("StackId", "StackName", "LogicalResourceId")}
    old = {"Length": 30}
    return {
        "Update under the victim's ids": secret_request("Update", url("update"), physical_id=physical_id, old_props=old)
        | ids,
        "Delete under the victim's ids": secret_request("Delete", url("delete"), physical_id=physical_id) | ids,
        "Create in the victim's stack": secret_request("Create", url("create")) | ids,
        "the victim's known RequestId": victim | {"ResponseURL": url("known"), "IntranetResponseURL": url("known")},
    }


async def test_a_web_tenant_reaches_nothing_of_another_tenants_stack(
    tmp_path: Path, stub_s3: StubS3, secret_key: None, monkeypatch, attacks: Attacks
) -> None:
    ca = CertAuthority(tmp_path)
    cert, key = ca.issue(tmp_path / "server")
    tokens = {"team-a": new_token(), "team-b": new_token()}
    token_file = tmp_path / "web-token"
    token_file.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    guard = EgressGuard({urlsplit(stub_s3.base_url).port})
    async with (
        in_process_daemons() as start,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca.client_context())) as https,
    ):
        settings = web_settings(
            tmp_path, stub_s3, cert=cert, key=key, token_file=token_file, handlers=(*WEB_HANDLERS, SECRET)
        )
        d = WebDaemon(await start(settings), tokens["team-a"])
        guard.allowed_ports.add(urlsplit(d.base).port)
        guard.install(monkeypatch)
        victim = secret_request("Create", stub_s3.url("victim/create"))
        status, _, raw = await post(https, d.url("sync"), victim)
        answer = json.loads(raw)
        assert status == 200 and answer["Status"] == "SUCCESS", answer
        secret, physical_id = answer["Data"]["Secret"], answer["PhysicalResourceId"]

        seen: list[bytes] = []
        with capture_logs() as logs:
            for round_ in range(scale(2, 20)):
                tried = forgeries(victim, physical_id, lambda name, r=round_: stub_s3.url(f"attacker/{r}/{name}"))
                for name, body in tried.items():
                    fresh = body if name == "the victim's known RequestId" else body | {"RequestId": str(uuid.uuid4())}
                    for mode in ("sync", "async"):
                        attacks.tried(f"web {mode}: {name}")
                        status, _, raw = await post(https, d.url(mode, tokens["team-b"]), fresh)
                        seen.append(raw)
                        assert status == 403, (mode, name, status, raw)
        assert not [e for e in logs if e.get("event") == "request" and "/attacker/" in e["response_url"]]  # none run
        assert len([e for e in logs if e.get("event") == "security"]) == len(seen)
        assert not [r for r in stub_s3.requests if r.key.startswith("attacker/")]  # nothing answered there
        assert attacks.disclosed(*seen, json.dumps(logs, default=str), secrets=[secret], via="web") == 0

        again = secret_request(
            "Update", stub_s3.url("victim/update"), physical_id=physical_id, old_props={"Length": 30}
        )
        status, _, raw = await post(
            https, d.url("sync"), again | {k: victim[k] for k in ("StackId", "LogicalResourceId")}
        )
        assert status == 200 and json.loads(raw)["Data"]["Secret"] == secret  # the victim, served as before
    assert attacks.stray(len(guard.attempts)) == 0, guard.attempts


@pytest.fixture
def mns(monkeypatch: pytest.MonkeyPatch) -> Iterator[MnsServer]:
    with MnsServer() as server:
        server.create_queue(QUEUE, visibility_timeout=30)
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


async def test_an_mns_tenant_reaches_nothing_of_another_tenants_stack(
    mns: MnsServer, stub_s3: StubS3, tmp_path: Path, secret_key: None, monkeypatch, attacks: Attacks
) -> None:
    guard = EgressGuard({urlsplit(mns.endpoint).port, urlsplit(stub_s3.base_url).port})
    guard.install(monkeypatch)
    client = MnsClient(mns)
    settings = mns_settings(
        mns,
        tmp_path,
        stub_s3,
        handlers=(*ROS_HANDLERS, SECRET),
        mns_topics=(full_topic(VICTIM_TOPIC), full_topic(ATTACKER_TOPIC)),
        tenant_topics=(f"team-a={full_topic(VICTIM_TOPIC)}", f"team-b={full_topic(ATTACKER_TOPIC)}"),
    )
    sent: list[str] = []
    with capture_logs() as logs:
        async with in_process_daemons() as start:
            await start(settings)
            victim = secret_request("Create", stub_s3.url("victim/create"))
            client.send_message(QUEUE, notification_json(json.dumps(victim), topic=VICTIM_TOPIC))
            answer = json.loads((await posted(stub_s3, "victim/create", timeout=40)).body)
            assert answer["Status"] == "SUCCESS", answer
            secret, physical_id = answer["Data"]["Secret"], answer["PhysicalResourceId"]
            for round_ in range(scale(2, 20)):
                tried = forgeries(victim, physical_id, lambda name, r=round_: stub_s3.url(f"attacker/{r}/{name}"))
                for name, body in tried.items():
                    attacks.tried(f"MNS: {name}")
                    fresh = body if name == "the victim's known RequestId" else body | {"RequestId": str(uuid.uuid4())}
                    sent.append(fresh["RequestId"])
                    client.send_message(QUEUE, notification_json(json.dumps(fresh), topic=ATTACKER_TOPIC))
            deadline = time.monotonic() + 60
            while len([e for e in logs if e.get("event") == "security"]) < len(sent):
                assert time.monotonic() < deadline, [e for e in logs if e.get("event") in ("security", "request")]
                await asyncio.sleep(0.05)
            again = secret_request(
                "Update", stub_s3.url("victim/update"), physical_id=physical_id, old_props={"Length": 30}
            )
            again |= {k: victim[k] for k in ("StackId", "StackName", "LogicalResourceId")}
            client.send_message(QUEUE, notification_json(json.dumps(again), topic=VICTIM_TOPIC))
            assert json.loads((await posted(stub_s3, "victim/update", timeout=40)).body)["Data"]["Secret"] == secret
    ran = [e["response_url"].split("?")[0] for e in logs if e.get("event") == "request"]
    assert ran == [stub_s3.url("victim/create").split("?")[0], stub_s3.url("victim/update").split("?")[0]]
    assert not [r for r in stub_s3.requests if r.key.startswith("attacker/")]
    bodies = [r.body for r in stub_s3.requests if not r.key.startswith("victim/")]
    assert attacks.disclosed(*bodies, json.dumps(logs, default=str), secrets=[secret], via="mns") == 0
    assert attacks.stray(len(guard.attempts)) == 0, guard.attempts

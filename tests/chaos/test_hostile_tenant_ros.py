"""Chaos suite: hostile tenants on the ROS transport (MNS), issue 21 items 1 and 9.

MNS messages carry no signature: whoever may send to the queue, or publish to any topic
subscribed to it, chooses the whole body. The daemon here serves one topic
(`--mns-topic acs:mns:REGION:ACCOUNT:topics/ros-topic`) through the local MNS server
(tests/support/mns_server.py), answering to a local response endpoint; the attacks:

- a notification of another topic of the account, or of another owner (JSON, XML, base64): not run;
- a bare request sent straight to the queue (no topic), raw or base64: not run (no
  --mns-allow-bare-messages);
- an SNS envelope whose TopicArn names the allowed topic: no MNS message at all;
- a CloudFormation-looking request (ARN StackId, a CloudFormation response-bucket URL) inside
  an allowed notification: judged by ROS's rules (the transport's), so refused, nothing sent.

Every refused item is a `security` (or `rejected`) line, never a handler call, never a request
to any host (an egress guard sees every connection and name lookup). A good notification is
served after them. Figures go to the hostile-tenant table (attacks tried, requests to hosts
outside the allowlist).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from structlog.testing import capture_logs

from tests.chaos.conftest import Attacks
from tests.dialects.conftest import QUEUE, mns_settings, ros_request
from tests.support import handlers
from tests.support.daemons import in_process_daemons
from tests.support.egress import EgressGuard
from tests.support.mns_server import MnsClient, MnsServer, notification_json, notification_xml
from tests.support.stub_s3 import StubS3

TOPIC = "acs:mns:cn-hangzhou:1234567890:topics/ros-topic"  # notification_json / _xml's default owner and name
ARN = "arn:aws:cloudformation:us-east-1:123456789012:stack/victim/5b918d10-cd98-11ea-90d5-0a9cd3354c10"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def mns(monkeypatch: pytest.MonkeyPatch) -> Iterator[MnsServer]:
    with MnsServer() as server:
        server.create_queue(QUEUE, visibility_timeout=30)
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


async def test_foreign_topics_bare_messages_and_other_transports_forms_get_nothing_done(
    mns: MnsServer, stub_s3: StubS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attacks: Attacks
) -> None:
    attack_bodies: dict[str, tuple[dict[str, Any], str]] = {}

    def attack(name: str, request: dict[str, Any], body: str) -> None:
        attack_bodies[name] = (request, body)
        attacks.tried(f"ROS over MNS: {name}")

    def req(key: str, **fields: Any) -> dict[str, Any]:
        return {**ros_request("Create", stub_s3.url(f"hostile/{key}")), **fields}

    for name, wrap in {
        "other topic (JSON)": lambda m: notification_json(m, topic="other-topic"),
        "other topic (XML, base64 message)": lambda m: notification_xml(b64(m), topic="billing"),
        "other owner, same name": lambda m: notification_json(m, owner="999999999"),
        "other topic, whole body base64": lambda m: b64(notification_json(m, topic="x")),
    }.items():
        request = req(name.replace(" ", "-"))
        attack(name, request, wrap(json.dumps(request)))
    for name, wrap in {"bare request": lambda m: m, "bare request, base64": b64}.items():
        request = req(name.replace(" ", "-"))
        attack(name, request, wrap(json.dumps(request)))
    request = req("sns-envelope")
    attack(
        "SNS envelope naming the allowed topic",
        request,
        json.dumps(
            {
                "Type": "Notification",
                "MessageId": "m-1",
                "TopicArn": TOPIC,
                "Message": json.dumps(request),
                "Timestamp": "2026-01-01T00:00:00.000Z",
                "SignatureVersion": "2",
                "Signature": "x",
            }
        ),
    )
    cfn_looking = {
        "RequestType": "Create",
        "StackId": ARN,
        "RequestId": "r-cfn",
        "LogicalResourceId": "Db",
        "ResourceType": "Custom::Test",
        "ResourceProperties": {},
        "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/"
        f"k?X-Amz-Expires=60&X-Amz-Date={time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}",
    }
    attack(
        "CloudFormation-looking request in an allowed notification",
        cfn_looking,
        notification_json(json.dumps(cfn_looking)),
    )

    guard = EgressGuard({urlsplit(mns.endpoint).port, urlsplit(stub_s3.base_url).port})
    guard.install(monkeypatch)
    client = MnsClient(mns)
    with capture_logs() as logs:
        async with in_process_daemons() as start:
            await start(mns_settings(mns, tmp_path, stub_s3, mns_topics=(TOPIC,)))
            for _, body in attack_bodies.values():
                client.send_message(QUEUE, body)
            good = ros_request("Create", stub_s3.url("hostile/good"))
            client.send_message(QUEUE, notification_xml(b64(json.dumps(good))))
            deadline = time.monotonic() + 40
            while not [r for r in stub_s3.requests_for("hostile/good", "POST") if r.ok]:
                assert time.monotonic() < deadline, "the good notification was not answered"
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(mns.wait_until, lambda: not mns.queue(QUEUE).live, 20)
    refused = [e for e in logs if e.get("event") in ("security", "rejected")]
    assert len(refused) == len(attack_bodies), [(e["event"], e.get("reason")) for e in refused]
    served = [e["response_url"].split("?")[0] for e in logs if e.get("event") == "request"]
    assert served == [stub_s3.url("hostile/good").split("?")[0]]
    ran = {rid for rid, _ in handlers.started}
    assert good["RequestId"] in ran and not ran & {r["RequestId"] for r, _ in attack_bodies.values()}
    assert [r.key for r in stub_s3.requests] == ["hostile/good"]
    assert attacks.stray(len(guard.attempts)) == 0, guard.attempts

"""Chaos suite: hostile tenants at the trust boundary (the attacks of issue 12 items 3, 6, 8, 9).

Whoever can publish to the ServiceToken (a template author, through CloudFormation or straight to
the topic) chooses the ResponseURL, the signing-certificate URL and the timing. Each attack here
runs through the real SNS -> SQS queue on the session's moto server against an in-process daemon,
next to things the attacker must not reach:

- a foreign bucket (the attacker's own, in the same S3): a fresh request answered there, and a
  stored NoEcho SUCCESS replayed there (CloudFormation "retrying" with the attacker's URL);
- the instance metadata service and a listener standing for any other host: never called;
- look-alike signing-certificate URLs, a certificate that does not exist, and a message from a
  topic outside the allowlist: rejected as forgeries, nothing fetched for the foreign topic;
- a ResponseURL server that trickles its answer one byte at a time: the slot is free again at
  the request's deadline, and the next request is served;
- a state file left world-readable: fixed before the daemon serves, or refused when not ours.

Figures (suite `hostile_tenant`, the same names as tests/chaos/test_hostile_tenant.py; the table
adds both files up): attacks tried, secrets disclosed (0), foreign resources touched (0),
requests to non-allowlisted hosts (0).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider, Stack
from cfn_provider.trust import at_rest
from cfn_provider.trust.at_rest import StateExposed
from tests.chaos.conftest import Figures
from tests.support.aws import response_of, send_raw, wait_for_event
from tests.support.egress import EgressGuard
from tests.support.listener import ConnectionCounter
from tests.support.sns_signing import CertServer, make_identity, notification, sign_envelope
from tests.support.stub_s3 import StubS3

SUITE = "hostile_tenant"
TRIED, DISCLOSED, TOUCHED, STRAY = (
    "attacks_tried",
    "secrets_disclosed",
    "foreign_resources_touched",
    "requests_to_non_allowlisted_hosts",
)
SECRET = "NoEchoSecret-" + uuid.uuid4().hex
NOECHO = ("Custom::Secret", "tests.support.noecho_handler")
TEST = ("Custom::Test", "tests.support.handlers")


@pytest.fixture
def figures() -> Figures:
    figures = Figures(SUITE)
    for name in (TRIED, DISCLOSED, TOUCHED, STRAY):
        figures.values.setdefault(name, 0)
    return figures


@pytest.fixture
def counter():
    with ConnectionCounter() as c:
        yield c


@pytest.fixture
def attacker_bucket(provider: Provider) -> str:
    s3 = provider.emulator.client("s3")
    name = f"attacker-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def bucket_objects(provider: Provider, bucket: str) -> list[bytes]:
    s3 = provider.emulator.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return [s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys]


def cloudformation_bucket(provider: Provider) -> tuple[str, ...]:
    """The allowlist: the provider's response bucket stands for CloudFormation's, nothing else of S3."""
    return (f"{provider.emulator.endpoint}/{provider.bucket}/",)


def disclosed(figures: Figures, *texts: Any) -> int:
    blob = "\n".join(t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in texts)
    found = blob.count(SECRET)
    figures.add(DISCLOSED, found)
    figures.add(DISCLOSED + "_via_sqs", found)  # the table shows it per transport too (tests/chaos/conftest.py)
    return found


async def canary(stack: Stack) -> None:
    """A legitimate request is still served after the attacks."""
    req = stack.request("Create", f"Canary{uuid.uuid4().hex[:6]}", resource_type="Custom::Test")
    stack.publish(req)
    resp = await response_of(stack, req, timeout=30)
    assert resp is not None and resp["Status"] == "SUCCESS"


# ---------------------------------------------------------------------------------- ResponseURLs


async def test_responses_never_go_to_a_foreign_bucket_the_metadata_service_or_any_other_host(
    run_daemon, provider: Provider, stack: Stack, attacker_bucket: str, counter: ConnectionCounter, figures: Figures
) -> None:
    await run_daemon(handlers=(TEST,), allow_response_urls=cloudformation_bucket(provider))
    urls = {
        "attacker's bucket, same S3": stack.response_url("loot/1", bucket=attacker_bucket),
        "attacker's bucket on real S3": "https://attacker-bucket.s3.amazonaws.com/loot?X-Amz-Signature=x",
        "look-alike CloudFormation bucket": (
            "https://cloudformation-custom-resource-response-useast1-evil.s3.amazonaws.com/loot"
        ),
        "made-up region's bucket": "https://cloudformation-custom-resource-response-evil1.s3.amazonaws.com/loot",
        "metadata service": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "metadata service over https": "https://169.254.169.254/latest/api/token",
        "another host": counter.url("/cloudformation-custom-resource-response-useast1/loot"),
        "userinfo trick": counter.url("/x").replace("http://", f"http://{provider.emulator.endpoint[7:]}@"),
        "dot-segments out of the bucket": f"{cloudformation_bucket(provider)[0]}../{attacker_bucket}/loot",
    }
    with capture_logs() as logs:
        for name, url in urls.items():
            req = stack.request("Create", "Thief", resource_type="Custom::Test", properties={"Attack": name})
            req["ResponseURL"] = url
            stack.publish(req)
            figures.add(TRIED)
        for _ in range(600):
            if len([e for e in logs if e.get("event") == "security"]) >= len(urls):
                break
            await asyncio.sleep(0.05)
    security = [e for e in logs if e.get("event") == "security"]
    assert len(security) == len(urls), [e.get("event") for e in logs]
    assert all("ResponseURL" in e["reason"] for e in security)
    assert not [e for e in logs if e.get("event") in ("request", "response.retry")]
    figures.add(TOUCHED, len(bucket_objects(provider, attacker_bucket)))
    assert bucket_objects(provider, attacker_bucket) == []
    figures.add(STRAY, counter.connections)
    assert counter.connections == 0
    await canary(stack)


async def test_a_stored_noecho_answer_is_never_replayed_to_the_template_authors_bucket(
    run_daemon,
    provider: Provider,
    stack: Stack,
    attacker_bucket: str,
    counter: ConnectionCounter,
    figures: Figures,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CloudFormation re-asking with a new ResponseURL gets the stored SUCCESS; the same request with
    the attacker's URL (their bucket, their host) passes the same allowlist, so it gets nothing."""
    monkeypatch.setenv("CFN_TEST_NOECHO_SECRET", SECRET)
    await run_daemon(handlers=(NOECHO, TEST), allow_response_urls=cloudformation_bucket(provider))
    first = stack.request("Create", "Db", resource_type="Custom::Secret")
    stack.publish(first)
    answer = await response_of(stack, first, timeout=30)
    assert answer is not None and answer["Data"]["Password"].startswith(SECRET)  # the victim's own answer

    retry = dict(first, ResponseURL=stack.response_url(f"{stack.name}/Db/retry"))  # CloudFormation's retry
    stack.publish(retry)
    resent = await response_of(stack, retry, timeout=30)
    assert resent == answer

    with capture_logs() as logs:
        for url in (
            stack.response_url("stolen", bucket=attacker_bucket),
            counter.url("/stolen"),
            "https://attacker-bucket.s3.amazonaws.com/stolen",
        ):
            stack.publish(dict(first, ResponseURL=url))
            figures.add(TRIED)
        for _ in range(600):
            if len([e for e in logs if e.get("event") == "security"]) >= 3:
                break
            await asyncio.sleep(0.05)
    assert len([e for e in logs if e.get("event") == "security"]) == 3
    loot = bucket_objects(provider, attacker_bucket)
    assert disclosed(figures, *loot, json.dumps(logs, default=str)) == 0
    figures.add(TOUCHED, len(loot))
    assert loot == []
    figures.add(STRAY, counter.connections)
    assert counter.connections == 0


# ---------------------------------------------------------------------------------- signing certificates


@pytest.fixture
def certs():
    with CertServer() as server:
        yield server


@pytest.fixture(scope="module")
def identity():
    return make_identity()


async def test_lookalike_certificate_urls_and_foreign_topics_fetch_nothing(
    run_daemon,
    provider: Provider,
    stack: Stack,
    certs: CertServer,
    identity,
    counter: ConnectionCounter,
    figures: Figures,
) -> None:
    await run_daemon(handlers=(TEST,), verify_signatures=True, trust_signing_cert_urls=(certs.base_url,))
    good = certs.add("SimpleNotificationService-good.pem", identity.cert_pem)
    hex_name = "SimpleNotificationService-" + "ab" * 16 + ".pem"
    forged_urls = [
        counter.url("/" + hex_name),  # another host
        counter.url("/" + hex_name).replace("http://", f"http://127.0.0.1:{certs.base_url.rsplit(':', 1)[1][:-1]}@"),
        good.replace(str(certs.base_url.rsplit(":", 1)[1][:-1]), str(counter.port)),  # the port as a look-alike
        certs.base_url + "SimpleNotificationService-made-up.pem",  # trusted host, no such certificate: 404
    ]
    with capture_logs() as logs:
        for url in forged_urls:
            req = stack.request("Create", "Forged", resource_type="Custom::Test")
            send_raw(
                provider, json.dumps(sign_envelope(notification(json.dumps(req), provider.topic_arn, url), identity))
            )
            figures.add(TRIED)
        # a validly signed message from a topic outside the allowlist: nothing is fetched for it
        other_topic = provider.topic_arn + "-elsewhere"
        foreign = certs.add("SimpleNotificationService-foreign.pem", identity.cert_pem)
        req = stack.request("Create", "OtherTopic", resource_type="Custom::Test")
        send_raw(provider, json.dumps(sign_envelope(notification(json.dumps(req), other_topic, foreign), identity)))
        figures.add(TRIED)
        for _ in range(600):
            if len([e for e in logs if e.get("event") == "security"]) >= len(forged_urls) + 1:
                break
            await asyncio.sleep(0.05)
    security = [e for e in logs if e.get("event") == "security"]
    assert len(security) == len(forged_urls) + 1, [e.get("event") for e in logs]
    assert not [e for e in logs if e.get("event") in ("deferred", "request")]  # forgeries are not retried
    assert "/SimpleNotificationService-foreign.pem" not in certs.hits
    assert certs.hits.get("/SimpleNotificationService-made-up.pem") == 1
    figures.add(STRAY, counter.connections)
    assert counter.connections == 0
    req = stack.request("Create", "Signed", resource_type="Custom::Test")
    send_raw(provider, json.dumps(sign_envelope(notification(json.dumps(req), provider.topic_arn, good), identity)))
    resp = await response_of(stack, req, timeout=30)
    assert resp is not None and resp["Status"] == "SUCCESS"


# ---------------------------------------------------------------------------------- the dialect is the transport's

OSS_LOOT = "https://attacker-loot.oss-cn-hangzhou.aliyuncs.com/loot"  # a bucket the template author owns


async def test_a_ros_field_never_switches_a_signed_sns_request_to_ros_rules(
    run_daemon, provider: Provider, certs: CertServer, identity, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 1. Anyone who may publish to the topic sends an Update carrying a victim's
    StackId, LogicalResourceId and PhysicalResourceId, plus ROS's `StackName` and a ResponseURL on
    their own OSS bucket. On SNS/SQS a request is CloudFormation's whatever it carries, so the URL
    is judged by CloudFormation's rules: refused as a security event, the handler never runs and
    nothing is sent anywhere (an egress guard sees every connection and name lookup)."""
    from cfn_provider.handlers import random_secret as rs

    monkeypatch.delenv(rs.KEY_ENV, raising=False)
    await run_daemon(
        handlers=(("Custom::RandomSecret", None), TEST),
        verify_signatures=True,
        trust_signing_cert_urls=(certs.base_url,),
        allow_response_urls=cloudformation_bucket(provider),
    )
    cert_url = certs.add("SimpleNotificationService-dialect.pem", identity.cert_pem)

    def signed(request: dict[str, Any]) -> str:
        return send_raw(
            provider,
            json.dumps(sign_envelope(notification(json.dumps(request), provider.topic_arn, cert_url), identity)),
        )

    victim = Stack(provider, name="prod")
    name = f"/prod/{uuid.uuid4().hex[:8]}/db"
    create = victim.request("Create", "Db", "Custom::RandomSecret", {"ParameterName": name})
    signed(create)
    kept = await response_of(victim, create, timeout=30)
    assert kept is not None and kept["Status"] == "SUCCESS", kept
    secret = kept["Data"]["Secret"]

    calls: list[str] = []
    real_update = rs.update

    async def spied_update(*args: Any, **kwargs: Any) -> Any:
        calls.append("update")
        return await real_update(*args, **kwargs)

    monkeypatch.setattr(rs, "update", spied_update)
    guard = EgressGuard({urlsplit(provider.emulator.endpoint).port, urlsplit(certs.base_url).port})
    guard.install(monkeypatch)
    attack = victim.request(
        "Update",
        "Db",
        "Custom::RandomSecret",
        {"ParameterName": name},
        old_properties={"ParameterName": name},
        physical_id=kept["PhysicalResourceId"],
    )
    attack.update(
        StackName="prod",
        RegionId="cn-hangzhou",
        ResponseURL=f"{OSS_LOOT}?OSSAccessKeyId=x&Expires={int(time.time()) + 20}&Signature=x",
    )
    figures.add(TRIED)
    with capture_logs() as logs:
        message_id = signed(attack)
        entry = await wait_for_event(logs, "security", timeout=30, message_id=message_id)
        await asyncio.sleep(0.5)
    assert "ResponseURL" in entry["reason"] and "aliyuncs.com" in entry["reason"], entry
    assert not [e for e in logs if e.get("event") == "request"], logs
    assert calls == []  # the handler never ran
    assert disclosed(figures, json.dumps(logs, default=str)) == 0 and secret not in json.dumps(logs, default=str)
    figures.add(STRAY, len(guard.attempts))
    assert guard.attempts == []  # nothing was sent anywhere, not even a name looked up


# ---------------------------------------------------------------------------------- a trickling server


async def test_a_trickling_response_server_frees_its_slot_at_the_requests_deadline(
    run_daemon, provider: Provider, stack: Stack, stub_s3: StubS3, figures: Figures
) -> None:
    """One slot only: a server that answers a byte at a time would hold it for the URL's hour;
    the delivery deadline (the request's ServiceTimeout) gives it back."""
    stub_s3.trickle(0.2, key="slow/answer")
    await run_daemon(
        handlers=(TEST,), concurrency=1, allow_response_urls=(*cloudformation_bucket(provider), stub_s3.base_url)
    )
    slow = stack.request("Create", "Slow", resource_type="Custom::Test", properties={"ServiceTimeout": "6"})
    slow["ResponseURL"] = stub_s3.url("slow/answer", expires_in=3600)
    figures.add(TRIED)
    started = time.monotonic()
    with capture_logs() as logs:
        stack.publish(slow)
        event = await wait_for_event(logs, "request", timeout=60)
    assert event.get("delivered") is False and "deadline" in event.get("delivery_error", "")
    assert time.monotonic() - started < 60  # not the URL's hour
    await canary(stack)  # the one slot serves again


# ---------------------------------------------------------------------------------- state at rest


async def test_a_world_readable_state_file_is_fixed_before_serving_or_refused(
    run_daemon, provider: Provider, stack: Stack, tmp_path: Path, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "exposed" / "state.db"
    state.parent.mkdir()
    for suffix in ("", "-wal"):
        path = Path(f"{state}{suffix}")
        path.write_bytes(b"")
        os.chmod(path, 0o644)
    figures.add(TRIED, 2)
    with monkeypatch.context() as m:  # someone else's file: refused, nothing served
        m.setattr(at_rest.os, "geteuid", lambda: os.getuid() + 4242)
        with pytest.raises(StateExposed, match="open to group/others"):
            await run_daemon(handlers=(TEST,), state=f"sqlite://{state}")
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o644
    await run_daemon(handlers=(TEST,), state=f"sqlite://{state}")  # ours: fixed, then served
    for suffix in ("", "-wal"):
        assert stat.S_IMODE(os.stat(f"{state}{suffix}").st_mode) == 0o600
    await canary(stack)

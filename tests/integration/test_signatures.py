"""SNS signature verification on the real queue, with a certificate the test makes and serves.

Tests cannot serve from sns.<region>.amazonaws.com, so the daemon is told to trust the test's
certificate server with --trust-signing-cert-url (off by default).
"""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import response_of, send_raw, wait_for_event, wait_until_queue_empty
from tests.support.sns_signing import CertServer, make_identity, notification, sign_envelope


@pytest.fixture
def certs():
    with CertServer() as server:
        yield server


@pytest.fixture
def identity():
    return make_identity()


async def start_verifying(run_daemon, certs: CertServer):
    return await run_daemon(verify_signatures=True, trust_signing_cert_urls=(certs.base_url,))


@pytest.mark.parametrize("version", ["1", "2"])
async def test_signed_notification_is_served(
    run_daemon, stack: Stack, provider: Provider, certs: CertServer, identity, version: str
) -> None:
    await start_verifying(run_daemon, certs)
    cert_url = certs.add("SimpleNotificationService-test.pem", identity.cert_pem)
    req = stack.request("Create", "Signed", resource_type="Custom::Test")
    envelope = sign_envelope(
        notification(json.dumps(req), provider.topic_arn, cert_url, subject="hello"), identity, version
    )
    send_raw(provider, json.dumps(envelope))
    resp = await response_of(stack, req)
    assert resp is not None and resp["Status"] == "SUCCESS"


TAMPERING = {
    "message": lambda env: {**env, "Message": env["Message"].replace("Custom::Test", "Custom::Echo")},
    "signature": lambda env: {**env, "Signature": env["Signature"][:-8] + "AAAAAAA="},
    "topic": lambda env: {**env, "TopicArn": env["TopicArn"] + "-other"},
    "subject-added": lambda env: {**env, "Subject": "added later"},
    "signature-removed": lambda env: {k: v for k, v in env.items() if k != "Signature"},
}


@pytest.mark.parametrize("tamper", list(TAMPERING), ids=list(TAMPERING))
async def test_tampered_notification_is_rejected_and_not_run(
    run_daemon, stack: Stack, provider: Provider, certs: CertServer, identity, tamper: str
) -> None:
    await start_verifying(run_daemon, certs)
    cert_url = certs.add("SimpleNotificationService-test.pem", identity.cert_pem)
    req = stack.request("Create", "Tampered", resource_type="Custom::Test")
    envelope = TAMPERING[tamper](sign_envelope(notification(json.dumps(req), provider.topic_arn, cert_url), identity))
    with capture_logs() as logs:
        message_id = send_raw(provider, json.dumps(envelope))
        entry = await wait_for_event(logs, "security", message_id=message_id)
    assert entry["log_level"] == "warning"
    await wait_until_queue_empty(provider)  # no dead-letter queue configured: deleted
    assert await response_of(stack, req, timeout=1) is None
    assert handlers.started == []


@pytest.mark.parametrize(
    "cert_url",
    [
        "https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-x.pem",
        "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "https://evil.example/SimpleNotificationService-x.pem",
    ],
)
async def test_certificate_from_an_untrusted_url_is_rejected(
    run_daemon, stack: Stack, provider: Provider, certs: CertServer, identity, cert_url: str
) -> None:
    await start_verifying(run_daemon, certs)
    req = stack.request("Create", "BadCert", resource_type="Custom::Test")
    envelope = sign_envelope(notification(json.dumps(req), provider.topic_arn, cert_url), identity)
    with capture_logs() as logs:
        message_id = send_raw(provider, json.dumps(envelope))
        entry = await wait_for_event(logs, "security", message_id=message_id)
    assert "signature rejected" in entry["reason"]
    assert handlers.started == []
    await assert_still_serving_signed(stack, provider, certs, identity)


async def assert_still_serving_signed(stack: Stack, provider: Provider, certs: CertServer, identity) -> None:
    cert_url = certs.add("SimpleNotificationService-good.pem", identity.cert_pem)
    req = stack.request("Create", "Good", resource_type="Custom::Test")
    send_raw(provider, json.dumps(sign_envelope(notification(json.dumps(req), provider.topic_arn, cert_url), identity)))
    resp = await response_of(stack, req)
    assert resp is not None and resp["Status"] == "SUCCESS"


async def test_certificate_outage_defers_instead_of_dropping(
    run_daemon, stack: Stack, provider: Provider, certs: CertServer, identity
) -> None:
    """A certificate host answering 5xx right now is not proof of forgery: try again later."""
    await start_verifying(run_daemon, certs)
    path = "/SimpleNotificationService-later.pem"
    certs.statuses[path] = 503
    cert_url = certs.base_url + path.lstrip("/")
    req = stack.request("Create", "Later", resource_type="Custom::Test")
    with capture_logs() as logs:
        send_raw(
            provider, json.dumps(sign_envelope(notification(json.dumps(req), provider.topic_arn, cert_url), identity))
        )
        await wait_for_event(logs, "deferred")
    del certs.statuses[path]
    certs.add(path, identity.cert_pem)
    resp = await response_of(stack, req, timeout=20)
    assert resp is not None and resp["Status"] == "SUCCESS"


async def test_certificate_url_answering_404_is_a_forged_message(
    run_daemon, stack: Stack, provider: Provider, certs: CertServer, identity
) -> None:
    """A 404 from the certificate host: no such certificate, so the message is forged. It is
    rejected as a security event at once (not retried), never run, never answered."""
    daemon = await start_verifying(run_daemon, certs)
    cert_url = certs.base_url + "SimpleNotificationService-made-up.pem"
    req = stack.request("Create", "Forged", resource_type="Custom::Test")
    with capture_logs() as logs:
        send_raw(
            provider, json.dumps(sign_envelope(notification(json.dumps(req), provider.topic_arn, cert_url), identity))
        )
        event = await wait_for_event(logs, "security")
    assert "HTTP 404" in event["reason"]
    assert not [e for e in logs if e.get("event") in ("deferred", "request")]
    assert certs.hits == {"/SimpleNotificationService-made-up.pem": 1}
    registry = daemon.service.metrics.registry  # the security metric
    assert registry.get_sample_value("cfn_provider_rejected_messages_total", {"kind": "security"}) == 1
    await assert_still_serving_signed(stack, provider, certs, identity)
    assert await response_of(stack, req, timeout=1) is None

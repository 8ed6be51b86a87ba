"""Every row of the bad-input table (docs/guarantees.md), fed through the real queue.

Each test checks what was PUT (or that nothing was), what stayed on the queue, what was
logged, and that the daemon went on to serve the next good message.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider, Stack
from tests.support import handlers
from tests.support.aws import (
    assert_still_serving,
    response_of,
    s3_keys,
    send_raw,
    wait_for_event,
    wait_until_queue_empty,
)
from tests.support.daemons import InProcessDaemon, settings_for
from tests.support.listener import ConnectionCounter

# -- row 1: body not JSON / not an SNS envelope / not a request ---------------------------------
MALFORMED = [
    pytest.param("this is not json", id="not-json"),
    pytest.param(json.dumps([1, 2, 3]), id="json-array"),
    pytest.param(json.dumps({"hello": "world"}), id="wrong-shape"),
    pytest.param(json.dumps({"Type": "Notification", "Message": "{}", "TopicArn": "x"}), id="envelope-missing-fields"),
    pytest.param(
        json.dumps({"RequestType": "Create", "ResourceType": "Custom::Test"}), id="request-without-url-or-ids"
    ),
]


@pytest.mark.parametrize("body", MALFORMED)
async def test_malformed_message_without_dlq_is_logged_once_and_deleted(
    run_daemon, stack: Stack, provider: Provider, body: str
) -> None:
    await run_daemon()
    with capture_logs() as logs:
        message_id = send_raw(provider, body)
        entry = await wait_for_event(logs, "rejected", message_id=message_id)
        await wait_for_event(logs, "message.deleted", message_id=message_id)
    assert entry["log_level"] == "error"
    await wait_until_queue_empty(provider)
    assert s3_keys(provider) == []
    await assert_still_serving(stack)


async def test_malformed_message_with_dlq_goes_to_the_dlq_logged_once(emulator, tmp_path) -> None:
    provider = Provider.create(emulator, dlq=True, max_receive_count=3)
    stack = Stack(provider)
    # (the dead-letter watcher, which leaves such a message alone, is tested in test_dead_letters)
    daemon = await InProcessDaemon.start(settings_for(provider, tmp_path, visibility_timeout=5, dead_letter_interval=0))
    sqs = emulator.client("sqs")
    try:
        with capture_logs() as logs:
            message_id = send_raw(provider, "definitely not json")
            moved = None
            for _ in range(400):  # three receives, five seconds apart, then the redrive moves it
                moved = sqs.receive_message(QueueUrl=provider.dlq_url, WaitTimeSeconds=0).get("Messages")
                if moved:
                    break
                await asyncio.sleep(0.1)
        assert moved and moved[0]["Body"] == "definitely not json"
        loud = [e for e in logs if e.get("message_id") == message_id and e["log_level"] in ("warning", "error")]
        assert [e["event"] for e in loud] == ["rejected"]  # logged once, however often it was received
        assert any(e["event"] == "rejected" and e["log_level"] == "debug" for e in logs)
        await assert_still_serving(stack)
    finally:
        await daemon.stop()


async def test_subscription_confirmation_is_never_confirmed(run_daemon, stack: Stack, provider: Provider) -> None:
    await run_daemon()
    with ConnectionCounter() as counter:
        envelope = {
            "Type": "SubscriptionConfirmation",
            "MessageId": "m",
            "TopicArn": provider.topic_arn,
            "Message": "confirm me",
            "Timestamp": "2026-01-01T00:00:00.000Z",
            "Token": "t",
            "SubscribeURL": counter.url("/?Action=ConfirmSubscription"),
        }
        with capture_logs() as logs:
            message_id = send_raw(provider, json.dumps(envelope))
            entry = await wait_for_event(logs, "rejected", message_id=message_id)
        assert "not confirmed automatically" in entry["reason"]
        await assert_still_serving(stack)
        assert counter.connections == 0


# -- row 2: bad or missing signature, unknown TopicArn --------------------------------------------
async def test_unknown_topic_arn_is_a_security_event_and_not_run(run_daemon, stack: Stack, provider: Provider) -> None:
    await run_daemon(topic_arns=("arn:aws:sns:us-east-1:123456789012:the-only-allowed-topic",))
    req = stack.request("Create", "Forged", resource_type="Custom::Test")
    with capture_logs() as logs:
        stack.publish(req)  # a real SNS envelope, from a topic outside the allowlist
        entry = await wait_for_event(logs, "security")
    assert "not in the allowlist" in entry["reason"]
    await wait_until_queue_empty(provider)
    assert await response_of(stack, req, timeout=1) is None
    assert handlers.started == []


async def test_unsigned_envelope_is_rejected_when_verifying(run_daemon, stack: Stack, provider: Provider) -> None:
    await run_daemon(verify_signatures=True)
    req = stack.request("Create", "Unsigned", resource_type="Custom::Test")
    envelope = {
        "Type": "Notification",
        "MessageId": "m-1",
        "TopicArn": provider.topic_arn,
        "Message": json.dumps(req),
        "Timestamp": "2026-01-01T00:00:00.000Z",
    }
    with capture_logs() as logs:
        send_raw(provider, json.dumps(envelope))
        entry = await wait_for_event(logs, "security")
    assert "signature" in entry["reason"].lower()
    assert await response_of(stack, req, timeout=1) is None
    assert handlers.started == []


async def test_raw_delivery_is_rejected_as_unverifiable_when_verifying(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    await run_daemon(verify_signatures=True)
    req = stack.request("Create", "Raw", resource_type="Custom::Test")
    with capture_logs() as logs:
        send_raw(provider, json.dumps(req))
        entry = await wait_for_event(logs, "security")
    assert "raw message delivery" in entry["reason"]
    await wait_until_queue_empty(provider)
    assert await response_of(stack, req, timeout=1) is None
    assert handlers.started == []


# -- row 3: missing required fields, but answerable ------------------------------------------------
@pytest.mark.parametrize("missing", ["ResourceType", "RequestType"])
async def test_request_missing_fields_gets_failed_naming_them(run_daemon, stack: Stack, missing: str) -> None:
    await run_daemon()
    req = stack.request("Create", "Incomplete", resource_type="Custom::Test")
    del req[missing]
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED"
    assert missing in resp["Reason"]
    assert handlers.started == []
    await assert_still_serving(stack)


async def test_request_type_destroy_gets_failed(run_daemon, stack: Stack) -> None:
    await run_daemon()
    req = stack.request("Destroy", "Odd", resource_type="Custom::Test")
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED" and "'Destroy'" in resp["Reason"]
    assert handlers.started == []


# -- row 4: ResponseURL outside the allowlist --------------------------------------------------------
@pytest.mark.parametrize(
    "make_url",
    [
        pytest.param(lambda c: "http://169.254.169.254/latest/meta-data/iam/security-credentials/", id="metadata"),
        pytest.param(lambda c: c.url("/bucket/key?X-Amz-Signature=abc"), id="localhost-listener"),
        pytest.param(lambda c: f"https://s3.amazonaws.com.evil.example:{c.port}/k", id="lookalike-s3"),
        pytest.param(
            lambda c: "http://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k", id="http-s3"
        ),
    ],
)
async def test_response_url_outside_allowlist_is_not_called(
    run_daemon, stack: Stack, provider: Provider, make_url: Any
) -> None:
    await run_daemon()
    with ConnectionCounter() as counter:
        req = stack.request("Create", "Proxy", resource_type="Custom::Test")
        req["ResponseURL"] = make_url(counter)
        with capture_logs() as logs:
            stack.publish(req)
            entry = await wait_for_event(logs, "security")
        assert "ResponseURL" in entry["reason"]
        assert "X-Amz-Signature" not in json.dumps(logs)
        await wait_until_queue_empty(provider)
        await assert_still_serving(stack)
        assert counter.connections == 0
    assert handlers.started == []


# -- row 5: unknown ResourceType ----------------------------------------------------------------------
async def test_unknown_resource_type_gets_failed(run_daemon, stack: Stack) -> None:
    await run_daemon()
    req = stack.request("Create", "Mystery", resource_type="Custom::Nobody")
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED"
    assert resp["Reason"] == "no handler for Custom::Nobody"
    await assert_still_serving(stack)


# -- last row: a ResourceType the operator did not name (built-in or entry point) ---------------------
@pytest.mark.parametrize(
    "resource_type", ["Custom::RandomSecret", "Custom::Command", "Custom::ElasticIpPool", "Custom::Wait"]
)
async def test_an_installed_handler_the_operator_did_not_name_is_not_served(
    run_daemon, stack: Stack, provider, resource_type: str
) -> None:
    ssm = provider.emulator.client("ssm")
    name = f"/unnamed/{stack.name}"
    await run_daemon()  # the test handlers and Custom::Echo are named; the other built-ins are not
    req = stack.request(
        "Create",
        "Uninvited",
        resource_type=resource_type,
        properties={"ParameterName": name, "Length": "16", "Size": "1", "Command": "x"},
    )
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED"
    assert resp["Reason"] == f"no handler for {resource_type}"
    assert "Data" not in resp
    assert ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"] == []
    await assert_still_serving(stack)


# -- row 6: handler raises / times out ----------------------------------------------------------------
async def test_handler_exception_gets_failed_with_its_message(run_daemon, stack: Stack) -> None:
    await run_daemon()
    req = stack.request("Create", "Boom", resource_type="Custom::Test", properties={"Raise": "disk on fire"})
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED"  # the type, the message, and where the traceback is
    assert resp["Reason"] == "RuntimeError: disk on fire (traceback in the provider's log: handler.raised)"
    assert resp["PhysicalResourceId"].startswith("cfn-provider-failed-create-")
    await assert_still_serving(stack)


@pytest.mark.parametrize("resource_type", ["Custom::Test", "Custom::AsyncTest"])
async def test_handler_past_its_deadline_gets_failed_in_time(run_daemon, stack: Stack, resource_type: str) -> None:
    await run_daemon()
    # ServiceTimeout 4 s: the handler gets about 3 s (1 s kept back to answer), then FAILED is sent
    req = stack.request(
        "Create", "Slow", resource_type=resource_type, properties={"ServiceTimeout": "4", "SleepSeconds": "30"}
    )
    stack.publish(req)
    resp = await response_of(stack, req, timeout=15)
    assert resp is not None, "no answer before the deadline"
    assert resp["Status"] == "FAILED"
    assert resp["Reason"].startswith("timed out after ") and resp["Reason"].endswith(" s")
    await assert_still_serving(stack)


# -- row 7: Delete for the failed-Create marker or an unknown id ----------------------------------------
async def test_rollback_delete_of_failed_create_succeeds_without_the_handler(run_daemon, stack: Stack) -> None:
    await run_daemon()
    create = stack.request("Create", "Doomed", resource_type="Custom::Test", properties={"Raise": "nope"})
    stack.publish(create)
    failed = await response_of(stack, create)
    assert failed["Status"] == "FAILED"
    handlers.started.clear()
    delete = stack.request(
        "Delete",
        "Doomed",
        resource_type="Custom::Test",
        physical_id=failed["PhysicalResourceId"],
        properties={"Raise": "would fail"},
    )
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp["Status"] == "SUCCESS"
    assert resp["PhysicalResourceId"] == failed["PhysicalResourceId"]
    assert handlers.started == []


async def test_delete_with_no_id_succeeds_without_the_handler(run_daemon, stack: Stack) -> None:
    await run_daemon()
    delete = stack.request("Delete", "Ghost", resource_type="Custom::Nobody")
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"]


# -- row 8: response over 4096 bytes --------------------------------------------------------------------
async def test_oversized_data_gets_failed_explaining_within_4096_bytes(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    await run_daemon()
    req = stack.request(
        "Create",
        "Big",
        resource_type="Custom::Test",
        properties={"ReturnJson": json.dumps({"PhysicalResourceId": "big-1"}), "DataSize": "5000"},
    )
    del req["ResourceProperties"]["ReturnJson"]
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp["Status"] == "FAILED"
    assert "4096" in resp["Reason"]
    body = provider.emulator.client("s3").get_object(Bucket=provider.bucket, Key=s3_keys(provider)[0])["Body"].read()
    assert len(body) <= 4096


async def test_long_reason_is_trimmed_to_fit(run_daemon, stack: Stack, provider: Provider) -> None:
    await run_daemon()
    req = stack.request("Create", "Wordy", resource_type="Custom::Test", properties={"Raise": "é" * 6000})
    stack.publish(req)
    resp = await response_of(stack, req)
    assert (
        resp["Status"] == "FAILED"
        and resp["Reason"].startswith("RuntimeError: éé")
        and resp["Reason"].endswith("[...]")
    )
    body = provider.emulator.client("s3").get_object(Bucket=provider.bucket, Key=s3_keys(provider)[0])["Body"].read()
    assert len(body) <= 4096


# -- row 9: expired ResponseURL (403) ------------------------------------------------------------------
@pytest.mark.parametrize("how", ["403-from-s3", "expired-before-sending"])
async def test_expired_response_url_is_logged_loudly_and_deleted(
    run_daemon, stack: Stack, provider: Provider, stub_s3, how: str
) -> None:
    await run_daemon(allow_response_urls=(provider.emulator.endpoint + "/", stub_s3.base_url))
    req = stack.request("Create", "TooLate", resource_type="Custom::Test")
    if how == "403-from-s3":
        stub_s3.fail_with(403)
        req["ResponseURL"] = stub_s3.url("late/1")
    else:
        req["ResponseURL"] = stub_s3.url("late/1", expires_in=-60)
    with capture_logs() as logs:
        stack.publish(req)
        entry = await wait_for_event(logs, "response.undeliverable")
        request_line = await wait_for_event(logs, "request")
    assert entry["log_level"] == "error"
    assert request_line["delivered"] is False
    assert request_line["attempts"] == (1 if how == "403-from-s3" else 0)
    await wait_until_queue_empty(provider)
    assert stub_s3.put_count("late/1") == (1 if how == "403-from-s3" else 0)
    await assert_still_serving(stack)

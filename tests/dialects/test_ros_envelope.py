"""MNS message forms: bare body, base64, topic notifications (JSON, XML) and their topic; each transport
looks only for its own forms (CloudFormation's unchanged on SQS)."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

from cfn_provider.pipeline.envelope import MNS_FORMS, SNS_FORMS, BadMessage, unwrap
from tests.dialects.conftest import ros_request
from tests.support.mns_server import notification_json, notification_xml

SENT = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
REQUEST = json.dumps(ros_request("Create", "https://ros.aliyuncs.com/cb?s=1"))
PUBLISHED_MS = int((SENT - dt.timedelta(seconds=5)).timestamp() * 1000)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "body",
    [
        REQUEST,  # SIMPLIFIED / bare
        b64(REQUEST),  # the MNS SDKs' default encoding
        "\n" + b64(REQUEST) + "\n",
    ],
)
def test_bare_and_base64(body):
    env = unwrap(body, "mns-id", SENT, MNS_FORMS)
    assert env.message == REQUEST and env.message_id == "mns-id" and env.timestamp == SENT and env.raw


@pytest.mark.parametrize("make", [notification_json, notification_xml])
@pytest.mark.parametrize("encode", [False, True])
def test_topic_notifications(make, encode):
    body = make(b64(REQUEST) if encode else REQUEST, publish_ms=PUBLISHED_MS)
    env = unwrap(body, "mns-id", SENT, MNS_FORMS)
    assert env.message == REQUEST and not env.raw  # a notification names its topic; unsigned: the policy decides
    assert env.topic_arn == "acs:mns::1234567890:topics/ros-topic"  # owner and name (no region in a notification)
    assert env.message_id != "mns-id"  # the notification's own MessageId
    assert env.timestamp == SENT - dt.timedelta(seconds=5)  # PublishTime


def test_base64_notification_and_future_publish_time():
    body = b64(notification_xml(REQUEST, publish_ms=PUBLISHED_MS + 3_600_000))
    env = unwrap(body, "mns-id", SENT, MNS_FORMS)
    assert env.message == REQUEST and env.timestamp == SENT  # never later than it was enqueued


@pytest.mark.parametrize(
    "body, reason",
    [
        ("<xml/>", "body is not JSON"),  # XML, but no notification: as before
        ("<Notification><Message>" + "x" * 10, "body is not JSON"),  # broken XML
        (
            '<?xml version="1.0"?><!DOCTYPE n [<!ENTITY a "aaaa">]><Notification><Message>&a;</Message></Notification>',
            "body is not JSON",
        ),  # no entity games
        ("<Notification><TopicName>t</TopicName></Notification>", "no Message"),
        (b64("hello world"), "body is not JSON"),  # base64 of something else: as before
        (b64(b64(REQUEST)), "body is not JSON"),  # decoded once only
        (b64("{not json"), "base64 body: body is not JSON"),
        ("this is not json {", "body is not JSON"),
        (json.dumps({"TopicName": "t", "Message": ""}), "no Message"),
    ],
)
def test_rejected_forms(body, reason):
    with pytest.raises(BadMessage, match=reason):
        unwrap(body, "mns-id", SENT, MNS_FORMS)


def test_a_notification_without_a_topic_names_none_that_could_be_allowed():
    env = unwrap(json.dumps({"TopicName": 5, "Message": REQUEST}), "mns-id", SENT, MNS_FORMS)
    assert env.topic_arn == "acs:mns:::topics/" and not env.raw


@pytest.mark.parametrize(
    "body",
    [
        notification_json(REQUEST),
        notification_xml(REQUEST),
        b64(REQUEST),
        b64(notification_json(REQUEST)),
    ],
)
def test_mns_forms_are_not_messages_on_sqs(body):
    """On SNS/SQS an MNS notification or a base64 body is no message at all (the transport decides)."""
    with pytest.raises(BadMessage):
        unwrap(body, "sqs-id", SENT, SNS_FORMS)


def test_an_sns_envelope_is_not_a_message_on_mns():
    envelope = json.dumps(
        {
            "Type": "Notification",
            "MessageId": "m",
            "TopicArn": "arn:aws:sns:us-east-1:1:t",
            "Message": REQUEST,
            "Timestamp": "2026-01-01T00:00:00.000Z",
        }
    )
    with pytest.raises(BadMessage, match="neither an MNS topic notification nor a request"):
        unwrap(envelope, "mns-id", SENT, MNS_FORMS)


def test_sns_forms_unchanged():
    with pytest.raises(BadMessage, match="neither an SNS notification nor a CloudFormation request"):
        unwrap(json.dumps({"hello": "world"}), "id", SENT)
    with pytest.raises(BadMessage, match=r"body is not JSON \(JSONDecodeError\)"):
        unwrap("<xml/>", "id", SENT)

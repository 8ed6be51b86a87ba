"""cfn_provider.pipeline.envelope: an SQS body -> the CloudFormation request text it carries, or BadMessage."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading

import pytest

from cfn_provider.pipeline.envelope import BadMessage, unwrap

TOPIC = "arn:aws:sns:us-east-1:123456789012:cfn-provider"
SENT_AT = dt.datetime(2024, 5, 1, 11, 59, 59, tzinfo=dt.UTC)
REQUEST = {
    "RequestType": "Create",
    "ResponseURL": "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=x",
    "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid",
    "RequestId": "req-1",
    "LogicalResourceId": "Thing",
    "ResourceType": "Custom::Echo",
    "ResourceProperties": {"Colour": "blue"},
}


def notification(**overrides):
    doc = {
        "Type": "Notification",
        "MessageId": "sns-msg-1",
        "TopicArn": TOPIC,
        "Message": json.dumps(REQUEST),
        "Timestamp": "2024-05-01T12:00:00.123Z",
        "SignatureVersion": "1",
        "Signature": "c2lnbmF0dXJl",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/cert.pem",
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def unwrap_doc(doc) -> object:
    return unwrap(json.dumps(doc), "sqs-msg-1", SENT_AT)


# --- accepted shapes --------------------------------------------------------------------


def test_sns_notification_yields_the_request_and_envelope_fields():
    doc = notification()
    env = unwrap_doc(doc)
    assert json.loads(env.message) == REQUEST
    assert env.message_id == "sns-msg-1"
    assert env.topic_arn == TOPIC
    assert not env.raw
    assert env.timestamp == dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC)
    assert env.document == doc  # kept whole for the signature check


def test_sns_message_text_is_passed_through_unchanged():
    text = '{"RequestType":"Create",  "RequestId":"r\\u00e9"}'  # odd spacing and escapes survive
    assert unwrap_doc(notification(Message=text)).message == text


def test_timestamp_without_zone_is_taken_as_utc():
    env = unwrap_doc(notification(Timestamp="2024-05-01T12:00:00"))
    assert env.timestamp == dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_raw_delivery_is_the_bare_request():
    body = json.dumps(REQUEST)
    env = unwrap(body, "sqs-msg-1", SENT_AT)
    assert env.raw and env.topic_arn is None
    assert env.message == body
    assert env.message_id == "sqs-msg-1"  # no SNS id: the SQS one
    assert env.timestamp == SENT_AT  # no SNS timestamp: when SQS got it


@pytest.mark.parametrize("field", ["RequestType", "ResponseURL"])
def test_raw_request_recognised_by_either_request_field(field):
    body = json.dumps({field: REQUEST[field]})
    assert unwrap(body, "sqs-msg-1", SENT_AT).raw


# --- not a message at all ---------------------------------------------------------------


@pytest.mark.parametrize("body", ["", "not json", "{", "{'single': 'quotes'}", "\x00"])
def test_body_that_is_not_json_is_bad(body):
    with pytest.raises(BadMessage, match="not JSON"):
        unwrap(body, "sqs-msg-1", SENT_AT)


def test_pathologically_nested_json_is_bad_not_a_crash():
    with pytest.raises(BadMessage, match="not JSON"):
        unwrap("[" * 100_000 + "]" * 100_000, "sqs-msg-1", SENT_AT)


@pytest.mark.parametrize(
    "body, kind",
    [("[]", "list"), ("[1, 2]", "list"), ('"text"', "str"), ("3", "int"), ("null", "NoneType"), ("true", "bool")],
)
def test_json_that_is_not_an_object_is_bad(body, kind):
    with pytest.raises(BadMessage, match=f"JSON {kind}"):
        unwrap(body, "sqs-msg-1", SENT_AT)


@pytest.mark.parametrize(
    "doc", [{}, {"hello": "world"}, {"Message": "x"}, {"Type": "Notification"}, {"StackId": "s", "RequestId": "r"}]
)
def test_object_of_the_wrong_shape_is_bad(doc):
    with pytest.raises(BadMessage, match="neither an SNS notification nor a CloudFormation request"):
        unwrap_doc(doc)


# --- SNS control messages and other types -----------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        type(self).hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def subscribe_server():
    _Recorder.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.hits
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
def test_subscription_control_messages_are_bad_and_never_confirmed(kind, subscribe_server):
    base, hits = subscribe_server
    doc = notification(
        Type=kind, Message="You have chosen to subscribe...", Token="tok", SubscribeURL=f"{base}/confirm?Token=tok"
    )
    with pytest.raises(BadMessage) as info:
        unwrap_doc(doc)
    message = str(info.value)
    assert kind in message and TOPIC in message
    assert "confirm-subscription" in message  # tells the operator what to do instead
    assert hits == []  # nothing fetched the SubscribeURL


@pytest.mark.parametrize("kind", ["Mystery", "notification", "", 7, None])
def test_unknown_sns_type_is_bad(kind):
    with pytest.raises(BadMessage, match="not Notification"):
        unwrap_doc({**notification(), "Type": kind})


# --- required envelope fields -----------------------------------------------------------


@pytest.mark.parametrize("field", ["MessageId", "TopicArn", "Timestamp"])
def test_notification_missing_a_required_field_is_bad_and_names_it(field):
    with pytest.raises(BadMessage, match=f"lacks string fields: {field}"):
        unwrap_doc(notification(**{field: None}))


@pytest.mark.parametrize("field", ["Type", "Message"])
def test_notification_missing_type_or_message_is_bad(field):
    with pytest.raises(BadMessage):
        unwrap_doc(notification(**{field: None}))


@pytest.mark.parametrize("field", ["MessageId", "TopicArn", "Message", "Timestamp"])
@pytest.mark.parametrize("value", ["", 42, ["x"], {"x": 1}])
def test_notification_field_empty_or_not_a_string_is_bad_and_named(field, value):
    with pytest.raises(BadMessage, match=field):
        unwrap_doc(notification(**{field: value}))


@pytest.mark.parametrize("stamp", ["yesterday", "2024-13-01T00:00:00Z", "2024-05-01T25:00:00Z", "12:00"])
def test_bad_timestamp_is_bad(stamp):
    with pytest.raises(BadMessage, match="Timestamp"):
        unwrap_doc(notification(Timestamp=stamp))

"""Unwrap a queue message body into the custom-resource request text it carries.

Which forms are looked for is the transport's (`forms`), never the body's:
- SNS/SQS (SNS_FORMS): the SNS JSON envelope (signed, names its TopicArn) and raw message
  delivery (the bare request, no signature, no TopicArn).
- MNS (MNS_FORMS), all unsigned: a topic's notification in its JSON or XML `<Notification>`
  format, whose Message is the request (its topic is named `acs:mns::OWNER:topics/NAME`,
  cfn_provider.trust.topics: a notification does not name its region), and the bare request
  (a topic's SIMPLIFIED format, or a message sent straight to the queue), either of them
  base64-encoded (the MNS SDKs' default).
A body in another transport's form is not a message of this one. Which one it is within the
transport comes from the body's shape; whether a bare (raw) request or a topic is acceptable
is the trust policy's decision, not ours.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ..errors import InputError
from ..trust.topics import notification_topic
from .request import read_json

SNS_FORMS, MNS_FORMS = "sns", "mns"
_ENVELOPE_FIELDS = ("Type", "MessageId", "TopicArn", "Message", "Timestamp")
_STR_ONLY = {str}
_SNS_CONTROL_TYPES = ("SubscriptionConfirmation", "UnsubscribeConfirmation")
_XML_DECLARATIONS = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)  # no entity tricks in a notification


class BadMessage(InputError, ValueError):
    """The body is not an SNS notification nor a raw CloudFormation request."""


class Envelope(NamedTuple):
    """What a message body unwraps to (a NamedTuple: immutable, and made for every message in a
    third of a frozen dataclass's time)."""

    message: str  # the CloudFormation request, still JSON text
    message_id: str  # SNS MessageId, or the SQS message id for raw delivery
    timestamp: dt.datetime  # when SNS accepted it (raw: when SQS did)
    topic_arn: str | None = None  # None for raw delivery (a bare request); MNS: cfn_provider.trust.topics
    document: Mapping[str, Any] = MappingProxyType({})  # the full envelope, for signature checks

    @property
    def raw(self) -> bool:
        return self.topic_arn is None

    def __repr__(self) -> str:  # without the document (its Signature and the whole request again)
        return f"Envelope(message_id={self.message_id!r}, topic_arn={self.topic_arn!r}, timestamp={self.timestamp!r})"


def parse_timestamp(value: str) -> dt.datetime:
    """SNS timestamps look like 2024-05-01T12:00:00.123Z."""
    stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)


def unwrap(
    body: str, sqs_message_id: str, sent_at: dt.datetime, forms: str = SNS_FORMS, _decoded: bool = False
) -> Envelope:
    """Return the envelope for a message body in one of `forms` (the transport's), or raise
    BadMessage saying why it is not one."""
    mns = forms == MNS_FORMS
    try:
        # Every envelope field the daemon reads or verifies must be a string, so an integer past 64
        # bits (a float to orjson) changes nothing here: a number of either type is refused alike.
        doc = read_json(body, exact_integers=False)
    except (ValueError, RecursionError) as exc:
        envelope = _xml_or_base64(body, sqs_message_id, sent_at, _decoded) if mns else None
        if envelope is None:
            raise BadMessage(f"body is not JSON ({type(exc).__name__})") from None
        return envelope
    if not isinstance(doc, dict):
        raise BadMessage(f"body is a JSON {type(doc).__name__}, not an object")

    if not mns and "Type" in doc and "Message" in doc:
        return _from_sns(doc)
    if mns and "Message" in doc and ("TopicName" in doc or "TopicOwner" in doc):
        return _from_mns(doc, sqs_message_id, sent_at)
    if "RequestType" in doc or "ResponseURL" in doc:
        return Envelope(message=body, message_id=sqs_message_id, timestamp=sent_at, document=doc)
    if mns:
        raise BadMessage("body is neither an MNS topic notification nor a request")
    raise BadMessage("body is neither an SNS notification nor a CloudFormation request")


def _from_sns(doc: dict[str, Any]) -> Envelope:
    kind = doc.get("Type")
    if kind in _SNS_CONTROL_TYPES:
        raise BadMessage(
            f"SNS {kind} for {doc.get('TopicArn')!r} is not confirmed automatically; "
            "confirm the subscription with `aws sns confirm-subscription` if it is yours"
        )
    if kind != "Notification":
        raise BadMessage(f"SNS message Type {kind!r} is not Notification")
    values = tuple(map(doc.get, _ENVELOPE_FIELDS))
    if not all(values) or set(map(type, values)) != _STR_ONLY:  # the usual envelope: no Python loop
        bad = [k for k, v in zip(_ENVELOPE_FIELDS, values, strict=True) if not isinstance(v, str) or not v]
        if bad:
            raise BadMessage(f"SNS envelope lacks string fields: {', '.join(bad)}")
    try:
        stamp = parse_timestamp(doc["Timestamp"])
    except ValueError:
        raise BadMessage(f"SNS Timestamp {doc['Timestamp'][:40]!r} is not ISO 8601") from None
    return Envelope(doc["Message"], doc["MessageId"], stamp, doc["TopicArn"], doc)  # in field order: a third faster


def _xml_or_base64(body: str, message_id: str, sent_at: dt.datetime, decoded: bool) -> Envelope | None:
    """An MNS XML <Notification>, or a base64 body (decoded once); None when it is neither."""
    text = body.strip()
    if text.startswith("<") and not _XML_DECLARATIONS.search(text):
        try:
            root = ElementTree.fromstring(text)
        except (ElementTree.ParseError, ValueError, RecursionError):
            return None
        if root.tag.rsplit("}", 1)[-1] != "Notification":
            return None
        return _from_mns({child.tag.rsplit("}", 1)[-1]: child.text or "" for child in root}, message_id, sent_at)
    inner = None if decoded else _base64_text(text)
    if inner is None or inner.lstrip()[:1] not in ("{", "<"):
        return None
    try:
        return unwrap(inner, message_id, sent_at, MNS_FORMS, _decoded=True)
    except BadMessage as exc:
        raise BadMessage(f"base64 body: {exc}") from None


def _base64_text(text: str) -> str | None:
    try:
        return base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _from_mns(doc: Mapping[str, Any], message_id: str, sent_at: dt.datetime) -> Envelope:
    """An MNS topic notification (JSON or XML): its Message is the request, maybe base64."""
    message = doc.get("Message")
    if not isinstance(message, str) or not message.strip():
        raise BadMessage("MNS notification has no Message text")
    if not message.lstrip().startswith("{"):
        message = _base64_text(message.strip()) or message
    try:  # published before it was enqueued: never later than that
        stamp = min(sent_at, dt.datetime.fromtimestamp(int(doc["PublishTime"]) / 1000, dt.UTC))
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        stamp = sent_at
    notification_id = doc.get("MessageId")
    if isinstance(notification_id, str) and notification_id:
        message_id = notification_id
    owner, name = doc.get("TopicOwner"), doc.get("TopicName")
    topic = notification_topic(owner if isinstance(owner, str) else "", name if isinstance(name, str) else "")
    return Envelope(message=message, message_id=message_id, timestamp=stamp, topic_arn=topic, document=doc)

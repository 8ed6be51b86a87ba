"""Unwrap an SQS message body into the CloudFormation request text it carries.

Two deliveries exist: the SNS JSON envelope (signed, names its TopicArn) and raw message
delivery (the bare request, no signature, no TopicArn). Which one it is comes from the
body's shape; whether raw delivery is acceptable is the trust policy's decision, not ours.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

_ENVELOPE_FIELDS = ("Type", "MessageId", "TopicArn", "Message", "Timestamp")
_SNS_CONTROL_TYPES = ("SubscriptionConfirmation", "UnsubscribeConfirmation")


class BadMessage(ValueError):
    """The body is not an SNS notification nor a raw CloudFormation request."""


@dataclass(frozen=True)
class Envelope:
    message: str  # the CloudFormation request, still JSON text
    message_id: str  # SNS MessageId, or the SQS message id for raw delivery
    timestamp: dt.datetime  # when SNS accepted it (raw: when SQS did)
    topic_arn: str | None = None  # None for raw delivery
    document: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the full envelope, for signature checks

    @property
    def raw(self) -> bool:
        return self.topic_arn is None


def parse_timestamp(value: str) -> dt.datetime:
    """SNS timestamps look like 2024-05-01T12:00:00.123Z."""
    stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)


def unwrap(body: str, sqs_message_id: str, sent_at: dt.datetime) -> Envelope:
    """Return the envelope for an SQS body, or raise BadMessage saying why it is not one."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadMessage(f"body is not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise BadMessage(f"body is a JSON {type(doc).__name__}, not an object")

    if "Type" in doc and "Message" in doc:
        return _from_sns(doc)
    if "RequestType" in doc or "ResponseURL" in doc:
        return Envelope(message=body, message_id=sqs_message_id, timestamp=sent_at, document=doc)
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
    bad = [k for k in _ENVELOPE_FIELDS if not isinstance(doc.get(k), str) or not doc.get(k)]
    if bad:
        raise BadMessage(f"SNS envelope lacks string fields: {', '.join(bad)}")
    try:
        stamp = parse_timestamp(doc["Timestamp"])
    except ValueError:
        raise BadMessage(f"SNS Timestamp {doc['Timestamp'][:40]!r} is not ISO 8601") from None
    return Envelope(
        message=doc["Message"],
        message_id=doc["MessageId"],
        timestamp=stamp,
        topic_arn=doc["TopicArn"],
        document=doc,
    )

"""`cfn-provider redrive`: move messages from the dead-letter queue back to the queue.

For after a fix: messages the daemon could not take (a handler that crashed the process,
an outage longer than maxReceiveCount allowed) go back for another try. Requests already
answered are recognised by the idempotency store and not run twice. The daemons' dead-letter
watcher (cfn_provider.intake.dead_letters) answers FAILED to requests left there and deletes them, so what
`redrive` finds is mostly what it could not answer: messages that failed admission, that are
not requests, or whose request is still held by a worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..logs import redact_text
from ..transports.queue import dead_letter_target


@dataclass
class Moved:
    message_id: str
    preview: str


def dead_letter_queue_url(sqs: Any, queue_url: str) -> str:
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"]).get("Attributes", {})
    if "RedrivePolicy" not in attrs:
        raise ValueError(f"{queue_url} has no RedrivePolicy, so no dead-letter queue; give --dlq-url")
    account, name = dead_letter_target(attrs["RedrivePolicy"])
    url: str = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    return url


def preview(body: str, width: int = 160) -> str:
    """One redacted line about a message: its request's ids when it has them."""
    try:
        doc = json.loads(body)
        inner = json.loads(doc["Message"]) if isinstance(doc, dict) and "Message" in doc else doc
        if isinstance(inner, dict) and "RequestType" in inner:
            return (
                f"{inner.get('RequestType')} {inner.get('ResourceType')} {inner.get('LogicalResourceId')} "
                f"RequestId={inner.get('RequestId')}"
            )
    except (ValueError, TypeError, KeyError):
        pass
    text = redact_text(" ".join(body.split()))
    return text if len(text) <= width else text[:width] + "..."


def redrive(sqs: Any, queue_url: str, dlq_url: str, limit: int, dry_run: bool, report: Callable[[Moved], None]) -> int:
    """Move up to `limit` messages (all when 0); return how many were moved (or would be)."""
    moved, seen = 0, set()
    while not limit or moved < limit:
        batch = sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=min(10, (limit - moved) if limit else 10),
            WaitTimeSeconds=1,
            VisibilityTimeout=30,
        ).get("Messages", [])
        fresh = [m for m in batch if m["MessageId"] not in seen]
        if dry_run:  # only looking: every message received goes back at once
            for message in batch:
                sqs.change_message_visibility(
                    QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
        if not fresh:
            break
        for message in fresh:
            seen.add(message["MessageId"])
            if not dry_run:
                sqs.send_message(QueueUrl=queue_url, MessageBody=message["Body"])
                sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
            report(Moved(message["MessageId"], preview(message["Body"])))
            moved += 1
    return moved

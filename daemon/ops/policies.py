"""The provider's resource and IAM policies, as `bootstrap` writes and prints them.

They are deploy/provider.yaml's, statement for statement (tests/deploy checks the daemon's
actions against the template's role), so a provider made by `bootstrap` is held to the same
standard as one made by the template:

- topic: only this account publishes (CloudFormation publishes with the stack operation's
  credentials: there is no service principal to name), other accounts are denied, only the
  provider's queue may subscribe (a foreign subscription would receive every ResponseURL),
  plain http is denied;
- queue: only SNS, for this topic, may send; plain http denied (the dead-letter queue: the same
  deny);
- the daemon's role: exactly the calls the daemon makes, on exact ARNs.

Statements are merged into an existing policy by Sid: ours are put in (replacing a statement
with the same Sid, or one an older bootstrap wrote), anything else an organisation added stays.
"""

from __future__ import annotations

import json
from typing import Any

# Sids written by earlier versions of bootstrap: replaced, not kept beside the new statements
_OLD_SIDS = {"AllowServiceTokenTopicOnly"}


def _deny_plain_http(action: str, resource: str) -> dict[str, Any]:
    return {
        "Sid": "TlsOnly",
        "Effect": "Deny",
        "Principal": "*",
        "Action": action,
        "Resource": resource,
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def topic_statements(topic_arn: str, queue_arn: str, account: str, partition: str) -> list[dict[str, Any]]:
    return [
        {
            "Sid": "ThisAccountMayPublish",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
            "Action": "sns:Publish",
            "Resource": topic_arn,
        },
        {
            "Sid": "NoPublishersFromOtherAccounts",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sns:Publish",
            "Resource": topic_arn,
            "Condition": {"StringNotEquals": {"aws:PrincipalAccount": account}},
        },
        {
            "Sid": "DeliverOnlyToTheQueue",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sns:Subscribe",
            "Resource": topic_arn,
            "Condition": {"StringNotEquals": {"sns:Endpoint": queue_arn}},
        },
        _deny_plain_http("sns:Publish", topic_arn),
    ]


def queue_statements(queue_arn: str, topic_arn: str) -> list[dict[str, Any]]:
    """Only SNS, only for this topic, only SendMessage; nothing over plain http."""
    return [
        {
            "Sid": "TopicMayDeliver",
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}},
        },
        _deny_plain_http("sqs:*", queue_arn),
    ]


def dlq_statements(dlq_arn: str) -> list[dict[str, Any]]:
    return [_deny_plain_http("sqs:*", dlq_arn)]


def merged(current: str | None, ours: list[dict[str, Any]]) -> dict[str, Any]:
    """`current` (a policy document's JSON, or None) with `ours` put in by Sid, others kept in order."""
    doc: dict[str, Any] = {"Version": "2012-10-17", "Statement": []}
    if current:
        try:
            loaded = json.loads(current)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            doc = loaded
    theirs = doc.get("Statement", [])
    theirs = [theirs] if isinstance(theirs, dict) else list(theirs)
    replaced = {s["Sid"] for s in ours} | _OLD_SIDS
    kept = [s for s in theirs if not (isinstance(s, dict) and s.get("Sid") in replaced)]
    return {**doc, "Version": doc.get("Version", "2012-10-17"), "Statement": kept + ours}


def same_policy(current: str | None, wanted: dict[str, Any]) -> bool:
    if not current:
        return False
    try:
        return bool(_normalise(json.loads(current)) == _normalise(wanted))
    except ValueError:
        return False


def _normalise(doc: Any) -> Any:
    """IAM returns single-element lists as scalars and vice versa; compare without caring."""
    if isinstance(doc, dict):
        return {k: _normalise(v) for k, v in doc.items()}
    if isinstance(doc, list):
        items = [_normalise(v) for v in doc]
        return items[0] if len(items) == 1 else items
    return doc


def daemon_policy(
    queue_arn: str, dlq_arn: str, table_arn: str | None = None, poll_index: str = "polls"
) -> dict[str, Any]:
    """The daemon's role, least privilege: what daemon/transports/queue.py and daemon/stores/dynamodb.py
    call, on exact ARNs. GetQueueAttributes on the queue only (its RedrivePolicy); the dead-letter
    watcher receives, deletes and hides on the DLQ. Nothing on S3 or SNS."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ConsumeServiceTokenQueue",
            "Effect": "Allow",
            "Action": [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:ChangeMessageVisibility",
                "sqs:GetQueueAttributes",
            ],
            "Resource": queue_arn,
        },
        {
            "Sid": "AnswerDeadLetters",
            "Effect": "Allow",
            "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"],
            "Resource": dlq_arn,
        },
    ]
    if table_arn:
        statements += [
            {
                "Sid": "IdempotencyRecords",
                "Effect": "Allow",
                "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
                "Resource": table_arn,
            },
            {
                "Sid": "DuePolls",
                "Effect": "Allow",
                "Action": ["dynamodb:Query"],
                "Resource": f"{table_arn}/index/{poll_index}",
            },
        ]
    return {"Version": "2012-10-17", "Statement": statements}

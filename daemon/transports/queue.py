"""The queue the daemon consumes, as the pipeline sees it: SQS here, MNS in cfn_provider.transports.mns."""

from __future__ import annotations

import datetime as dt
import json
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Protocol

import aiobotocore.session
from aiobotocore.config import AioConfig

# botocore's standard retry mode: unlike the legacy default, it retries SQS's throttling answers
# (`RequestThrottled`, HTTP 400 in SQS's JSON protocol), so a throttled delete or visibility change
# is tried again in the call instead of costing the message one of its receives. 3 attempts (the
# mode's default) keep an unreachable queue's first failed receive within a few seconds, for `check`.
SQS_CLIENT_CONFIG = AioConfig(retries={"mode": "standard", "max_attempts": 3})


@dataclass
class Message:
    id: str
    body: str
    receipt: str  # the latest receipt handle (MNS hands out a new one on every visibility change)
    sent_at: dt.datetime
    receive_count: int = 1


class Queue(Protocol):
    url: str
    max_batch: int  # messages one receive may return
    max_delete_batch: int  # messages one delete_batch may take

    async def receive(self, max_messages: int, wait_seconds: int, visibility_timeout: int) -> list[Message]: ...
    async def delete(self, message: Message) -> None: ...
    async def delete_batch(self, messages: list[Message]) -> dict[int, str]:
        """Delete them in one call; the entries that failed, by index, with the queue's reason.
        Raises when the call as a whole failed."""

    async def set_visibility(self, message: Message, seconds: int) -> None: ...
    async def has_dead_letter_queue(self) -> bool | None: ...


class SqsQueue:
    """An SQS queue through aiobotocore; endpoints follow AWS_ENDPOINT_URL[_SQS]."""

    max_batch = max_delete_batch = 10

    def __init__(self, client: Any, url: str):
        self.client, self.url = client, url

    @classmethod
    async def open(
        cls, session: aiobotocore.session.AioSession, url: str, region: str | None, exit_stack: AsyncExitStack
    ) -> SqsQueue:
        client = await exit_stack.enter_async_context(
            session.create_client("sqs", region_name=region, config=SQS_CLIENT_CONFIG)
        )
        return cls(client, url)

    async def receive(self, max_messages: int, wait_seconds: int, visibility_timeout: int) -> list[Message]:
        resp = await self.client.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_seconds,
            VisibilityTimeout=visibility_timeout,
            MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
        )
        return [_message(m) for m in resp.get("Messages", [])]

    async def delete(self, message: Message) -> None:
        await self.client.delete_message(QueueUrl=self.url, ReceiptHandle=message.receipt)

    async def delete_batch(self, messages: list[Message]) -> dict[int, str]:
        resp = await self.client.delete_message_batch(
            QueueUrl=self.url, Entries=[{"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(messages)]
        )
        return {int(f["Id"]): f"{f.get('Code', '?')}: {f.get('Message', '')}".strip() for f in resp.get("Failed", [])}

    async def set_visibility(self, message: Message, seconds: int) -> None:
        await self.client.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=message.receipt, VisibilityTimeout=seconds
        )

    async def dead_letter_queue(self) -> SqsQueue | None:
        """The queue's dead-letter queue (from its RedrivePolicy), on this client; None when it has
        none. Raises when the attributes cannot be read."""
        resp = await self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["RedrivePolicy"])
        policy = resp.get("Attributes", {}).get("RedrivePolicy")
        if not policy:
            return None
        account, name = dead_letter_target(policy)
        # SQS wants the dead-letter queue in the queue's own account and region: its URL is the
        # queue's with the account and name replaced (no sqs:GetQueueUrl permission needed)
        base = self.url.rstrip("/").rsplit("/", 2)[0]
        return SqsQueue(self.client, f"{base}/{account}/{name}")

    async def has_dead_letter_queue(self) -> bool | None:
        """True/False from the queue's RedrivePolicy; None when it cannot be read."""
        try:
            resp = await self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["RedrivePolicy"])
        except Exception:  # noqa: BLE001 - e.g. no sqs:GetQueueAttributes permission
            return None
        return bool(resp.get("Attributes", {}).get("RedrivePolicy"))


def dead_letter_target(redrive_policy: str) -> tuple[str, str]:
    """(account, queue name) of the dead-letter queue a RedrivePolicy (JSON) names."""
    arn = json.loads(redrive_policy)["deadLetterTargetArn"]
    parts = arn.split(":")
    return parts[4], parts[5]


def _message(raw: dict[str, Any]) -> Message:
    attrs = raw.get("Attributes", {})
    sent_ms = int(attrs.get("SentTimestamp") or time.time() * 1000)
    return Message(
        id=raw["MessageId"],
        body=raw.get("Body", ""),
        receipt=raw["ReceiptHandle"],
        sent_at=dt.datetime.fromtimestamp(sent_ms / 1000, dt.UTC),
        receive_count=int(attrs.get("ApproximateReceiveCount") or 1),
    )

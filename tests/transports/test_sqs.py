"""The SQS transport, against a real moto server behind the fault proxy."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack

import aiobotocore.session

from cfn_provider.transports.queue import SqsQueue
from tests.support.fault_proxy import FaultProxy, Schedule


class ThrottleFirst(Schedule):
    """Throttles the first `n` calls of `operation`, passes everything else."""

    def __init__(self, operation: str, n: int):
        super().__init__(seed=0)
        self.operation, self.left = operation, n

    def decide(self, operation: str) -> tuple[str, float]:
        if operation == self.operation and self.left > 0:
            self.left -= 1
            return "throttle", 0.0
        return "pass", 0.0


async def test_throttled_delete_and_visibility_change_are_retried_in_the_call(emulator, monkeypatch):
    """SQS answers RequestThrottled (HTTP 400); botocore's legacy retry mode gives up on it at once,
    which would cost the message a receive. The transport's client retries it within the call."""
    sqs = emulator.client("sqs")
    url = sqs.create_queue(QueueName=f"throttled-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    port = int(emulator.endpoint.rsplit(":", 1)[1])
    for operation in ("ChangeMessageVisibility", "DeleteMessage"):
        schedule = ThrottleFirst(operation, 2)
        with FaultProxy("sqs", port, schedule) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", proxy.url)
            async with AsyncExitStack() as stack:
                queue = await SqsQueue.open(aiobotocore.session.get_session(), url, "us-east-1", stack)
                [message] = await queue.receive(1, 1, 30)
                if operation == "DeleteMessage":
                    await queue.delete(message)
                else:
                    await queue.set_visibility(message, 0)
            tally = proxy.tally()
        assert tally[(operation, "throttle")] == 2, tally
        assert tally[(operation, "pass")] == 1, tally
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"

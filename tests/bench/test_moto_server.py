"""bench/moto_server.py's two cuts of moto's whole-queue passes answer as moto itself does."""

from __future__ import annotations

import time

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import Queue, SQSBackend

from bench import moto_server


@pytest.fixture
def patched(monkeypatch):
    """moto with the bench's patches, undone afterwards."""
    for owner, name in (
        (Queue, "attributes"),
        (SQSBackend, "send_message"),
        (SQSBackend, "is_message_valid_based_on_retention_period"),
    ):
        monkeypatch.setattr(owner, name, owner.__dict__[name])  # restored at teardown
    moto_server._cheap_retention_check()
    moto_server._cheap_send()
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def test_a_message_past_its_retention_period_is_not_received(patched):
    url = patched.create_queue(QueueName="short", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    patched.send_message(QueueUrl=url, MessageBody="kept")
    assert [m["Body"] for m in patched.receive_message(QueueUrl=url)["Messages"]] == ["kept"]
    patched.send_message(QueueUrl=url, MessageBody="old")
    from moto.sqs.models import sqs_backends

    [message] = [m for m in sqs_backends["123456789012"]["us-east-1"].get_queue("short")._messages if m.body == "old"]
    message.sent_timestamp = int((time.time() - 61) * 1000)
    assert patched.receive_message(QueueUrl=url).get("Messages", []) == []


@pytest.mark.parametrize("dedup", [None, "true", "false"])
def test_content_based_deduplication_still_dedups_as_configured(patched, dedup):
    attributes = {"FifoQueue": "true", **({"ContentBasedDeduplication": dedup} if dedup else {})}
    url = patched.create_queue(QueueName=f"q-{dedup}.fifo", Attributes=attributes)["QueueUrl"]
    for _ in range(2):
        try:
            patched.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
        except patched.exceptions.ClientError:
            pass  # no deduplication id and none derived: moto refuses the send, as SQS does
    counted = int(
        patched.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]["ApproximateNumberOfMessages"]
    )
    assert counted == (1 if dedup == "true" else 0)


def test_get_queue_attributes_still_counts_the_messages(patched):
    url = patched.create_queue(QueueName="counted")["QueueUrl"]
    for i in range(3):
        patched.send_message(QueueUrl=url, MessageBody=str(i))
    patched.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
    got = patched.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (got["ApproximateNumberOfMessages"], got["ApproximateNumberOfMessagesNotVisible"]) == ("2", "1")

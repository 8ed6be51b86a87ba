"""A stand-in for AWS on this machine: moto's server, plus a CloudFormation look-alike.

Used by `cfn-provider demo` and the tests. Everything goes over real HTTP on 127.0.0.1:
SNS publishes into a real SQS subscription, responses land in S3 through real
presigned PUT URLs, exactly the path a real stack takes.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

REGION = "us-east-1"
ACCOUNT = "123456789012"
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-key-not-real"}


def _close_sqs_races() -> None:
    """Real SQS has neither of these races in moto's SQS, and either one turns a run into a wait
    for a visibility timeout (or a duplicate delivery):
    - `Queue.delete_message` rebuilds the queue's message list without the lock `add_message`
      takes, so two deletes at once, or a delete racing an SNS delivery, can bring a deleted
      message back or drop a new one;
    - `receive_message` checks that a message is visible and then marks it received, unlocked,
      so two concurrent receives (the daemon runs several while the queue is busy) can both be
      handed the same message.
    Deletes take the queue's lock; receives take one lock and let go of it while they long-poll."""
    global _races_closed
    if _races_closed:
        return
    _races_closed = True
    from moto.sqs.models import Queue, SQSBackend

    unlocked_delete = Queue.delete_message

    def delete_message(self: Queue, receipt_handle: str) -> None:
        with self._messages_lock:
            unlocked_delete(self, receipt_handle)

    gate, holding = threading.Lock(), threading.local()
    unlocked_receive, unlocked_wait = SQSBackend.receive_message, Queue.wait_for_messages

    def receive_message(self: SQSBackend, *args: Any, **kwargs: Any) -> Any:
        with gate:
            holding.gate = True
            try:
                return unlocked_receive(self, *args, **kwargs)
            finally:
                holding.gate = False

    def wait_for_messages(self: Queue, timeout: int) -> None:
        if not getattr(holding, "gate", False):
            return unlocked_wait(self, timeout)
        gate.release()  # other receives may run while this one long-polls
        try:
            unlocked_wait(self, timeout)
        finally:
            gate.acquire()

    # moto's methods are replaced on purpose (the races above); mypy objects to assigning to a method
    Queue.delete_message = delete_message  # type: ignore[method-assign]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


_races_closed = False


class Emulator:
    """moto's server on 127.0.0.1 with an OS-chosen port (moto's SQS races closed: `_close_sqs_races`)."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer  # an optional dependency: the [demo] / [test] extra

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per emulated AWS call otherwise
        _close_sqs_races()

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        """Environment that points botocore (and so the daemon) at this emulator."""
        return {**TEST_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION}

    def client(self, service: str) -> Any:
        return client_for(self.endpoint, service)

    def stop(self) -> None:
        self._server.stop()


def client_for(endpoint: str, service: str) -> Any:
    """A boto3 client for an emulator at `endpoint`, with the test credentials."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}),
    )


@dataclass
class Provider:
    """The AWS side of one provider: topic -> queue subscription, and a bucket for responses."""

    emulator: Emulator
    name: str
    topic_arn: str
    queue_url: str
    bucket: str
    dlq_url: str | None = None

    @classmethod
    def create(
        cls,
        emulator: Emulator,
        name: str | None = None,
        raw: bool = False,
        dlq: bool = False,
        max_receive_count: int = 2,
    ) -> Provider:
        name = name or f"p-{uuid.uuid4().hex[:10]}"
        sns, sqs, s3 = emulator.client("sns"), emulator.client("sqs"), emulator.client("s3")
        topic_arn = sns.create_topic(Name=name)["TopicArn"]
        attributes: dict[str, str] = {}
        dlq_url = None
        if dlq:
            dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
            dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
            )
        queue_url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(
            TopicArn=topic_arn,
            Protocol="sqs",
            Endpoint=queue_arn,
            Attributes={"RawMessageDelivery": "true" if raw else "false"},
        )
        s3.create_bucket(Bucket=name)
        return cls(emulator, name, topic_arn, queue_url, name, dlq_url)


@dataclass
class Stack:
    """What CloudFormation does for one stack: build requests, publish them, read the answers."""

    provider: Provider
    name: str = field(default_factory=lambda: f"stack-{uuid.uuid4().hex[:8]}")
    url_expires_in: int = 7200

    def __post_init__(self) -> None:
        self.stack_id = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{self.name}/{uuid.uuid4()}"
        self._s3 = self.provider.emulator.client("s3")
        self._sns = self.provider.emulator.client("sns")

    def response_url(self, key: str, bucket: str | None = None) -> str:
        url: str = self._s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket or self.provider.bucket, "Key": key}, ExpiresIn=self.url_expires_in
        )
        return url

    def request(
        self,
        request_type: str,
        logical_id: str,
        resource_type: str = "Custom::Echo",
        properties: dict[str, Any] | None = None,
        old_properties: dict[str, Any] | None = None,
        physical_id: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        request_id = request_id or str(uuid.uuid4())
        req: dict[str, Any] = {
            "RequestType": request_type,
            "ServiceToken": self.provider.topic_arn,
            "ResponseURL": self.response_url(f"{self.name}/{logical_id}/{request_id}"),
            "StackId": self.stack_id,
            "RequestId": request_id,
            "LogicalResourceId": logical_id,
            "ResourceType": resource_type,
            "ResourceProperties": {"ServiceToken": self.provider.topic_arn, **(properties or {})},
        }
        if old_properties is not None:
            req["OldResourceProperties"] = {"ServiceToken": self.provider.topic_arn, **old_properties}
        if physical_id is not None:
            req["PhysicalResourceId"] = physical_id
        return req

    def publish(self, request: dict[str, Any] | str) -> str:
        body = request if isinstance(request, str) else json.dumps(request)
        message_id: str = self._sns.publish(TopicArn=self.provider.topic_arn, Message=body)["MessageId"]
        return message_id

    def response(self, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any] | None:
        """The response CloudFormation would read for `request`, waiting up to `timeout` seconds."""
        bucket, key = key_of(request["ResponseURL"])
        deadline = time.monotonic() + timeout
        while True:
            try:
                body = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                response: dict[str, Any] = json.loads(body)
                return response
            except self._s3.exceptions.NoSuchKey:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.1)


def key_of(response_url: str) -> tuple[str, str]:
    """Bucket and key of a path-style presigned URL."""
    from urllib.parse import unquote, urlsplit

    path = unquote(urlsplit(response_url).path).lstrip("/")
    bucket, _, key = path.partition("/")
    return bucket, key


def apply_env(emulator: Emulator) -> None:
    """Point this process's AWS clients at the emulator (used by the demo)."""
    os.environ.update(emulator.env())

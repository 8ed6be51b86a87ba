"""`cfn-provider invoke`: a smoke test of a running daemon, through the topic it serves.

A request the daemon answers needs two things a fabricated one lacks: an SNS signature (the
daemon verifies every notification, so a message sent straight to its queue is refused as
forged) and a ResponseURL the daemon accepts (by default only CloudFormation's own response
buckets, which only CloudFormation can presign). Hence two ways, and nothing that loosens the
daemon's trust:
- through CloudFormation (the default; cfn_provider.ops.invoke_stack): a one-resource stack whose
  ServiceToken is the topic. CloudFormation publishes the Create and, on deletion, the Delete,
  exactly as for a real stack: the production path, with no change to the daemon.
- straight to the topic (`--response-bucket`, here): the request is published to the topic
  (SNS signs it) with a presigned PUT URL in the operator's own bucket as its ResponseURL, which
  the daemon answers only if it was started with `--allow-response-url` for that prefix (an
  emulator's endpoint, a staging daemon). Faster, and shows the whole answer, Data included.

Either way a Create is followed by the Delete that cleans up after it, as a stack's deletion (or
a failed Create's rollback) would. With no ResourceType named, the request is a ping: a type
nobody serves (PING_TYPE), answered FAILED "no handler for ..." without running any handler.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import EXIT_NOT_STARTED, OperatorError

PING_TYPE = "Custom::CfnProviderPing"
LOGICAL_ID = "SmokeTest"
STACK_PREFIX = "cfn-provider-invoke"


class InvokeError(OperatorError):
    """The smoke test could not be run (bad options, an AWS error) or its answer did not come: said
    once, exit 2 (invoke's 1 is a daemon that answered otherwise)."""

    exit_code: ClassVar[int | None] = EXIT_NOT_STARTED


@dataclass
class Answer:
    """What the daemon answered one request (`status` None: no answer in time)."""

    request_type: str
    status: str | None
    reason: str = ""
    physical_id: str | None = None
    data: dict[str, Any] | None = None  # the topic path reads the whole answer; CloudFormation shows no Data
    seconds: float | None = None
    request_id: str | None = None
    detail: list[str] = field(default_factory=list)  # more lines for the operator (e.g. how to clean up)

    def lines(self) -> list[str]:
        head = f"{self.request_type:<7} {self.status or 'NO ANSWER'}"
        if self.seconds is not None:
            head += f" after {self.seconds:.1f} s"
        if self.physical_id:
            head += f"  PhysicalResourceId={self.physical_id}"
        out = [head]
        if self.reason:
            out.append(f"        Reason: {self.reason}")
        if self.data:
            text = json.dumps(self.data, sort_keys=True)
            out.append(f"        Data: {text if len(text) <= 500 else text[:500] + '...'}")
        return out + self.detail


def parse_properties(pairs: tuple[str, ...], as_json: str | None) -> dict[str, Any]:
    """ResourceProperties from --properties-json and --property KEY=VALUE (strings, as CloudFormation
    sends scalars); InvokeError naming what is wrong."""
    props: dict[str, Any] = {}
    if as_json:
        try:
            props = json.loads(as_json)
        except ValueError as exc:
            raise InvokeError(f"--properties-json is not JSON: {exc}") from None
        if not isinstance(props, dict):
            raise InvokeError("--properties-json must be a JSON object")
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvokeError(f"--property {pair!r}: expected KEY=VALUE")
        props[key] = value
    if "ServiceToken" in props:
        raise InvokeError("ServiceToken is the topic (--topic-arn), not a property")
    return props


def topic_parts(topic_arn: str) -> tuple[str, str, str]:
    """(partition, region, account) of an SNS topic ARN; InvokeError when it is not one."""
    parts = topic_arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sns" or not all(parts[1:]):
        raise InvokeError(f"{topic_arn!r} is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
    return parts[1], parts[3], parts[4]


def verdict(answers: list[Answer], resource_type: str) -> tuple[int, str]:
    """(exit code, closing line): 0 when every request got the answer expected (SUCCESS; for the
    ping, FAILED "no handler" and then SUCCESS), 1 when an answer was not that, 2 when one is missing."""
    missing = [a for a in answers if a.status is None]
    if not answers or missing:
        what = missing[0].request_type if missing else "Create"
        return 2, f"NO ANSWER to the {what} request: see the hints above"
    if resource_type == PING_TYPE:
        create = answers[0]
        if (
            create.status == "FAILED"
            and f"no handler for {PING_TYPE}" in create.reason
            and all(a.status == "SUCCESS" for a in answers[1:])
        ):
            return 0, (
                "ok: the daemon answered (FAILED 'no handler' is a ping's expected answer: no handler "
                "ran; name a type it serves with --resource-type to run one)"
            )
        return 1, f"the daemon answered, but not as a ping expects (does a handler serve {PING_TYPE}?)"
    failed = [a for a in answers if a.status != "SUCCESS"]
    if failed:
        return 1, f"the daemon answered the {failed[0].request_type} request {failed[0].status}"
    return 0, "ok: the daemon answered " + " and ".join(a.request_type for a in answers) + " SUCCESS"


def likely_cause(refusal: dict[str, Any], prefix: str) -> list[str]:
    """What the daemon's recorded refusal of a message (health file: at, event, reason) means for
    the operator: what it said, then the likely fix."""
    reason, event = str(refusal.get("reason", "")), str(refusal.get("event", ""))
    when = time.strftime("%H:%M:%S", time.localtime(float(refusal.get("at", 0))))
    said = f"{when} {event}: {reason}"
    low = reason.lower()
    if "signature" in low or "certificate" in low:
        fix = (
            "-> it could not verify SNS's signature: on an emulator run it with --no-verify-signatures "
            "(the emulator's SigningCertURL names AWS's host), or --trust-signing-cert-url for one that "
            "serves its own certificate"
        )
    elif "responseurl" in low:
        fix = f"-> it refuses this ResponseURL: run it with --allow-response-url {prefix}"
    elif "topicarn" in low:
        fix = "-> it accepts other topics: add this one to its --topic-arn (or invoke its own topic)"
    else:
        fix = "-> see its log for that message"
    return [said, fix]


class TopicInvoke:
    """Straight to the topic: publish each request with a presigned PUT URL in `bucket` under
    `prefix`, wait for the daemon's answer there, read it and delete it."""

    def __init__(
        self,
        session: Any,
        topic_arn: str,
        bucket: str,
        prefix: str,
        timeout: int,
        report: Callable[[str], None],
        poll: float = 0.25,
        refusals: Callable[[float], tuple[str, list[dict[str, Any]]]] | None = None,
    ):
        self.topic_arn, self.bucket, self.prefix, self.timeout = topic_arn, bucket, prefix, timeout
        self.report, self.poll, self.refusals = report, poll, refusals
        _, region, account = topic_parts(topic_arn)
        self.sns, self.s3 = session.client("sns", region_name=region), session.client("s3", region_name=region)
        self.stack_id = f"arn:aws:cloudformation:{region}:{account}:stack/{STACK_PREFIX}/{uuid.uuid4()}"

    def allowed_prefix(self) -> str:
        """The --allow-response-url prefix the daemon needs for these ResponseURLs."""
        url = self._presign(f"{self.prefix}x")
        return url.split("?", 1)[0][: -len("x")]

    def run(self, resource_type: str, properties: dict[str, Any], keep: bool) -> list[Answer]:
        answers = [self._send("Create", resource_type, properties, None)]
        if not keep and answers[0].physical_id:  # what a stack's deletion, or a failed Create's rollback, sends
            answers.append(self._send("Delete", resource_type, properties, answers[0].physical_id))
        return answers

    def _presign(self, key: str) -> str:
        return str(
            self.s3.generate_presigned_url(
                "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=2 * self.timeout + 300
            )
        )

    def _send(
        self, request_type: str, resource_type: str, properties: dict[str, Any], physical_id: str | None
    ) -> Answer:
        request_id = str(uuid.uuid4())
        key = f"{self.prefix}{request_id}"
        request: dict[str, Any] = {
            "RequestType": request_type,
            "ServiceToken": self.topic_arn,
            "ResponseURL": self._presign(key),
            "StackId": self.stack_id,
            "RequestId": request_id,
            "LogicalResourceId": LOGICAL_ID,
            "ResourceType": resource_type,
            "ResourceProperties": {"ServiceToken": self.topic_arn, "ServiceTimeout": str(self.timeout), **properties},
        }
        if physical_id is not None:
            request["PhysicalResourceId"] = physical_id
        started, sent_at = time.monotonic(), time.time()
        self.sns.publish(TopicArn=self.topic_arn, Message=json.dumps(request))
        body = self._wait_for(key, started + self.timeout)  # the daemon answers within the ServiceTimeout
        took = round(time.monotonic() - started, 1)
        if body is None:
            hints = self._no_answer_hints(sent_at - 1.0)
            answer = Answer(request_type, None, seconds=took, request_id=request_id, detail=hints)
        else:
            data = body.get("Data") if isinstance(body.get("Data"), dict) else None
            if data and body.get("NoEcho"):
                data = {k: "****" for k in data}  # NoEcho: never shown, as CloudFormation masks it
            answer = Answer(
                request_type,
                str(body.get("Status")),
                str(body.get("Reason") or ""),
                body.get("PhysicalResourceId"),
                data,
                took,
                request_id,
            )
        for line in answer.lines():
            self.report(line)
        return answer

    def _wait_for(self, key: str, deadline: float) -> dict[str, Any] | None:
        while True:
            try:
                raw = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(self.poll)
                continue
            try:
                self.s3.delete_object(Bucket=self.bucket, Key=key)
            except Exception as exc:  # noqa: BLE001 - the answer is read; a leftover object is only untidy
                self.report(f"(could not delete s3://{self.bucket}/{key}: {exc})")
            try:
                doc = json.loads(raw)
            except ValueError:
                return {"Status": "UNREADABLE", "Reason": raw[:200].decode("utf-8", "replace")}
            return doc if isinstance(doc, dict) else {"Status": "UNREADABLE"}

    def _no_answer_hints(self, since: float) -> list[str]:
        where, refused = self.refusals(since) if self.refusals else ("", [])
        if refused:
            return [f"        no answer within {self.timeout} s; the daemon's health file ({where}) says why:"] + [
                f"        {line}" for r in refused for line in likely_cause(r, self.allowed_prefix())
            ]
        return [
            f"        no answer within {self.timeout} s: is the daemon receiving (`cfn-provider check`)? Or it",
            f"        refuses this ResponseURL: it must run with --allow-response-url {self.allowed_prefix()}",
            "        (its log then has a `security` line, and the request goes to the dead-letter queue, where",
            "        `cfn-provider redrive --dry-run` lists it).",
        ]

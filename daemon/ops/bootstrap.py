"""`cfn-provider bootstrap`: create or adopt the AWS side of a provider, idempotently.

    SNS topic (the ServiceToken) ──subscription (envelope delivery)──> SQS queue ──redrive──> DLQ
    topic policy: this account publishes, only the queue subscribes, TLS only
    queue policy: sns.amazonaws.com may SendMessage only with aws:SourceArn = the topic; TLS only
    both queues encrypted (SSE-SQS), set explicitly
    optionally, a DynamoDB table for fleet mode (pk: S hash key, on-demand, TTL on `ttl`)

The policies are deploy/provider.yaml's (daemon/ops/policies.py), merged into an adopted topic's
or queue's policy by Sid: statements an organisation added stay. The summary ends with the
least-privilege IAM policy for the daemon's role, on exact ARNs.

Every step reads first and reports what it did: "created", "updated" (an attribute differed
and was set) or "exists" (nothing to do); a second run reports no changes. With `dry_run`
nothing is written and the same steps report "would create" / "would update".
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..pipeline.budget import MAX_RECEIVE_COUNT  # the receive budget: see daemon/pipeline/budget.py
from .bootstrap_changes import CREATED, EXISTS, UPDATED, BootstrapError, Change
from .bootstrap_table import POLL_INDEX, ensure_table
from .policies import daemon_policy, dlq_statements, merged, queue_statements, same_policy, topic_statements

DAY = 24 * 3600
MAX_RETENTION_DAYS = 14


@dataclass
class Outcome:
    region: str
    topic_arn: str
    queue_url: str
    queue_arn: str
    dlq_url: str
    dlq_arn: str
    table: str | None
    dry_run: bool
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.action != EXISTS for c in self.changes)

    @property
    def service_token(self) -> str:
        return self.topic_arn

    @property
    def state(self) -> str | None:
        return f"dynamodb://{self.table}" if self.table else None

    def iam_policy(self) -> dict[str, Any]:
        """What the daemon's role needs here: the queue, its DLQ and, in fleet mode, the table and its index."""
        _, partition, _, region, account, _ = self.queue_arn.split(":", 5)
        table_arn = f"arn:{partition}:dynamodb:{region}:{account}:table/{self.table}" if self.table else None
        return daemon_policy(self.queue_arn, self.dlq_arn, table_arn, POLL_INDEX)

    def run_args(self, visibility_timeout: int, config_file: str | None = None) -> list[str]:
        if config_file:
            return ["cfn-provider", "run", "--config", config_file]
        args = [
            "cfn-provider",
            "run",
            "--queue-url",
            self.queue_url,
            "--region",
            self.region,
            "--topic-arn",
            self.topic_arn,
        ]
        if visibility_timeout != 60:
            args += ["--visibility-timeout", str(visibility_timeout)]
        if self.state:
            args += ["--state", self.state]
        return args

    def config_text(self, visibility_timeout: int) -> str:
        lines = [
            "# Written by `cfn-provider bootstrap`; use with `cfn-provider run --config THIS_FILE`.",
            f"queue-url = {_toml_str(self.queue_url)}",
            f"region = {_toml_str(self.region)}",
            f"topic-arn = [{_toml_str(self.topic_arn)}]",
            f"visibility-timeout = {visibility_timeout}",
        ]
        if self.state:
            lines.append(f"state = {_toml_str(self.state)}")
        else:
            lines.append('# state = "sqlite:///var/lib/cfn-provider/state.db"  # default: under the state directory')
        lines += ["", "[handlers]", '# "Custom::Thing" = "mypkg.thing"', ""]
        return "\n".join(lines)


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


class Bootstrap:
    """The steps, on boto3 clients from one session (region and endpoints from the usual settings)."""

    def __init__(
        self,
        session: Any,
        *,
        name: str = "cfn-provider",
        topic_arn: str | None = None,
        dynamodb_table: str | None = None,
        max_receive_count: int = MAX_RECEIVE_COUNT,
        visibility_timeout: int = 60,
        retention_days: int = 14,
        dry_run: bool = False,
        log: Callable[[Change], None] | None = None,
    ):
        if not 1 <= retention_days <= MAX_RETENTION_DAYS:
            raise BootstrapError(f"retention must be 1..{MAX_RETENTION_DAYS} days (SQS's limit)")
        if dynamodb_table is not None:
            from ..stores.base import StoreConfigError
            from ..stores.dynamodb import table_from_url

            try:
                table_from_url(f"dynamodb://{dynamodb_table}")
            except StoreConfigError as exc:
                raise BootstrapError(str(exc)) from None
        self.session, self.name, self.given_topic = session, name, topic_arn
        self.table, self.max_receive_count = dynamodb_table, max_receive_count
        self.visibility_timeout, self.retention = visibility_timeout, retention_days * DAY
        self.dry_run, self.log = dry_run, log
        self.region = session.region_name
        if not self.region:
            raise BootstrapError("no AWS region: pass --region or set AWS_REGION / AWS_DEFAULT_REGION")
        self.changes: list[Change] = []
        self._clients: dict[tuple[str, str], Any] = {}

    def _client(self, service: str, region: str | None = None) -> Any:
        key = (service, region or self.region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=key[1])
        return self._clients[key]

    def _note(self, change: Change) -> Change:
        self.changes.append(change)
        if self.log:
            self.log(change)
        return change

    # ------------------------------------------------------------------ all of it
    def run(self) -> Outcome:
        identity = self._client("sts").get_caller_identity()
        self.account, self.partition = identity["Account"], identity["Arn"].split(":")[1]
        topic_arn = self.topic()
        dlq_url, dlq_arn, dlq_before = self.queue(f"{self.name}-dlq", "sqs dead-letter", self._dlq_attributes())
        self.policy(dlq_url, dlq_arn, "sqs dead-letter policy", dlq_statements(dlq_arn), dlq_before, "TLS only")
        queue_url, queue_arn, before = self.queue(self.name, "sqs queue", self._queue_attributes(dlq_arn))
        self.policy(
            queue_url,
            queue_arn,
            "sqs queue policy",
            queue_statements(queue_arn, topic_arn),
            before,
            f"aws:SourceArn = {topic_arn}; TLS only",
        )
        self.topic_policy(topic_arn, queue_arn)
        self.subscription(topic_arn, queue_arn)
        if self.table:
            self._note(ensure_table(self._client("dynamodb"), self.table, dry_run=self.dry_run))
        return Outcome(
            self.region, topic_arn, queue_url, queue_arn, dlq_url, dlq_arn, self.table, self.dry_run, self.changes
        )

    # ------------------------------------------------------------------ topic
    def topic(self) -> str:
        if self.given_topic:
            arn = self.given_topic
            parts = arn.split(":")
            if len(parts) != 6 or parts[2] != "sns":
                raise BootstrapError(f"{arn!r} is not an SNS topic ARN")
            sns = self._client("sns", region=parts[3])
            try:
                sns.get_topic_attributes(TopicArn=arn)
            except sns.exceptions.NotFoundException:
                raise BootstrapError(
                    f"topic {arn} does not exist (--topic-arn adopts an existing topic; leave it out to create one)"
                ) from None
            self._note(Change("sns topic", arn, EXISTS, "adopted"))
            return arn
        arn = f"arn:{self.partition}:sns:{self.region}:{self.account}:{self.name}"
        sns = self._client("sns")
        try:
            sns.get_topic_attributes(TopicArn=arn)
            self._note(Change("sns topic", arn, EXISTS))
        except sns.exceptions.NotFoundException:
            if not self.dry_run:
                arn = sns.create_topic(Name=self.name)["TopicArn"]
            self._note(Change("sns topic", arn, CREATED))
        return arn

    # ------------------------------------------------------------------ queues
    def _dlq_attributes(self) -> dict[str, str]:
        return {"MessageRetentionPeriod": str(self.retention), "SqsManagedSseEnabled": "true"}

    def _queue_attributes(self, dlq_arn: str) -> dict[str, str]:
        return {
            "SqsManagedSseEnabled": "true",  # explicitly: a queue made before SSE-SQS was the default has none
            "VisibilityTimeout": str(self.visibility_timeout),
            "MessageRetentionPeriod": str(self.retention),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": self.max_receive_count}),
        }

    def queue(self, name: str, kind: str, wanted: dict[str, str]) -> tuple[str, str, dict[str, str]]:
        """Create or adopt queue `name`; (url, arn, its attributes before this run)."""
        sqs = self._client("sqs")
        arn = f"arn:{self.partition}:sqs:{self.region}:{self.account}:{name}"
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            url = f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}"
            if not self.dry_run:
                url = sqs.create_queue(QueueName=name, Attributes=wanted)["QueueUrl"]
                arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            self._note(Change(kind, url, CREATED))
            return url, arn, {}
        current = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        arn = current.get("QueueArn", arn)
        differ = {k: v for k, v in wanted.items() if not _same_attribute(k, current.get(k), v)}
        if differ:
            if not self.dry_run:
                # the current Policy is named too: SQS leaves attributes a call does not name alone, but
                # some emulators (moto) drop an unnamed Policy (the policy step merges into it next)
                keep = {"Policy": current["Policy"]} if current.get("Policy") else {}
                sqs.set_queue_attributes(QueueUrl=url, Attributes={**differ, **keep})
            self._note(Change(kind, url, UPDATED, "set " + ", ".join(sorted(differ))))
        else:
            self._note(Change(kind, url, EXISTS))
        return url, arn, current

    def policy(
        self, queue_url: str, queue_arn: str, kind: str, ours: list[dict[str, Any]], before: dict[str, str], detail: str
    ) -> None:
        """Merge `ours` into the queue's policy by Sid (`before`: its attributes before this run)."""
        current = before.get("Policy")
        wanted = merged(current, ours)
        if same_policy(current, wanted):
            self._note(Change(kind, queue_arn, EXISTS, detail))
            return
        if not self.dry_run:
            self._client("sqs").set_queue_attributes(QueueUrl=queue_url, Attributes={"Policy": json.dumps(wanted)})
        self._note(Change(kind, queue_arn, UPDATED if current else CREATED, detail))

    def topic_policy(self, topic_arn: str, queue_arn: str) -> None:
        """Who may publish and subscribe (deploy/provider.yaml's TopicPolicy), merged by Sid."""
        sns = self._client("sns", region=topic_arn.split(":")[3])
        ours = topic_statements(topic_arn, queue_arn, self.account, self.partition)
        created = any(c.kind == "sns topic" and c.action == CREATED for c in self.changes)
        current = (
            None
            if self.dry_run and created
            else sns.get_topic_attributes(TopicArn=topic_arn)["Attributes"].get("Policy")
        )
        wanted = merged(current, ours)
        detail = "this account publishes, only the queue subscribes, TLS only"
        if same_policy(current, wanted):
            self._note(Change("sns topic policy", topic_arn, EXISTS, detail))
            return
        if not self.dry_run:
            sns.set_topic_attributes(TopicArn=topic_arn, AttributeName="Policy", AttributeValue=json.dumps(wanted))
        self._note(Change("sns topic policy", topic_arn, CREATED if created else UPDATED, detail))

    # ------------------------------------------------------------------ subscription
    def subscription(self, topic_arn: str, queue_arn: str) -> None:
        sns = self._client("sns", region=topic_arn.split(":")[3])
        existing = None
        topic_created = any(c.kind == "sns topic" and c.action == CREATED for c in self.changes)
        if not (self.dry_run and topic_created):
            for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic_arn):
                for sub in page.get("Subscriptions", []):
                    if sub.get("Protocol") == "sqs" and sub.get("Endpoint") == queue_arn:
                        existing = sub["SubscriptionArn"]
        if existing is None:
            arn = f"{topic_arn}:(new)"
            if not self.dry_run:
                arn = sns.subscribe(
                    TopicArn=topic_arn,
                    Protocol="sqs",
                    Endpoint=queue_arn,
                    Attributes={"RawMessageDelivery": "false"},
                    ReturnSubscriptionArn=True,
                )["SubscriptionArn"]
            self._note(Change("sns subscription", arn, CREATED, "envelope delivery, raw off"))
            return
        if existing in ("PendingConfirmation", "Deleted"):
            raise BootstrapError(
                f"the subscription of {queue_arn} to {topic_arn} is {existing}; "
                "confirm or remove it, then run bootstrap again"
            )
        attrs = sns.get_subscription_attributes(SubscriptionArn=existing)["Attributes"]
        if attrs.get("RawMessageDelivery", "false").lower() == "true":
            if not self.dry_run:
                sns.set_subscription_attributes(
                    SubscriptionArn=existing, AttributeName="RawMessageDelivery", AttributeValue="false"
                )
            self._note(
                Change(
                    "sns subscription",
                    existing,
                    UPDATED,
                    "raw message delivery turned off, so signatures can be checked",
                )
            )
        else:
            self._note(Change("sns subscription", existing, EXISTS, "envelope delivery, raw off"))


def _same_attribute(name: str, current: str | None, wanted: str) -> bool:
    if current is None:
        return False
    if name == "RedrivePolicy":  # maxReceiveCount comes back as a string or a number
        try:
            a, b = json.loads(current), json.loads(wanted)
        except ValueError:
            return False
        return a.get("deadLetterTargetArn") == b.get("deadLetterTargetArn") and str(a.get("maxReceiveCount")) == str(
            b.get("maxReceiveCount")
        )
    return (
        str(current).lower() == str(wanted).lower() if name == "SqsManagedSseEnabled" else str(current) == str(wanted)
    )


# ---------------------------------------------------------------------- the command's output
def write_config(path: Path, text: str, dry_run: bool) -> Change:
    if path.exists():
        if path.read_text() == text:
            return Change("config file", str(path), EXISTS)
        action = UPDATED
    else:
        action = CREATED
    if not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return Change("config file", str(path), action)


def emulator_endpoints(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(SQS endpoint, S3 endpoint) when botocore's AWS_ENDPOINT_URL[_SQS|_S3] variables point the
    session away from AWS (an emulator): the daemon then needs them too, and the emulator's flags."""
    sqs = environ.get("AWS_ENDPOINT_URL_SQS") or environ.get("AWS_ENDPOINT_URL")
    s3 = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if not sqs or not s3:
        return None
    host = (urlsplit(sqs).hostname or "").lower()
    if host.endswith((".amazonaws.com", ".amazonaws.com.cn")):
        return None
    return sqs, s3


def _emulator_run(args: list[str], endpoints: tuple[str, str] | None, environ: Mapping[str, str]) -> str:
    """The run line; on an emulator with its endpoint variables and the flags `run` needs there
    (docs/operating.md, "Run it against an emulator")."""
    if endpoints is None:
        return shlex.join(args)
    names = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_SNS"]
    env = [f"{n}={shlex.quote(environ[n])}" for n in names if environ.get(n)]
    flags = ["--no-verify-signatures", "--allow-response-url", endpoints[1].rstrip("/") + "/"]
    return " ".join(env) + " " + shlex.join(args + flags)


def summary(
    outcome: Outcome, visibility_timeout: int, config_file: str | None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """What bootstrap prints after its steps; `environ`: the variables it ran with (os.environ)."""
    environ = os.environ if environ is None else environ
    endpoints = emulator_endpoints(environ)
    counts = {a: sum(c.action == a for c in outcome.changes) for a in (CREATED, UPDATED)}
    lines = []
    if outcome.dry_run:
        lines.append(f"Dry run: nothing was changed; {counts[CREATED]} to create, {counts[UPDATED]} to update.")
    elif outcome.changed:
        lines.append(f"{counts[CREATED]} created, {counts[UPDATED]} updated.")
    else:
        lines.append("No changes: everything already in place.")
    lines += [
        "",
        "ServiceToken (put this in your templates):",
        f"  {outcome.service_token}",
        "",
        "Run the daemon:"
        if endpoints is None
        else f"Run the daemon (on the emulator at {endpoints[0]}: moto's "
        "signing certificate URL names AWS's host, so signatures go unchecked; its S3 URLs are allowed):",
        "  " + _emulator_run(outcome.run_args(visibility_timeout, config_file), endpoints, environ) + " \\",
        "    --handler 'Custom::Thing=mypkg.thing'",
    ]
    lines += [
        "",
        "IAM policy for the daemon's role (least privilege, exact ARNs; add what your handlers need):",
        json.dumps(outcome.iam_policy(), indent=2),
    ]
    return lines

"""`cfn-provider invoke` through CloudFormation: a one-resource stack whose ServiceToken is the
daemon's topic is created, then deleted; what the daemon answered each request is read from the
stack's events (CloudFormation quotes a FAILED answer's Reason; it shows no Data).

The resource's ServiceTimeout is the command's --timeout, so a daemon that does not answer costs
minutes, not CloudFormation's default hour. A stack left behind (a Delete that failed, --keep,
Ctrl-C) is named, with the command that removes it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Callable
from typing import Any

from .invoke import LOGICAL_ID, Answer, InvokeError, topic_parts

ANSWERED = re.compile(
    r"Received response status \[(?P<status>[A-Z]+)\] from custom resource\. "
    r"Message returned: (?P<reason>.*?)(?: \(RequestId: (?P<request_id>[^)]*)\))?\s*$",
    re.S,
)
_RESULTS = {
    "CREATE_COMPLETE": ("Create", "SUCCESS"),
    "CREATE_FAILED": ("Create", "FAILED"),
    "DELETE_COMPLETE": ("Delete", "SUCCESS"),
    "DELETE_FAILED": ("Delete", "FAILED"),
}


def template(topic_arn: str, resource_type: str, properties: dict[str, Any], timeout: int) -> str:
    return json.dumps(
        {
            "AWSTemplateFormatVersion": "2010-09-09",
            "Description": "cfn-provider invoke: a smoke test of the custom-resource provider serving this "
            "ServiceToken (safe to delete)",
            "Resources": {
                LOGICAL_ID: {
                    "Type": resource_type,
                    "Properties": {"ServiceToken": topic_arn, "ServiceTimeout": timeout, **properties},
                }
            },
        },
        indent=1,
    )


class StackInvoke:
    def __init__(
        self,
        session: Any,
        topic_arn: str,
        stack_name: str,
        timeout: int,
        report: Callable[[str], None],
        poll: float = 2.0,
    ):
        _, region, _ = topic_parts(topic_arn)
        self.cfn = session.client("cloudformation", region_name=region)
        self.topic_arn, self.stack_name, self.timeout = topic_arn, stack_name, timeout
        self.report, self.poll = report, poll
        self._seen: set[str] = set()
        self._started: dict[str, dt.datetime] = {}

    def run(self, resource_type: str, properties: dict[str, Any], keep: bool) -> list[Answer]:
        stack_id = self.cfn.create_stack(
            StackName=self.stack_name,
            TemplateBody=template(self.topic_arn, resource_type, properties, self.timeout),
            Tags=[{"Key": "cfn-provider:invoke", "Value": "smoke-test"}],
        )["StackId"]
        self.report(f"stack {self.stack_name}: creating ({stack_id})")
        try:
            status, answers = self._wait(stack_id)
            if keep:
                self.report(f"stack {self.stack_name} kept ({status}): {self._delete_command()}")
                return answers
            self.report(f"stack {self.stack_name}: deleting it")
            self.cfn.delete_stack(StackName=stack_id)
            status, more = self._wait(stack_id)
            answers += more
        except KeyboardInterrupt:
            self.report(f"interrupted: stack {self.stack_name} is left as it is; {self._delete_command()}")
            raise
        if status != "DELETE_COMPLETE":
            self.report(
                f"stack {self.stack_name} is left {status}: once nothing is left of its resource, "
                + self._delete_command(retain=True)
            )
            if not answers:
                answers.append(Answer("Delete", None))
        return answers

    def _delete_command(self, retain: bool = False) -> str:
        extra = f" --retain-resources {LOGICAL_ID}" if retain else ""
        return f"aws cloudformation delete-stack --stack-name {self.stack_name}{extra}"

    def _wait(self, stack_id: str) -> tuple[str, list[Answer]]:
        """Until the stack is no longer in progress: its final status, and the answers its resource's
        events show meanwhile (each reported as it comes)."""
        deadline = (
            time.monotonic() + 2 * self.timeout + 120
        )  # the request, maybe a rollback's Delete, and CloudFormation
        answers: list[Answer] = []
        while True:
            stack = self.cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
            status = str(stack["StackStatus"])
            answers += self._answers(stack_id)  # after the status: a finished stack's last events are in
            if not status.endswith("_IN_PROGRESS"):
                why = stack.get("StackStatusReason")
                self.report(f"stack {self.stack_name}: {status}" + (f" ({why})" if why else ""))
                return status, answers
            if time.monotonic() >= deadline:
                raise InvokeError(
                    f"stack {self.stack_name} is still {status} after {2 * self.timeout + 120} s; "
                    f"look at its events, then {self._delete_command()}"
                )
            time.sleep(self.poll)

    def _answers(self, stack_id: str) -> list[Answer]:
        events = [
            e
            for page in self.cfn.get_paginator("describe_stack_events").paginate(StackName=stack_id)
            for e in page["StackEvents"]
        ]
        found = []
        for event in reversed(events):  # oldest first
            if event["EventId"] in self._seen or event.get("LogicalResourceId") != LOGICAL_ID:
                continue
            self._seen.add(event["EventId"])
            state = str(event["ResourceStatus"])
            if state in ("CREATE_IN_PROGRESS", "DELETE_IN_PROGRESS"):
                self._started.setdefault(state.split("_")[0], event["Timestamp"])
            elif state in _RESULTS:
                answer = self._answer(event, *_RESULTS[state])
                for line in answer.lines():
                    self.report(line)
                found.append(answer)
        return found

    def _answer(self, event: dict[str, Any], request_type: str, status: str) -> Answer:
        started = self._started.pop(request_type.upper(), None)
        seconds = (event["Timestamp"] - started).total_seconds() if started else None
        physical_id = event.get("PhysicalResourceId") or None
        if status == "SUCCESS":
            return Answer(request_type, status, physical_id=physical_id, seconds=seconds)
        reason = str(event.get("ResourceStatusReason") or "")
        quoted = ANSWERED.match(reason)
        if quoted:
            return Answer(
                request_type,
                quoted["status"],
                quoted["reason"],
                physical_id,
                seconds=seconds,
                request_id=quoted["request_id"],
            )
        return Answer(
            request_type,
            None,
            reason,
            physical_id,
            seconds=seconds,
            detail=[
                "        CloudFormation got no answer from the daemon (or failed the request itself, as it says): "
                "is the daemon receiving (`cfn-provider check`)?"
            ],
        )

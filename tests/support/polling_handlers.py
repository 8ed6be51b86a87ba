"""Long-running test handlers (the poll contract), for tests/integration/test_polling.py.

`Custom::Poll` (this module): `create` starts an "operation" and returns InProgress with
PhysicalResourceId `op-<RequestId[:8]>`; `is_complete` counts polls in the stored progress and is
done after `Polls` of them (Data: Polls, the count). Properties: Polls (default 2), AfterSeconds
(default 1), PollSleepSeconds (each poll sleeps this long first), PollRaise (a poll raises it).
Every call is appended to $CFN_TEST_CALLS_FILE as "RequestId WHAT": Create, poll-start,
poll-done N, Delete. `no_poll` returns InProgress but has no poll function.

`sdk_poll` (`Custom::SdkPoll`): the same as a cfn_provider.Resource, with a schema (Polls:
integer >= 1, AfterSeconds: number) and `poll_create(self, props, call, progress)`: Data Polls
and PollsType (the type `Polls` had in poll_create: int, converted as for create).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from cfn_provider import Call, InProgress, Resource


def _record(event: Mapping[str, Any], what: str) -> None:
    path = os.environ.get("CFN_TEST_CALLS_FILE")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{event['RequestId']} {what}\n")


def create(event: Mapping[str, Any], context: Any) -> InProgress:
    _record(event, "Create")
    after = float(event["ResourceProperties"].get("AfterSeconds", 1))
    return InProgress(progress={"polls": 0}, physical_id=f"op-{event['RequestId'][:8]}", after=after)


update = create


def is_complete(event: Mapping[str, Any], context: Any, progress: dict[str, Any]) -> Any:
    props = event["ResourceProperties"]
    _record(event, "poll-start")
    time.sleep(float(props.get("PollSleepSeconds", 0)))
    if "PollRaise" in props:
        raise RuntimeError(props["PollRaise"])
    polls = progress["polls"] + 1
    _record(event, f"poll-done {polls}")
    if polls >= int(props.get("Polls", 2)):
        return {"Data": {"Polls": polls}}
    return InProgress(progress={"polls": polls}, after=float(props.get("AfterSeconds", 1)))


def delete(event: Mapping[str, Any], context: Any = None) -> None:
    _record(event, "Delete")


class _NoPoll:
    def create(self, event: Mapping[str, Any]) -> InProgress:
        return InProgress(progress={}, physical_id="never-polled")

    update = create

    def delete(self, event: Mapping[str, Any]) -> None:
        return None


no_poll = _NoPoll()


class SdkPoll(Resource):
    schema = {
        "type": "object",
        "properties": {
            "Polls": {"type": "integer", "minimum": 1, "default": 2},
            "AfterSeconds": {"type": "number", "default": 1},
        },
    }

    def create(self, props: dict[str, Any], call: Call) -> InProgress:
        _record(call.event, "Create")
        return InProgress(progress={"polls": 0}, physical_id=f"sdk-{call.request_id[:8]}", after=props["AfterSeconds"])

    def poll_create(self, props: dict[str, Any], call: Call, progress: dict[str, Any]) -> Any:
        polls = progress["polls"] + 1
        _record(call.event, f"poll-done {polls}")
        if polls < props["Polls"]:
            return InProgress(progress={"polls": polls}, after=props["AfterSeconds"])
        return {"Data": {"Polls": polls, "PollsType": type(props["Polls"]).__name__}}

    def delete(self, props: dict[str, Any], call: Call) -> None:
        _record(call.event, "Delete")


sdk_poll = SdkPoll.handler()

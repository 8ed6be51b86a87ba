"""Handlers for the tests. Behaviour comes from ResourceProperties; every completed call is recorded.

Recorded in `calls` (in-process daemons) and, when CFN_TEST_CALLS_FILE is set, appended as one
line "RequestId RequestType" per completed call (subprocess daemons).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

calls: list[tuple[str, str]] = []  # completed calls
started: list[tuple[str, str]] = []  # every call, including ones that raise
running = {"now": 0, "peak": 0}  # calls in progress (sync and async), and the most at once
_running_lock = threading.Lock()


def _enter() -> None:
    with _running_lock:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])


def _leave() -> None:
    with _running_lock:
        running["now"] -= 1


def _record(event: Mapping[str, Any]) -> None:
    calls.append((event["RequestId"], event["RequestType"]))
    path = os.environ.get("CFN_TEST_CALLS_FILE")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{event['RequestId']} {event['RequestType']}\n")


def _result(event: Mapping[str, Any]) -> Any:
    started.append((event["RequestId"], event["RequestType"]))
    props = event["ResourceProperties"]
    if "Raise" in props:
        raise RuntimeError(props["Raise"])
    if "ReturnJson" in props:
        return json.loads(props["ReturnJson"])
    if "DataSize" in props:
        return {"Data": {"Blob": "x" * int(props["DataSize"])}}
    return None


def _run(event: Mapping[str, Any], context: Any = None) -> Any:
    _enter()
    try:
        delay = float(event["ResourceProperties"].get("SleepSeconds", 0))
        if delay:
            time.sleep(delay)
        result = _result(event)
    finally:
        _leave()
    _record(event)
    return result


create = update = delete = _run


class AsyncHandler:
    """The same behaviour, as async actions on an object (`tests.support.handlers:async_handler`)."""

    async def _run(self, event: Mapping[str, Any], context: Any) -> Any:
        _enter()
        try:
            delay = float(event["ResourceProperties"].get("SleepSeconds", 0))
            if delay:
                await asyncio.sleep(delay)
            result = _result(event)
        finally:
            _leave()
        _record(event)
        return result

    create = update = delete = _run


async_handler = AsyncHandler()


def count(request_id: str) -> int:
    return sum(1 for rid, _ in calls if rid == request_id)


class _Stamped:
    """`Custom::Test`'s behaviour (sleep SleepSeconds, then append "RequestId RequestType" to
    $CFN_TEST_CALLS_FILE) with a fresh nonce in Data on every run: two runs' answers differ, so a
    handler that ran twice for one request shows as two different bodies."""

    def _run(self, event: Mapping[str, Any], context: Any = None) -> Any:
        _run(event)
        return {"PhysicalResourceId": f"stamped-{event['RequestId'][:8]}", "Data": {"Run": uuid.uuid4().hex}}

    create = update = delete = _run


stamped = _Stamped()  # `tests.support.handlers:stamped`, for daemon subprocesses

"""The Lambda-like side of a `lambda:` function's call: its event, its context, and the captured answer.

A function run by cfn_provider.sdk.lambda_adapter gets the request as Lambda delivers it (a plain
dict whose ResponseURLs have lost their presigned signature) and a `LambdaContext` filled in from
the daemon's request and deadline. What it sends, through cfnresponse (cfn_provider.sdk.cfnresponse)
or crhelper (cfn_provider.sdk.crhelper_patch), is handed to `deliver`, which gives it to the
`Invocation` serving that request: the first answer is kept, a second or a late one is logged
and dropped.
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Mapping

import structlog

from ..trust.urls import redact

DEFAULT_REMAINING_MS = 900_000  # when called without the daemon's context: Lambda's longest timeout
_URL_KEYS = ("ResponseURL", "IntranetResponseURL")

log = structlog.get_logger("lambda")


@dataclass(frozen=True)
class Answer:
    """What a function sent through cfnresponse or crhelper."""

    status: Any
    reason: Any = None
    physical_id: Any = None
    data: Any = None
    no_echo: bool = False
    via: str = "cfnresponse"


@dataclass(frozen=True)
class PollRequest:
    """crhelper asked to be called again (its poll functions): `helper.Data` as crhelper stores it
    in the event's CrHelperData (with the id the action returned under PhysicalResourceId), and
    its `polling_interval` in minutes."""

    data: Any
    interval_minutes: Any = 2
    no_echo: bool = False  # helper.NoEcho: the Data (so the progress) is to be hidden


def log_hint(request_id: str) -> str:
    """Where to look, in place of AWS's "See the details in CloudWatch Log Stream: ..."."""
    return ("See the details in the cfn-provider log (e.g. journalctl -u cfn-provider), "
            f"lines with request_id={request_id}")


# ---------------------------------------------------------------------------------- invocations

class Invocation:
    """One call of a function: holds the first answer it sends, or crhelper's request to be polled."""

    def __init__(self, stack_id: str, request_id: str, logical_id: str):
        self.stack_id, self.request_id, self.logical_id = stack_id, request_id, logical_id
        self.answer: Answer | None = None
        self.poll: PollRequest | None = None  # set by crhelper_patch when crhelper would schedule a poll
        self.finished = False
        self._lock = threading.Lock()

    def capture(self, answer: Answer) -> None:
        ids = {"request_id": self.request_id, "logical_id": self.logical_id}
        with self._lock:
            if self.finished:
                log.warning("lambda.late_send", via=answer.via, status=str(answer.status)[:40], **ids,
                            detail="sent after the function returned; the request was already answered")
                return
            if self.answer is not None:
                log.warning("lambda.second_send", via=answer.via, status=str(answer.status)[:40],
                            kept=str(self.answer.status)[:40], **ids,
                            detail="the function sent a second answer; the first is kept")
                return
            self.answer = answer
        log.info("lambda.sent", via=answer.via, status=str(answer.status)[:40], **ids)

    def finish(self) -> None:
        with self._lock:
            self.finished = True


_current: ContextVar[Invocation | None] = ContextVar("cfn_provider_lambda_invocation", default=None)
_active: dict[tuple[str, str], Invocation] = {}  # for sends from threads the function started
_active_lock = threading.Lock()


def current() -> Invocation | None:
    """The invocation this thread (or task) serves, None outside a `lambda:` function."""
    return _current.get()


@contextmanager
def serving(invocation: Invocation) -> Iterator[None]:
    """While the function runs: its sends, from this thread or from threads it starts (found by
    StackId and RequestId), go to `invocation`; afterwards, any send is late."""
    key = (invocation.stack_id, invocation.request_id)
    token = _current.set(invocation)
    with _active_lock:
        _active[key] = invocation
    try:
        yield
    finally:
        invocation.finish()
        with _active_lock:
            if _active.get(key) is invocation:
                del _active[key]
        _current.reset(token)


def deliver(answer: Answer, context: Any = None, ids: tuple[Any, Any] | None = None) -> None:
    """Hand an answer to the invocation it belongs to: the context's, this thread's, or the one
    serving (StackId, RequestId). Never raises: AWS's cfnresponse.send does not either."""
    invocation = getattr(context, "_invocation", None) if isinstance(context, LambdaContext) else None
    invocation = invocation or _current.get()
    if invocation is None and ids is not None:
        with _active_lock:
            invocation = _active.get((str(ids[0]), str(ids[1])))
    if invocation is None:
        log.error("lambda.send_outside_invocation", via=answer.via, status=str(answer.status)[:40],
                  detail="no lambda: function is serving this request; the answer is dropped")
        return
    invocation.capture(answer)


# ---------------------------------------------------------------------------------- the context

_STARTED = time.gmtime()
_LOG_STREAM = time.strftime("%Y/%m/%d", _STARTED) + "/[$LATEST]" + uuid.uuid4().hex  # one per process


def _memory_mb() -> str:
    try:
        return str(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20)
    except (ValueError, OSError, AttributeError):
        return "0"


_MEMORY_MB = _memory_mb()


class LambdaContext:
    """The `context` a Lambda function receives, filled in from the daemon's request and deadline."""

    function_version = "$LATEST"
    identity = None
    client_context = None

    def __init__(self, function_name: str, event: Mapping[str, Any], daemon_context: Any = None,
                 invocation: Invocation | None = None):
        self.function_name = function_name
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = _function_arn(function_name, str(event.get("StackId") or ""))
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = _LOG_STREAM  # this daemon process: Lambda's "execution environment"
        self.memory_limit_in_mb = _MEMORY_MB  # a str, as Lambda's runtime gives it: the machine's memory
        self._daemon_context = daemon_context
        self._invocation = invocation

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds before the daemon answers FAILED (timed out) instead of the function."""
        remaining = getattr(self._daemon_context, "remaining", None)
        return int(remaining() * 1000) if callable(remaining) else DEFAULT_REMAINING_MS

    def __repr__(self) -> str:
        return f"<LambdaContext {self.function_name} aws_request_id={self.aws_request_id}>"


def _function_arn(name: str, stack_id: str) -> str:
    """arn:PARTITION:lambda:REGION:ACCOUNT:function:NAME, partition/region/account from the StackId."""
    parts = stack_id.split(":")
    if len(parts) >= 6 and parts[0] == "arn" and parts[2] == "cloudformation":
        return f"arn:{parts[1]}:lambda:{parts[3]}:{parts[4]}:function:{name}"
    return f"arn:aws:lambda:{os.environ.get('AWS_REGION', '')}::function:{name}"


def lambda_event(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The request as Lambda delivers it (a plain dict), ResponseURLs without their signature."""
    event: dict[str, Any] = json.loads(json.dumps(wire))
    for key in _URL_KEYS:
        if isinstance(event.get(key), str):
            event[key] = redact(event[key])
    return event

"""A `lambda:` function as a daemon handler: each call runs in one of the function's own processes.

create, update and delete (and poll_create, poll_update, poll_delete) all invoke the function
with the event Lambda would give it, except that its ResponseURL (and ROS's IntranetResponseURL)
is a loopback URL of the daemon valid for this call only (cfn_provider.functions.answers). The
first answer PUT there is the call's result, as soon as it arrives (the function may go on; it is
killed at the deadline); without one, how the call ended decides:

| the call                                  | the handler result                                                 |
|-------------------------------------------|--------------------------------------------------------------------|
| answered SUCCESS                          | its id (none, or the log stream name: the daemon's rule), Data, NoEcho |
| answered FAILED                           | FunctionFailed(its reason, or where to look)                       |
| returned, raised, sys.exit without answer | FunctionFailed saying so                                           |
| crhelper waits for its polls              | InProgress (crhelper's CrHelperData, its interval)                 |
| process crashed (os._exit, signal, OOM)   | FunctionFailed naming how; the process is replaced                 |
| every process busy, none may wait         | Busy {"Queued": n}: the scheduler retries soon, no slot held; a   |
|                                           | caller waiting on its connection (web[sync]) is told to retry (503) |

A call cancelled (the runner's deadline, the daemon's stop) kills its process, which is replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HandlerFailure
from ..logs import get_logger
from ..progress import Busy, InProgress
from . import sandbox
from .answers import Answer, Answers, Capture
from .environ import function_environment, machine_memory_mb
from .host import FunctionHost
from .pool import Pool
from .process import CONFINE, CRHELPER, STOCK, Exited, FunctionLoadError, FunctionProcess, Setup, log_stream_name
from .settings import FunctionSettings

SUCCESS, FAILED = "SUCCESS", "FAILED"
START_TIMEOUT = 60.0  # seconds a process gets to import the function
NO_DEADLINE = 900.0  # a call without the daemon's context (a direct call): Lambda's longest timeout
QUEUED = "Queued"
_URL_KEYS = ("ResponseURL", "IntranetResponseURL")

log = get_logger("lambda")


class FunctionFailed(HandlerFailure):
    """The function's answer was FAILED (or it gave none): the message is the Reason."""

    reason_is_message = True  # an answer, not a crash of the daemon's own (cfn_provider.pipeline.raised)


def log_hint(request_id: str) -> str:
    """Where to look, in place of AWS's "See the details in CloudWatch Log Stream: ..."."""
    return (
        f"See the details in the cfn-provider log (e.g. journalctl -u cfn-provider), lines with request_id={request_id}"
    )


@dataclass(frozen=True)
class FunctionTarget:
    """A registered function, as cfn_provider.functions.target found it."""

    spec: str  # "lambda:index.handler", as configured
    module: str
    attr: str
    code: str  # the function's folder: first on its path, its working directory
    name: str  # context.function_name, AWS_LAMBDA_FUNCTION_NAME
    settings: FunctionSettings

    @property
    def handler(self) -> str:
        """Lambda's Handler setting (the _HANDLER variable)."""
        return f"{self.module}.{self.attr}"

    def init(self, check: bool = False) -> Setup:
        """The runtime's set-up line (cfn_provider.functions.runtime)."""
        return {
            "code": self.code,
            "module": self.module,
            "attr": self.attr,
            "stock": STOCK,
            "crhelper": CRHELPER,
            "memory_mb": self.settings.memory_mb,
            "check": check,
            "prepend": not _interpreters_own(self.code),
            "confine": CONFINE,
            "sandbox": sandbox.paths_for(self.code),
        }


def _interpreters_own(folder: str) -> bool:
    """Whether `folder` is on every interpreter's path already (the standard library, site-packages):
    a function installed there as a package is not given it first on its path."""
    prefixes = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    resolved = str(Path(folder).resolve())
    return any(resolved == p or resolved.startswith(p + os.sep) for p in prefixes)


class LambdaFunction:
    """The handler object the router serves for a `lambda:` target."""

    kind = "Lambda function"  # how its reasons name it (cfn_provider.functions.fc_function: a Function Compute one)
    sent = "PUT"  # how it sends its answer, in those reasons ("nothing was PUT")

    def __init__(self, target: FunctionTarget):
        self.target, self.spec, self.name = target, target.spec, target.name
        sandbox.keep_out(target.code)  # no other function may reach its folder
        self.settings: FunctionSettings = target.settings

    def __repr__(self) -> str:
        return f"<lambda function {self.name}: {self.spec[len('lambda:') :]} in {self.target.code}>"

    async def create(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return await self.invoke(event, context)

    async def update(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return await self.invoke(event, context)

    async def delete(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return await self.invoke(event, context)

    async def poll_create(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return await self.invoke(event, context, progress)

    async def poll_update(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return await self.invoke(event, context, progress)

    async def poll_delete(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return await self.invoke(event, context, progress)

    async def spawn(self, host: FunctionHost) -> FunctionProcess:
        """A new process for this function, loaded and ready (the pool calls this)."""
        assert host.tls is not None
        stream = self.settings.log_stream or log_stream_name()
        env = function_environment(
            name=self.name,
            handler=self.target.handler,
            code=self.target.code,
            memory_mb=self.settings.memory_mb,
            log_group=self.log_group,
            log_stream=stream,
            configured=self.settings.environment,
        )
        env.update(host.tls.trust_environment(env))
        process = FunctionProcess(self.name, self.target.init(), env, self.target.code, stream)
        await process.start(START_TIMEOUT)
        return process

    @property
    def log_group(self) -> str:
        return self.settings.log_group or f"/aws/lambda/{self.name}"

    async def invoke(self, event: Mapping[str, Any], context: Any = None, progress: Any = None) -> Any:
        """Run the function once for `event` (a poll: with `progress`) and return its answer as a
        handler result; FunctionFailed for FAILED or no answer (see the module docstring)."""
        host = await FunctionHost.for_loop()
        assert host.answers is not None
        queued = isinstance(progress, Mapping) and QUEUED in progress
        pool = host.pool(self)
        try:
            process = await pool.acquire(wait=progress is None)
        except (FunctionLoadError, Exited, OSError) as exc:  # a replacement that no longer starts
            raise FunctionFailed(f"the {self.kind} {self.name} could not be started: {exc}") from exc
        if process is None:
            return self._queued(progress, queued)
        ids = self._ids(event)
        request_id, aws_request_id = ids["request_id"], ids["aws_request_id"]
        capture = host.answers.open({k: ids[k] for k in ("function", "request_id", "logical_id", "aws_request_id")})
        capture.on_answer = lambda answer: process.output.answered(answer.data if answer.no_echo else None)
        deadline, own = self._deadline(context)
        lambda_context = self._context(event, process, aws_request_id, deadline)
        crhelper_progress = None if queued else progress  # a queued first call runs as a first call
        call = asyncio.ensure_future(process.invoke(_event(event, capture.url, crhelper_progress), lambda_context, ids))
        call.add_done_callback(_retrieved)
        arrived = asyncio.ensure_future(capture.arrived.wait())
        try:
            await asyncio.wait(
                {call, arrived},
                timeout=deadline - time.monotonic() if own else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:  # the deadline, or the daemon stopping: the call is cut
            arrived.cancel()
            process.kill()
            host.track(self._finish(call, capture, process, pool, deadline, host.answers))
            raise
        arrived.cancel()
        timed_out = not call.done() and capture.answer is None  # its own Timeout: killed, as Lambda ends it
        if timed_out:
            process.kill()
        if capture.answer is not None:
            host.track(self._finish(call, capture, process, pool, deadline, host.answers))
            return _result(capture.answer, request_id, process.log_stream)
        await self._finish(call, capture, process, pool, deadline, host.answers)
        if timed_out and capture.answer is None:
            raise FunctionFailed(
                f"the Lambda function {self.name} timed out after {self.settings.timeout} s (its timeout "
                f"setting, Lambda's Timeout). {log_hint(request_id)}"
            )
        return self._ended(call, capture, process, event, crhelper_progress, request_id)

    def _ids(self, event: Mapping[str, Any]) -> dict[str, str]:
        """The call's ids, in its log lines and its answer's capture."""
        return {
            "function": self.name,
            "request_id": str(event.get("RequestId") or ""),
            "stack": _stack_name(event),
            "logical_id": str(event.get("LogicalResourceId") or ""),
            "aws_request_id": str(uuid.uuid4()),
        }

    def _deadline(self, context: Any) -> tuple[float, bool]:
        """When the call ends (time.monotonic()): the request's deadline, or the function's own `timeout`
        (Lambda's Timeout) from now when that comes first (then True)."""
        deadline = getattr(context, "deadline", None) or time.monotonic() + NO_DEADLINE
        timeout = self.settings.timeout
        if timeout is not None and time.monotonic() + timeout < deadline:
            return time.monotonic() + timeout, True
        return deadline, False

    def _queued(self, progress: Any, queued: bool) -> Busy:
        """Every process busy: the poll scheduler tries again shortly (counting the tries in `progress`)."""
        tries = int(progress[QUEUED]) + 1 if queued and isinstance(progress, Mapping) else 1
        log.info(
            "lambda.queued",
            function=self.name,
            concurrency=self.settings.concurrency,
            detail="every process of the function is busy: the poll scheduler tries again shortly",
        )
        return Busy(
            progress=progress if progress is not None and not queued else {QUEUED: tries},
            after=min(15.0, 1.0 + tries),
        )

    def _context(
        self, event: Mapping[str, Any], process: FunctionProcess, aws_request_id: str, deadline: float
    ) -> dict[str, Any]:
        """The fields of the Lambda context object the function is given."""
        return {
            "function_name": self.name,
            "invoked_function_arn": _function_arn(self.name, str(event.get("StackId") or "")),
            "memory_limit_in_mb": str(self.settings.memory_mb or machine_memory_mb()),
            "aws_request_id": aws_request_id,
            "log_group_name": self.log_group,
            "log_stream_name": process.log_stream,
            "deadline": deadline,
        }

    async def _finish(
        self,
        call: asyncio.Future[dict[str, Any]],
        capture: Capture,
        process: FunctionProcess,
        pool: Pool,
        deadline: float,
        answers: Answers,
    ) -> None:
        """The call's end: at its own pace until the deadline, then killed; the URL closes, the
        process goes back to the pool (or is replaced)."""
        try:
            await asyncio.wait({call}, timeout=max(0.0, deadline - time.monotonic()))
            if not call.done():
                log.warning(
                    "lambda.killed",
                    **capture.ids,
                    detail="the function answered but was still running at the request's deadline",
                )
                process.kill()
                await asyncio.wait({call}, timeout=5)
        finally:
            answers.close(capture)
            if call.done() and not call.cancelled() and call.exception() is None and call.result().get("replace"):
                process.broken = True
            pool.release(process)

    def _ended(
        self,
        call: asyncio.Future[dict[str, Any]],
        capture: Capture,
        process: FunctionProcess,
        event: Mapping[str, Any],
        progress: Any,
        request_id: str,
    ) -> Any:
        """The call ended without an answer: why, as a handler result."""
        if capture.answer is not None:  # it came as the call ended
            return _result(capture.answer, request_id, process.log_stream)
        error = call.exception()
        if isinstance(error, Exited):
            limit = f" with memory_mb = {self.settings.memory_mb}" if self.settings.memory_mb else ""
            raise FunctionFailed(
                f"the {self.kind} {self.name} ended before it answered: its process "
                f"{error}{limit}. {log_hint(request_id)}"
            )
        if error is not None:
            raise error
        done = call.result()
        if done.get("error") == "MemoryError":
            limit = f" (memory_mb = {self.settings.memory_mb})" if self.settings.memory_mb else ""
            raise FunctionFailed(
                f"the {self.kind} {self.name} ran out of memory{limit}: MemoryError. {log_hint(request_id)}"
            )
        if done.get("error"):
            raise FunctionFailed(str(done.get("message") or done["error"]))
        if done.get("exit") is not None:
            raise FunctionFailed(f"the {self.kind} {self.name} called sys.exit({done['exit']})")
        if isinstance(done.get("poll"), Mapping):
            return _in_progress(event, done["poll"], progress)
        raise FunctionFailed(
            f"the {self.kind} {self.name} returned without sending a response "
            f"(nothing was {self.sent} to its ResponseURL). {log_hint(request_id)}"
        )


def _retrieved(call: asyncio.Future[Any]) -> None:
    """Its outcome is read by whoever waits for it, if anyone still does; never reported as lost."""
    if not call.cancelled():
        call.exception()


def _event(wire: Mapping[str, Any], url: str, progress: Any) -> dict[str, Any]:
    """The request as Lambda delivers it (a plain dict) with this call's ResponseURL; for a crhelper
    poll, as crhelper's rule delivers it (CrHelperPoll, CrHelperData)."""
    event: dict[str, Any] = json.loads(json.dumps(wire))
    for key in _URL_KEYS:
        if key in event:
            event[key] = url
    if progress is not None:
        data = progress.get("CrHelperData") if isinstance(progress, Mapping) else None
        event["CrHelperData"] = data if isinstance(data, Mapping) else {}
        event["CrHelperPoll"] = True
    return event


def _in_progress(event: Mapping[str, Any], poll: Mapping[str, Any], progress: Any) -> InProgress:
    """crhelper waits for its next poll: InProgress with its CrHelperData, after polling_interval
    minutes, NoEcho when helper.NoEcho is set; a poll keeps the progress it was given (crhelper's rule
    sends the same event every time)."""
    no_echo = poll.get("no_echo") is True
    try:
        after = float(poll.get("interval", 2)) * 60
    except (TypeError, ValueError):
        after = 120.0
    if progress is not None:
        return InProgress(progress=progress, after=after, no_echo=no_echo)
    given = poll.get("data")
    data: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    physical_id = data.get("PhysicalResourceId")  # what the action returned: the Create's id from now on
    if event.get("RequestType") != "Create" or not isinstance(physical_id, str) or not physical_id:
        physical_id = None
    return InProgress(progress={"CrHelperData": dict(data)}, physical_id=physical_id, after=after, no_echo=no_echo)


def _result(answer: Answer, request_id: str, log_stream: str) -> Any:
    """An answer as the handler contract's return value (SUCCESS) or exception (FAILED)."""
    if answer.problem:
        raise FunctionFailed(answer.problem)
    if answer.status == SUCCESS:
        result: dict[str, Any] = {}
        # AWS's cfnresponse sends the log stream's name when given no id: keep the daemon's rule instead
        if answer.physical_id not in (None, "") and answer.physical_id != log_stream:
            result["PhysicalResourceId"] = answer.physical_id
        if answer.data is not None:
            result["Data"] = answer.data
        if answer.no_echo:
            result["NoEcho"] = True
        return result
    if answer.status == FAILED:
        raise FunctionFailed(str(answer.reason) if answer.reason not in (None, "") else log_hint(request_id))
    raise FunctionFailed(
        f"the function sent Status {str(answer.status)[:40]!r}; CloudFormation accepts SUCCESS or FAILED"
    )


def _stack_name(event: Mapping[str, Any]) -> str:
    parts = str(event.get("StackId") or "").split("/")
    return parts[1] if len(parts) > 1 else ""


def _function_arn(name: str, stack_id: str) -> str:
    """arn:PARTITION:lambda:REGION:ACCOUNT:function:NAME, partition/region/account from the StackId."""
    parts = stack_id.split(":")
    if len(parts) >= 6 and parts[0] == "arn" and parts[2] == "cloudformation":
        return f"arn:{parts[1]}:lambda:{parts[3]}:{parts[4]}:function:{name}"
    return f"arn:aws:lambda:::function:{name}"

"""Run an AWS Lambda custom-resource function unchanged: `--handler 'Custom::Thing=lambda:mymodule.handler'`.

The target is Lambda's own Handler setting, MODULE.FUNCTION (`index.handler`, `pkg.mod.handler`,
`dir/mod.handler`), or MODULE:FUNCTION. The function is wrapped in a plain handler (create,
update and delete all call it), so the router, runner and worker treat it like any sync handler:
it runs in the daemon's thread pool, under the request's deadline.

Each call gets what Lambda gives (cfn_provider.sdk.lambda_context):
- the event: the request's wire mapping as a plain mutable dict, except that the ResponseURL's
  query string (its presigned signature) is replaced by a marker: the function never holds a
  credential it could log, and cannot answer behind the daemon's back;
- a `LambdaContext` (`get_remaining_time_in_millis()` from the daemon's deadline, `aws_request_id`,
  `function_name`, `function_version`, `invoked_function_arn`, `log_group_name`,
  `log_stream_name`, `memory_limit_in_mb`).

The function's answer is captured, not PUT: loading a `lambda:` handler makes `import cfnresponse`
resolve to cfn_provider.sdk.cfnresponse (an entry in sys.modules, in the daemon's process only: no
top-level `cfnresponse` is installed) and patches crhelper, when installed, at its send path (the
`send_response` default of `CfnResource._send`; cfn_provider.sdk.crhelper_patch). The first answer
sent wins (a second is logged and dropped); when the function returns, it becomes the handler's
result, so the daemon's own pipeline (store, retries, 4096-byte guard, redaction, NoEcho) answers CloudFormation.

crhelper's polling decorators (`@helper.poll_create` ...) map onto the daemon's poll contract
(cfn_provider.pipeline.progress): when crhelper would set up its CloudWatch Events rule, the call
returns InProgress, its progress crhelper's CrHelperData (helper.Data, with the id the action
returned under PhysicalResourceId), `after` its `polling_interval` minutes, NoEcho when helper.NoEcho
is set (helper.Data is then kept as NoEcho Data is). The daemon's poll_* call the function again
with the event crhelper's rule would send (CrHelperPoll, CrHelperData); an answer it sends ends the
request, none means "look again".

One invocation of a module runs at a time, as in one Lambda execution environment: crhelper keeps
the request it is serving on its module-level helper, so two at once would mix their answers.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import json
import threading
from typing import Any, Callable, Mapping

import structlog

from . import cfnresponse, crhelper_patch
from ..pipeline.progress import InProgress
from .lambda_context import (DEFAULT_REMAINING_MS, Answer, Invocation, LambdaContext, PollRequest, lambda_event, log_hint,
                             serving)

PREFIX = "lambda:"
SUCCESS, FAILED = "SUCCESS", "FAILED"

log = structlog.get_logger("lambda")


class FunctionFailed(Exception):
    """The function's answer was FAILED (or it gave none): the message is the Reason."""


class FunctionBusy(Exception):
    """An earlier request to the same module still runs and the deadline came first."""


# ---------------------------------------------------------------------------------- the handler

_module_locks: dict[str, threading.Lock] = {}


class LambdaFunction:
    """A Lambda function as a daemon handler: create, update and delete all invoke it."""

    def __init__(self, spec: str, function: Callable[..., Any], module_name: str, name: str):
        self.spec, self.function, self.module_name, self.name = spec, function, module_name, name
        self._busy = _module_locks.setdefault(module_name, threading.Lock())

    def __repr__(self) -> str:
        return f"<lambda function {self.spec[len(PREFIX):]}>"

    def create(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return self.invoke(event, context)

    def update(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return self.invoke(event, context)

    def delete(self, event: Mapping[str, Any], context: Any = None) -> Any:
        return self.invoke(event, context)

    # crhelper's poll functions, called by the daemon's poll scheduler with the stored progress
    def poll_create(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return self.invoke(event, context, progress)

    def poll_update(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return self.invoke(event, context, progress)

    def poll_delete(self, event: Mapping[str, Any], context: Any, progress: Any) -> Any:
        return self.invoke(event, context, progress)

    def invoke(self, event: Mapping[str, Any], context: Any = None, progress: Any = None) -> Any:
        """Run the function (one request of this module at a time) and return its answer as a
        handler result, or InProgress when crhelper waits for a poll; raise FunctionFailed for
        FAILED or no answer. `progress` (a poll): the event is crhelper's poll event."""
        remaining = getattr(context, "remaining", None)
        wait = max(0.0, remaining()) if callable(remaining) else DEFAULT_REMAINING_MS / 1000
        acquired = self._busy.acquire(blocking=False)
        if not acquired:
            log.info("lambda.queued", function=self.name, detail="an earlier request to this module still runs")
            acquired = self._busy.acquire(timeout=wait)
        if not acquired:
            raise FunctionBusy(f"timed out waiting for an earlier request to {self.name} to finish "
                               "(a lambda: function serves one request at a time)")
        try:
            if callable(remaining) and remaining() <= 0:  # the daemon has answered this one already
                raise FunctionBusy(f"timed out waiting for an earlier request to {self.name} to finish")
            answer, poll, error = self._run(event, context, progress)
        finally:
            self._busy.release()
        request_id = str(event.get("RequestId") or "")
        if answer is None:
            if error is not None:
                raise error
            if poll is not None:
                return _in_progress(event, poll, progress)
            raise FunctionFailed(f"the Lambda function {self.name} returned without sending a response "
                                 f"(through cfnresponse.send or crhelper). {log_hint(request_id)}")
        if error is not None:
            log.warning("lambda.raised_after_send", error=type(error).__name__, kept=str(answer.status)[:40])
        return _result(answer, request_id)

    def _run(self, event: Mapping[str, Any], context: Any,
             progress: Any) -> tuple[Answer | None, PollRequest | None, BaseException | None]:
        stack_id, request_id = str(event.get("StackId") or ""), str(event.get("RequestId") or "")
        invocation = Invocation(stack_id, request_id, str(event.get("LogicalResourceId") or ""))
        lambda_context = LambdaContext(self.name, event, context, invocation)
        structlog.contextvars.bind_contextvars(aws_request_id=lambda_context.aws_request_id)
        error: BaseException | None = None
        try:
            with serving(invocation):
                self.function(_poll_event(event, progress), lambda_context)
        except Exception as exc:  # noqa: BLE001 - a raising function is a FAILED answer
            error = exc
        except SystemExit as exc:  # would otherwise end the daemon's event loop
            error = FunctionFailed(f"the Lambda function {self.name} called sys.exit({exc.code!r})")
        finally:
            structlog.contextvars.unbind_contextvars("aws_request_id")
        return invocation.answer, invocation.poll, error


def _poll_event(event: Mapping[str, Any], progress: Any) -> dict[str, Any]:
    """The event as Lambda gives it; for a poll, as crhelper's rule gives it (CrHelperPoll, CrHelperData)."""
    lambda_ev = lambda_event(event)
    if progress is not None:
        data = progress.get("CrHelperData") if isinstance(progress, Mapping) else None
        lambda_ev["CrHelperData"] = json.loads(json.dumps(data)) if isinstance(data, Mapping) else {}
        lambda_ev["CrHelperPoll"] = True
    return lambda_ev


def _in_progress(event: Mapping[str, Any], poll: PollRequest, progress: Any) -> InProgress:
    """crhelper waits for its next poll: InProgress with its CrHelperData, after polling_interval minutes.
    A poll keeps the progress it was given (crhelper's rule sends the same event every time)."""
    try:
        after = float(poll.interval_minutes) * 60
    except (TypeError, ValueError):
        after = 120.0  # crhelper's default: 2 minutes
    if progress is not None:
        return InProgress(progress=progress, after=after, no_echo=poll.no_echo)
    data = poll.data if isinstance(poll.data, Mapping) else {}
    physical_id = data.get("PhysicalResourceId")  # what the action returned; for a Create, its FAILED id
    if event.get("RequestType") != "Create" or not isinstance(physical_id, str) or not physical_id:
        physical_id = None
    return InProgress(progress={"CrHelperData": dict(data)}, physical_id=physical_id, after=after,
                      no_echo=poll.no_echo)


def _result(answer: Answer, request_id: str) -> Any:
    """An answer as the handler contract's return value (SUCCESS) or exception (FAILED)."""
    if answer.status == SUCCESS:
        result: dict[str, Any] = {}
        if answer.physical_id not in (None, ""):  # none: the daemon's rule, not Lambda's log stream name
            result["PhysicalResourceId"] = answer.physical_id
        if answer.data is not None:
            result["Data"] = answer.data
        if answer.no_echo:
            result["NoEcho"] = True
        return result
    if answer.status == FAILED:
        raise FunctionFailed(str(answer.reason) if answer.reason not in (None, "") else log_hint(request_id))
    raise FunctionFailed(f"the function sent Status {str(answer.status)[:40]!r}; "
                         "CloudFormation accepts SUCCESS or FAILED")


# ---------------------------------------------------------------------------------- loading

def parse_target(spec: str) -> tuple[str, str]:
    """'lambda:pkg.mod.handler' | 'lambda:dir/mod.handler' | 'lambda:pkg.mod:handler' -> (module, attr)."""
    target = spec[len(PREFIX):].strip() if spec.startswith(PREFIX) else spec.strip()
    if ":" in target:
        module_name, _, attr = target.partition(":")
    else:
        module_name, _, attr = target.replace("/", ".").rpartition(".")
    module_name = module_name.replace("/", ".").strip(".")
    if not module_name or not attr or not all(p.isidentifier() for p in (*module_name.split("."), *attr.split("."))):
        raise ValueError(f"{spec!r} is not lambda:MODULE.FUNCTION "
                         "(Lambda's Handler setting, e.g. lambda:index.handler)")
    return module_name, attr


def load(spec: str) -> LambdaFunction:
    """Import a `lambda:` handler (after making cfnresponse and crhelper answer through the daemon)."""
    module_name, attr = parse_target(spec)
    install()
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{module_name}.{attr} is a {type(obj).__name__}, not a function")
    if inspect.iscoroutinefunction(obj):
        raise TypeError(f"{module_name}.{attr} is async; Lambda's Python runtime calls handlers synchronously, "
                        "and so does the lambda: adapter (register an async handler without lambda:)")
    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{module_name}-{attr}")[:64]
    return LambdaFunction(spec, obj, module_name, name)


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Once per process: `import cfnresponse` gives cfn_provider.sdk.cfnresponse, crhelper sends to us,
    and AWS_REGION is set as Lambda sets it (when the AWS configuration names a region)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        crhelper_patch.patch()
        existing = sys.modules.get("cfnresponse")
        if existing is not None and existing is not cfnresponse:
            log.warning("lambda.cfnresponse_replaced", module=str(getattr(existing, "__file__", existing)),
                        detail="an importable cfnresponse would PUT answers itself; the daemon's is used instead")
        sys.modules["cfnresponse"] = cfnresponse
        if not os.environ.get("AWS_REGION"):
            region = os.environ.get("AWS_DEFAULT_REGION") or _configured_region()
            if region:
                os.environ["AWS_REGION"] = region
        _installed = True


def _configured_region() -> str | None:
    try:
        import botocore.session

        region: str | None = botocore.session.get_session().get_config_variable("region")
        return region
    except Exception:  # noqa: BLE001 - no region is a normal configuration
        return None


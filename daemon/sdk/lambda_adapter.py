"""Run an AWS Lambda custom-resource function unchanged: `--handler 'Custom::Thing=lambda:mymodule.handler'`.

The target is Lambda's own Handler setting, MODULE.FUNCTION (`index.handler`, `pkg.mod.handler`,
`dir/mod.handler`), or MODULE:FUNCTION. The function is wrapped in a plain handler (create,
update and delete all call it), so the router, runner and worker treat it like any sync handler:
it runs in the daemon's thread pool, under the request's deadline.

Each call gets what Lambda gives:
- the event: the request's wire mapping as a plain mutable dict, except that the ResponseURL's
  query string (its presigned signature) is replaced by a marker: the function never holds a
  credential it could log, and cannot answer behind the daemon's back;
- a `LambdaContext` (`get_remaining_time_in_millis()` from the daemon's deadline, `aws_request_id`,
  `function_name`, `function_version`, `invoked_function_arn`, `log_group_name`,
  `log_stream_name`, `memory_limit_in_mb`).

The function's answer is captured, not PUT: loading a `lambda:` handler makes `import cfnresponse`
resolve to cfn_provider.sdk.cfnresponse (an entry in sys.modules, in the daemon's process only: no
top-level `cfnresponse` is installed) and patches crhelper, when installed, at its send path (the
`send_response` default of `CfnResource._send`). The first answer sent wins (a second is logged
and dropped); when the function returns, it becomes the handler's result, so the daemon's own
pipeline (store, retries, 4096-byte guard, redaction, NoEcho) answers CloudFormation.

One invocation of a module runs at a time, as in one Lambda execution environment: crhelper keeps
the request it is serving on its module-level helper, so two at once would mix their answers.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import structlog

from ..trust.urls import redact

PREFIX = "lambda:"
SUCCESS, FAILED = "SUCCESS", "FAILED"
DEFAULT_REMAINING_MS = 900_000  # when called without the daemon's context: Lambda's longest timeout
_URL_KEYS = ("ResponseURL", "IntranetResponseURL")

log = structlog.get_logger("lambda")


class FunctionFailed(Exception):
    """The function's answer was FAILED (or it gave none): the message is the Reason."""


class FunctionBusy(Exception):
    """An earlier request to the same module still runs and the deadline came first."""


@dataclass(frozen=True)
class Answer:
    """What a function sent through cfnresponse or crhelper."""

    status: Any
    reason: Any = None
    physical_id: Any = None
    data: Any = None
    no_echo: bool = False
    via: str = "cfnresponse"


def log_hint(request_id: str) -> str:
    """Where to look, in place of AWS's "See the details in CloudWatch Log Stream: ..."."""
    return ("See the details in the cfn-provider log (e.g. journalctl -u cfn-provider), "
            f"lines with request_id={request_id}")


# ---------------------------------------------------------------------------------- invocations

class Invocation:
    """One call of a function: holds the first answer it sends."""

    def __init__(self, stack_id: str, request_id: str, logical_id: str):
        self.stack_id, self.request_id, self.logical_id = stack_id, request_id, logical_id
        self.answer: Answer | None = None
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
    event = json.loads(json.dumps(wire))
    for key in _URL_KEYS:
        if isinstance(event.get(key), str):
            event[key] = redact(event[key])
    return event


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

    def invoke(self, event: Mapping[str, Any], context: Any = None) -> Any:
        """Run the function (one request of this module at a time) and return its answer as a
        handler result; raise FunctionFailed for FAILED or no answer."""
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
            answer, error = self._run(event, context)
        finally:
            self._busy.release()
        request_id = str(event.get("RequestId") or "")
        if answer is None:
            if error is not None:
                raise error
            raise FunctionFailed(f"the Lambda function {self.name} returned without sending a response "
                                 f"(through cfnresponse.send or crhelper). {log_hint(request_id)}")
        if error is not None:
            log.warning("lambda.raised_after_send", error=type(error).__name__, kept=str(answer.status)[:40])
        return _result(answer, request_id)

    def _run(self, event: Mapping[str, Any], context: Any) -> tuple[Answer | None, BaseException | None]:
        stack_id, request_id = str(event.get("StackId") or ""), str(event.get("RequestId") or "")
        invocation = Invocation(stack_id, request_id, str(event.get("LogicalResourceId") or ""))
        lambda_context = LambdaContext(self.name, event, context, invocation)
        key = (stack_id, request_id)
        token = _current.set(invocation)
        with _active_lock:
            _active[key] = invocation
        structlog.contextvars.bind_contextvars(aws_request_id=lambda_context.aws_request_id)
        error: BaseException | None = None
        try:
            self.function(lambda_event(event), lambda_context)
        except Exception as exc:  # noqa: BLE001 - a raising function is a FAILED answer
            error = exc
        except SystemExit as exc:  # would otherwise end the daemon's event loop
            error = FunctionFailed(f"the Lambda function {self.name} called sys.exit({exc.code!r})")
        finally:
            invocation.finish()
            with _active_lock:
                if _active.get(key) is invocation:
                    del _active[key]
            _current.reset(token)
            structlog.contextvars.unbind_contextvars("aws_request_id")
        return invocation.answer, error


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
        _patch_crhelper()
        from . import cfnresponse

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

        return botocore.session.get_session().get_config_variable("region")
    except Exception:  # noqa: BLE001 - no region is a normal configuration
        return None


# ---------------------------------------------------------------------------------- crhelper

class CrhelperUnsupported(RuntimeError):
    """The installed crhelper does not have the send path this adapter intercepts."""


class PollingNotSupported(Exception):
    pass


POLLING_REASON = ("crhelper polling (@helper.poll_create / poll_update / poll_delete) is not supported by "
                  "cfn-provider yet; the function was not run. Serve this resource without its poll functions, "
                  "or keep it on Lambda for now")


def _patch_crhelper() -> None:
    """Make crhelper answer through the daemon, at its narrowest points:
    - `CfnResource._send`'s `send_response` default (crhelper.utils._send_response, bound when the
      class was defined): the body goes to `deliver` instead of an HTTPS PUT with endless retries;
    - `_crhelper_init`: a request whose type has a poll function is FAILED through crhelper's own
      init-failure path before any of its functions run (polling is not supported yet);
    - `_wait_for_cwlogs`' `sleep` default: no two-minute wait on Delete for CloudWatch Logs;
    - `log_helper.setup`: crhelper would set the root logger's level and formatters (and its
      JSON formatter would drop the daemon's redaction); the daemon's logging stays as it is."""
    if importlib.util.find_spec("crhelper") is None:
        return
    from crhelper import log_helper, resource_helper, utils

    cls = resource_helper.CfnResource
    if getattr(cls, "_cfn_provider_patched", False):
        return
    send_defaults = getattr(cls._send, "__defaults__", None) or ()
    wait_defaults = getattr(getattr(cls, "_wait_for_cwlogs", None), "__defaults__", None) or ()
    if (not send_defaults or send_defaults[-1] is not utils._send_response or len(wait_defaults) != 1
            or not callable(getattr(cls, "_crhelper_init", None)) or not callable(getattr(log_helper, "setup", None))):
        version = getattr(sys.modules.get("crhelper"), "__version__", None) or _dist_version("crhelper")
        raise CrhelperUnsupported(f"crhelper {version} is installed but its send path is not the one cfn-provider "
                                  "intercepts (tested with crhelper 2.0.12); pin crhelper==2.0.12")
    cls._send.__defaults__ = (*send_defaults[:-1], _crhelper_send)
    cls._wait_for_cwlogs.__defaults__ = (_skip_in_adapter(wait_defaults[0]),)
    init = cls._crhelper_init

    @functools.wraps(init)
    def _crhelper_init(self: Any, event: Any, context: Any) -> Any:
        kind = str(event.get("RequestType", "")).lower() if isinstance(event, Mapping) else ""
        if _current.get() is None or not getattr(self, f"_poll_{kind}_func", None):
            return init(self, event, context)
        saved = self._init_failed
        self._init_failed = PollingNotSupported(POLLING_REASON)
        try:
            return init(self, event, context)  # sends FAILED with that reason, runs no function
        finally:
            self._init_failed = saved

    cls._crhelper_init = _crhelper_init
    log_helper.setup = _keep_daemon_logging
    cls._cfn_provider_patched = True


def _crhelper_send(response_url: Any, response_body: Any, ssl_verify: Any = None) -> None:
    body = response_body if isinstance(response_body, Mapping) else {}
    deliver(Answer(status=body.get("Status"), reason=body.get("Reason"), physical_id=body.get("PhysicalResourceId"),
                   data=body.get("Data"), no_echo=bool(body.get("NoEcho")), via="crhelper"),
            ids=(body.get("StackId"), body.get("RequestId")))


def _skip_in_adapter(sleep: Callable[[float], Any]) -> Callable[[float], Any]:
    def wait(seconds: float) -> Any:
        if _current.get() is None:
            return sleep(seconds)
        return None  # the daemon's logs are not CloudWatch's: nothing to wait for

    return wait


def _keep_daemon_logging(*_: Any, **__: Any) -> None:
    """crhelper.log_helper.setup under the daemon: the operator's --log-level and format apply."""


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "?"

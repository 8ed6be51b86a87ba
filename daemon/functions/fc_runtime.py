"""The worker side of an `fc:` function's instance: Alibaba Function Compute's Python runtime, as the function sees it.

The daemon starts `python -I fc_runtime.py` (cfn_provider.functions.fc_function) exactly as it
starts runtime.py for a `lambda:` function, and this file is runtime.py with what differs for
Function Compute put in place: it executes runtime.py's own source as a module of its own (the
channel, output capture, set-up and main loop stay that file's, the same for both kinds) and
replaces three of its names before calling its `main`:

- `load`: the module and its handler, and the configured `initializer` (MODULE.FUNCTION) when
  there is one; no crhelper and no stock cfnresponse (FC has neither);
- `invoke`: one call as FC makes it, `handler(event, context)` with `event` the request as
  **bytes** (the function `json.loads` it) and `context` FC's object (FCContext below: request_id,
  credentials, function, service, region, account_id, tracing); the initializer runs first, once
  per process (`initializer(context)`), and again on the next call while it has not succeeded; the
  call's lines open and close with FC's `FC Invoke Start RequestId: ID` / `FC Invoke End RequestId: ID`
  (`FC Initialize Start/End` around the initializer);
- `Records`: the root logger's records in FC's own format, `<UTC time> <request id> [LEVEL] message`,
  with the root logger at INFO, as FC's runtime sets it.

Standard library only, as runtime.py; typing names only under TYPE_CHECKING.
"""

import json
import logging
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from . import runtime as lambda_runtime
    from .fc_function import FcSetup


def _lambda_runtime() -> "Any":
    """runtime.py's source, executed as a module of its own (not imported: its folder is not on the path)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")
    module = type(sys)("cfn_provider_runtime")
    module.__file__ = path
    with open(path, encoding="utf-8") as fh:
        exec(compile(fh.read(), path, "exec"), module.__dict__)  # noqa: S102 - the daemon's own file
    return module


if not TYPE_CHECKING:
    lambda_runtime = _lambda_runtime()


# ---------------------------------------------------------------------------------- FC's context


class Credentials:
    def __init__(self, access_key_id: str, access_key_secret: str, security_token: str) -> None:
        self.access_key_id = access_key_id
        self.access_key_secret = access_key_secret
        self.security_token = security_token

    def __repr__(self) -> str:  # never the secret, in a function's own log lines
        return f"<Credentials access_key_id={self.access_key_id[:4] + '...' if self.access_key_id else ''!r}>"


class ServiceMeta:
    def __init__(self, service_name: str, log_project: str, log_store: str, qualifier: str, version_id: str) -> None:
        self.name = service_name
        self.log_project = log_project
        self.log_store = log_store
        self.qualifier = qualifier
        self.version_id = version_id


class FunctionMeta:
    def __init__(self, name: str, handler: str, memory: int, timeout: int, initializer: str) -> None:
        self.name = name
        self.handler = handler
        self.memory = memory
        self.timeout = timeout
        self.initializer = initializer


class Tracing:
    def __init__(self) -> None:
        self.span_context = None
        self.jaeger_endpoint = None
        self.span_baggages = None

    def parseOpenTracingBaggages(self) -> "dict[str, str]":  # noqa: N802 - FC's name
        return {}


class FCContext:
    """The `context` an FC handler and initializer receive (the fields of FC's Python runtime)."""

    def __init__(self, doc: "dict[str, Any]") -> None:
        creds, function, service = doc["credentials"], doc["function"], doc["service"]
        self.request_id = doc["request_id"]
        self.credentials = Credentials(creds["access_key_id"], creds["access_key_secret"], creds["security_token"])
        self.function = FunctionMeta(
            function["name"], function["handler"], function["memory"], function["timeout"], function["initializer"]
        )
        self.service = ServiceMeta(
            service["name"], service["log_project"], service["log_store"], service["qualifier"], service["version_id"]
        )
        self.region = doc["region"]
        self.account_id = doc["account_id"]
        self.tracing = Tracing()
        self.logger = logging.getLogger()

    def __repr__(self) -> str:
        return f"<FCContext {self.function.name} request_id={self.request_id}>"


# ---------------------------------------------------------------------------------- FC's log lines


class Records(lambda_runtime.Records):
    """The root logger's records, in FC's line format, tagged with the call's FC request id."""

    request_id = ""  # the call's (FC's context.request_id), while one is being served

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            millis = int(record.msecs)
            text = f"{stamp}.{millis:03d}Z {Records.request_id} [{record.levelname}] {record.getMessage()}"
            exc = logging.Formatter().formatException(record.exc_info) if record.exc_info else None
            self.channel.text(
                "log",
                text,
                level=record.levelname.lower(),
                logger=record.name,
                exc=exc[-lambda_runtime.MAX_TEXT :] if exc else None,
            )
        except Exception:  # noqa: BLE001 - as logging does: say so on stderr, go on
            self.handleError(record)


# ---------------------------------------------------------------------------------- loading and calls


class Loaded:
    """The function as loaded: its handler, its initializer (if configured) and whether it has run."""

    def __init__(self, handler: "Callable[..., object]", initializer: "Callable[..., object] | None") -> None:
        self.handler, self.initializer = handler, initializer
        self.initialized = initializer is None


def _resolve(module_name: str, attr: str, what: str) -> "Callable[..., object]":
    __import__(module_name)
    target: object = sys.modules[module_name]
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise lambda_runtime.LoadError(f"{what} {module_name}.{attr} is a {type(target).__name__}, not a function")
    if getattr(getattr(target, "__code__", None), "co_flags", 0) & lambda_runtime.CO_COROUTINE:
        raise lambda_runtime.LoadError(
            f"{what} {module_name}.{attr} is async; Function Compute's Python runtime calls it synchronously"
        )
    return target


def load(init: "FcSetup", channel: "lambda_runtime.Channel") -> "tuple[Callable[..., object], Loaded]":
    """Import the function (and its initializer); raise with the reason the daemon shows."""
    code = init["code"]
    clash = lambda_runtime.shadowed(code) if init.get("prepend", True) else []
    if clash:
        raise lambda_runtime.LoadError(
            f"{', '.join(m + '.py' for m in clash)} in {code} shadow the standard module(s) "
            f"{', '.join(clash)}, which the function's interpreter has loaded before the function: rename them"
        )
    lambda_runtime.limit_memory(init.get("memory_mb"))
    if init.get("prepend", True):
        sys.path[:0] = [code]
    logging.getLogger().setLevel(logging.INFO)  # FC's runtime: the root logger's INFO records are shown
    handler = _resolve(init["module"], init["attr"], "the handler")
    initializer = None
    if init.get("initializer"):
        module_name, _, attr = str(init["initializer"]).rpartition(".")
        initializer = _resolve(module_name, attr, "the initializer")
    return handler, Loaded(handler, initializer)


def invoke(
    handler: "Callable[..., object]", message: "dict[str, Any]", channel: "lambda_runtime.Channel", loaded: Loaded
) -> None:
    """One call, in this (the main) thread: the initializer first if it has not run, then the handler."""
    channel.call = message["call"]
    context = FCContext(message["context"])
    Records.request_id = context.request_id
    done: dict[str, object] = {"op": "done", "call": message["call"]}
    try:
        initializer = loaded.initializer
        if not loaded.initialized and initializer is not None:
            _phase(channel, "Initialize", context.request_id, lambda: initializer(context))
            loaded.initialized = True
        event = json.dumps(message["event"]).encode("utf-8")  # FC hands Python 3 functions the payload as bytes
        _phase(channel, "Invoke", context.request_id, lambda: handler(event, context))
    except SystemExit as exc:
        done["exit"] = repr(exc.code)
    except MemoryError as exc:
        done.update(error="MemoryError", message=str(exc), replace=True)
    except BaseException as exc:  # noqa: BLE001 - the function's failure, reported, not ours
        logging.getLogger().error("%s: %s", type(exc).__name__, exc, exc_info=True)
        what = "the initializer failed: " if not loaded.initialized else ""
        done.update(error=type(exc).__name__, message=(what + str(exc))[: lambda_runtime.MAX_TEXT])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    channel.send(done)
    Records.request_id = ""
    channel.call = None


def _phase(channel: "lambda_runtime.Channel", name: str, request_id: str, run: "Callable[[], object]") -> None:
    """FC's `FC <name> Start RequestId: ID` and `... End ...` lines around `run` (the end line also
    when it raised, as FC prints it)."""
    channel.text("out", f"FC {name} Start RequestId: {request_id}", stream="stdout")
    try:
        run()
    finally:
        sys.stdout.flush()
        channel.text("out", f"FC {name} End RequestId: {request_id}", stream="stdout")


def main() -> None:
    vars(lambda_runtime).update(load=load, invoke=invoke, Records=Records)
    lambda_runtime.main()


if __name__ == "__main__":
    main()

"""`cfn-provider simulate`: a local stand-in for CloudFormation, for handler authors.

`simulate create TEMPLATE`, `simulate update [--template NEW]`, `simulate delete` drive a
template's custom resources through the real path: each request is published to an SNS topic,
delivered to an SQS queue, handled by the daemon (run in this process, on its own thread) and
answered through a presigned S3 URL; the answer is read back from S3 as CloudFormation would.
AWS is moto's server on 127.0.0.1 (embedded, fresh for every invocation) unless `--endpoint`
names another AWS-compatible endpoint. Each custom resource's ServiceToken is replaced by the
simulated topic.

CloudFormation's semantics, as far as custom resources see them:
- resources go in dependency order (one at a time: a valid CloudFormation order, not its
  parallelism); unchanged resources get no Update; scalars are sent as strings;
- Update carries OldResourceProperties; a changed PhysicalResourceId is a replacement, and the
  old id gets its Delete in the cleanup phase, after everything else succeeded;
- a failed Create rolls the stack back (Delete of everything created, the failed resource
  included, with the id its FAILED answer gave); a failed Update rolls back with an Update to the
  old properties (and Deletes of what the update created);
- no answer within the resource's ServiceTimeout (default 3600 s; `--wait-limit` caps the
  wait) fails the resource; its rollback Delete carries an id CloudFormation makes up;
- a Fn::GetAtt of an attribute the answer did not return fails the resource;
- DeletionPolicy / UpdateReplacePolicy Retain (and RetainExceptOnCreate) are honoured.

The simulated stack (id, template, parameters, resources with their ids, properties and
Data, outputs, events) lives in a JSON state file between invocations, written atomically.
"""
from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import random
import re
import string
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import click

from .template import (
    StackInfo,
    Template,
    TemplateError,
    load as load_template,
    parse_parameters,
)

STATE_VERSION = 1
DEFAULT_STATE_DIR = ".cfn-simulate"
STACK_TYPE = "AWS::CloudFormation::Stack"
DEFAULT_SERVICE_TIMEOUT = 3600
COMPLETE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE")
UPDATABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")
MAX_EVENTS = 1000  # kept in the state file
# Where a stack is left when the user interrupts an operation: only delete goes on from there.
INTERRUPTED = {"create": "ROLLBACK_FAILED", "update": "UPDATE_ROLLBACK_FAILED", "delete": "DELETE_FAILED"}
# For tests, which run the commands inside pytest: never os._exit() there (see _exit_code).
HARD_EXIT_PAST_STUCK_HANDLERS = True


class SimulateError(click.ClickException):
    """Nothing was done: the template, the options or the stack's state do not allow it (exit 2)."""

    exit_code = 2


# ------------------------------------------------------------------------------ the state file
@dataclass
class Resource:
    type: str
    physical_id: str
    properties: dict[str, Any]  # as sent, without ServiceToken
    data: dict[str, Any] = field(default_factory=dict)
    no_echo: bool = False
    status: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"Type": self.type, "PhysicalResourceId": self.physical_id, "Properties": self.properties,
                "Data": self.data, "NoEcho": self.no_echo, "Status": self.status}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Resource":
        return cls(doc["Type"], doc["PhysicalResourceId"], dict(doc.get("Properties") or {}),
                   dict(doc.get("Data") or {}), bool(doc.get("NoEcho")), doc.get("Status", ""))


@dataclass
class StackState:
    name: str
    stack_id: str
    region: str
    account_id: str
    template: dict[str, Any]
    template_file: str = ""
    parameter_overrides: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    status_reason: str = ""
    resources: dict[str, Resource] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    created: str = ""
    updated: str = ""

    @property
    def info(self) -> StackInfo:
        return StackInfo(self.name, self.stack_id, self.region, self.account_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "Version": STATE_VERSION, "StackName": self.name, "StackId": self.stack_id, "Region": self.region,
            "AccountId": self.account_id, "StackStatus": self.status, "StackStatusReason": self.status_reason,
            "CreationTime": self.created, "LastUpdatedTime": self.updated, "TemplateFile": self.template_file,
            "ParameterOverrides": self.parameter_overrides, "Parameters": self.parameters,
            "Resources": {k: r.to_json() for k, r in self.resources.items()}, "Outputs": self.outputs,
            "Template": self.template, "Events": self.events[-MAX_EVENTS:],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "StackState":
        if doc.get("Version") != STATE_VERSION:
            raise ValueError(f"unknown state file version {doc.get('Version')!r}")
        return cls(
            name=doc["StackName"], stack_id=doc["StackId"], region=doc["Region"], account_id=doc["AccountId"],
            template=doc["Template"], template_file=doc.get("TemplateFile", ""),
            parameter_overrides=dict(doc.get("ParameterOverrides") or {}), parameters=dict(doc.get("Parameters") or {}),
            status=doc.get("StackStatus", ""), status_reason=doc.get("StackStatusReason", ""),
            resources={k: Resource.from_json(v) for k, v in (doc.get("Resources") or {}).items()},
            outputs=dict(doc.get("Outputs") or {}), events=list(doc.get("Events") or []),
            created=doc.get("CreationTime", ""), updated=doc.get("LastUpdatedTime", ""),
        )


def read_state(path: Path) -> StackState | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SimulateError(f"cannot read the state file {path}: {exc.strerror}") from None
    try:
        return StackState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise SimulateError(f"the state file {path} is not one simulate wrote ({exc}); move it away to start over") from None


def write_state(path: Path, state: StackState) -> None:
    """Atomically: a temporary file in the same directory, then rename over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state.to_json(), fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # mkstemp made it 0600: Data may hold secrets
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------- the console
@dataclass
class Event:
    timestamp: str
    logical_id: str
    physical_id: str
    resource_type: str
    status: str
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"Timestamp": self.timestamp, "LogicalResourceId": self.logical_id,
                "PhysicalResourceId": self.physical_id, "ResourceType": self.resource_type,
                "ResourceStatus": self.status, "ResourceStatusReason": self.reason}


def _status_colour(status: str) -> str | None:
    if status.endswith("FAILED"):
        return "red"
    if "ROLLBACK" in status:
        return "yellow"
    if status.endswith("COMPLETE"):
        return "green"
    if status.endswith("SKIPPED"):
        return "cyan"
    return None


class Console:
    """Events and outputs on stdout; notes, warnings and the progress indicator on stderr."""

    SPINNER = "|/-\\"
    PLAIN_PROGRESS_EVERY = 10.0  # seconds between "still waiting" lines when stderr is not a terminal

    def __init__(self, logical_width: int = 20, type_width: int = 20, tty: bool | None = None):
        self.logical_width, self.type_width = logical_width, type_width
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._progress_shown = False
        self._frame = 0
        self._last_plain = 0.0
        self._header = False

    def widths(self, logical_ids: list[str], types: list[str]) -> None:
        self.logical_width = max([self.logical_width, *map(len, logical_ids)])
        self.type_width = max([self.type_width, *map(len, types)])

    def note(self, text: str) -> None:
        self.clear_progress()
        click.echo(click.style("note: ", fg="cyan") + text, err=True)

    def warn(self, text: str) -> None:
        self.clear_progress()
        click.echo(click.style("warning: ", fg="yellow") + text, err=True)

    def line(self, text: str = "", **style: Any) -> None:
        self.clear_progress()
        click.echo(click.style(text, **style) if style else text)

    def event(self, ev: Event) -> None:
        self.clear_progress()
        if not self._header:
            self._header = True
            click.echo(click.style(self._row("TIMESTAMP (UTC)", "LOGICAL ID", "TYPE", "STATUS", "PHYSICAL ID", "REASON"),
                                   bold=True))
        physical = "-" if ev.resource_type == STACK_TYPE else ev.physical_id or "-"  # the stack id is in the notes
        click.echo(self._row(ev.timestamp, ev.logical_id, ev.resource_type, ev.status, physical,
                             ev.reason, colour=_status_colour(ev.status)))

    def _row(self, ts: str, logical: str, rtype: str, status: str, physical: str, reason: str,
             colour: str | None = None) -> str:
        status_cell = f"{status:<44}"
        if colour:
            status_cell = click.style(status_cell, fg=colour)
        return (f"{ts:<24}  {logical:<{self.logical_width}}  {rtype:<{self.type_width}}  {status_cell}  "
                f"{physical}  {reason}").rstrip()

    def progress(self, text: str, elapsed: float, limit: float) -> None:
        if self.tty:
            self._frame = (self._frame + 1) % len(self.SPINNER)
            click.echo(f"\r\x1b[K{self.SPINNER[self._frame]} {text}: {elapsed:.0f} s of {limit:.0f} s", nl=False,
                       err=True, color=True)
            self._progress_shown = True
        elif elapsed - self._last_plain >= self.PLAIN_PROGRESS_EVERY:
            self._last_plain = elapsed
            click.echo(f"... {text}: {elapsed:.0f} s of {limit:.0f} s", err=True)

    def progress_done(self) -> None:
        self._last_plain = 0.0
        self.clear_progress()

    def clear_progress(self) -> None:
        if self._progress_shown:
            click.echo("\r\x1b[K", nl=False, err=True, color=True)
            self._progress_shown = False


# ------------------------------------------------------------------ AWS side + the daemon
@dataclass
class Answer:
    """What came back for one request."""

    request_id: str
    response: dict[str, Any] | None  # None: no response in time
    waited: float
    limit: float
    limited_by_option: bool = False  # --wait-limit cut the wait short of the ServiceTimeout
    service_timeout: int = DEFAULT_SERVICE_TIMEOUT
    daemon_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.response is not None and self.response.get("Status") == "SUCCESS"

    @property
    def physical_id(self) -> str | None:
        value = (self.response or {}).get("PhysicalResourceId")
        return value if isinstance(value, str) and value else None

    @property
    def data(self) -> dict[str, Any]:
        data = (self.response or {}).get("Data")
        return dict(data) if isinstance(data, dict) else {}

    @property
    def no_echo(self) -> bool:
        return bool((self.response or {}).get("NoEcho"))

    def reason(self) -> str:
        """The ResourceStatusReason CloudFormation would show for a failed request."""
        rid = self.request_id
        if self.response is None:
            if self.daemon_error:
                return (f"Failed to receive a response from the custom resource: the embedded daemon stopped "
                        f"({self.daemon_error}). RequestId [{rid}]")
            if self.limited_by_option:
                return (f"No response from the custom resource within {self.limit:.0f} seconds (--wait-limit; "
                        f"CloudFormation would wait up to the ServiceTimeout of {self.service_timeout} seconds). "
                        f"Check the provider's logs for RequestId [{rid}]")
            return (f"Failed to receive a response from the custom resource within {self.service_timeout} seconds "
                    f"(ServiceTimeout). Check the provider's logs for RequestId [{rid}]")
        status = self.response.get("Status")
        if status not in ("SUCCESS", "FAILED"):
            return f"Invalid response from the custom resource: Status {status!r}. RequestId [{rid}]"
        message = self.response.get("Reason") or ""
        return f"Received response status [{status}] from custom resource. Message returned: {message} (RequestId: {rid})"


class Endpoint:
    """An AWS-compatible endpoint given with --endpoint: the same interface as emulator.Emulator."""

    def __init__(self, url: str, region: str):
        self.endpoint, self.region = url.rstrip("/"), region

    def client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(service, endpoint_url=self.endpoint, region_name=self.region,
                            config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}))

    def stop(self) -> None:
        pass


class EmbeddedDaemon:
    """The daemon (Service) on a thread of its own with its own event loop, so a handler that blocks
    its loop cannot freeze the simulated CloudFormation, which keeps its own clock."""

    def __init__(self, settings: Any):
        from ..service import Service

        self.service = Service(settings)  # raises HandlerError for a bad --handler
        self.loop: Any = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._main, name="cfn-simulate-daemon", daemon=True)

    def _main(self) -> None:
        import asyncio

        async def run() -> int:
            self.loop = asyncio.get_running_loop()
            self._started.set()
            return await self.service.run()

        try:
            asyncio.run(run())
        except BaseException as exc:  # noqa: BLE001 - reported by the simulator
            self.error = exc
        finally:
            self._started.set()

    def start(self) -> None:
        self.thread.start()
        self._started.wait(30)

    @property
    def failure(self) -> str | None:
        if self.thread.is_alive():
            return None
        return f"{type(self.error).__name__}: {self.error}" if self.error else "it exited"

    def stop(self, timeout: float = 20.0) -> bool:
        """Stop, waiting up to `timeout` s; False when it is still running (e.g. a handler blocks its loop)."""
        if not self.thread.is_alive():
            return True

        def stop() -> None:
            self.service.stop()
            poller = self.service.poller
            if poller is not None and not poller.tasks:
                self.service.stop()  # nothing in flight: cut the long poll short rather than wait it out

        with contextlib.suppress(RuntimeError):  # loop already closed
            self.loop.call_soon_threadsafe(stop)
        self.thread.join(timeout)
        if self.thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.service.stop)  # a second stop: abandon in-flight work
            self.thread.join(5)
        return not self.thread.is_alive()


_ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
             "AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION")


@contextlib.contextmanager
def _environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for the daemon's botocore; restore them after."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Backend:
    """The AWS side of one invocation (topic -> queue, bucket) and the daemon serving the queue."""

    def __init__(self, *, handlers: tuple[tuple[str, str | None], ...] = (), endpoint: str | None = None,
                 region: str | None = None):
        self.handlers, self.endpoint_url, self.requested_region = handlers, endpoint, region
        self.emulator: Any = None
        self.provider: Any = None
        self.daemon: EmbeddedDaemon | None = None
        self._exit = contextlib.ExitStack()
        self._tmp: str | None = None

    # -- set-up and tear-down
    def __enter__(self) -> "Backend":
        try:
            self._start()
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._exit.close()

    def _start(self) -> None:
        from ..config import Settings
        from .emulator import TEST_CREDENTIALS, Emulator, Provider

        if self.endpoint_url:
            self.region = self.requested_region or os.environ.get("AWS_REGION") or os.environ.get(
                "AWS_DEFAULT_REGION") or "us-east-1"
            env: dict[str, str | None] = {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_DEFAULT_REGION": self.region,
                                          "AWS_REGION": self.region, "AWS_ENDPOINT_URL_SNS": None,
                                          "AWS_ENDPOINT_URL_SQS": None, "AWS_ENDPOINT_URL_S3": None}
            import boto3

            with _environment({"AWS_EC2_METADATA_DISABLED": "true"}):  # no instance-metadata probe for this
                found = boto3.Session().get_credentials()
            if found is None:  # emulators take any credentials
                env.update(TEST_CREDENTIALS)
            self._exit.enter_context(_environment(env))
            self.emulator = Endpoint(self.endpoint_url, self.region)
        else:
            self.emulator = Emulator()
            self._exit.callback(self.emulator.stop)
            self.region = "us-east-1"
            env = {k: None for k in _ENV_KEYS}
            env.update(self.emulator.env())
            env["AWS_REGION"] = self.region
            self._exit.enter_context(_environment(env))
        # A queue of this invocation's own, even on a fresh emulator: moto keeps its state per process,
        # and a long poll cut short when the daemon stops must not swallow the next invocation's request.
        name = f"cfn-simulate-{uuid.uuid4().hex[:8]}"
        try:
            self.provider = Provider.create(self.emulator, name=name)
        except Exception as exc:
            raise SimulateError(f"cannot create the topic, queue and bucket at {self.emulator.endpoint}: {exc}") from None
        self._exit.callback(self._remove_provider)
        self.account_id = self.provider.topic_arn.split(":")[4] or "123456789012"
        self._tmp = self._exit.enter_context(tempfile.TemporaryDirectory(prefix="cfn-simulate-"))
        settings = Settings(
            queue_url=self.provider.queue_url, region=self.region, topic_arns=(self.provider.topic_arn,),
            handlers=self.handlers, state=f"sqlite://{self._tmp}/state.db", verify_signatures=False,
            allow_response_urls=(self.emulator.endpoint + "/",), wait_seconds=1, grace_period=0.2, max_backoff=1.0,
            concurrency=8, health_file=f"{self._tmp}/health.json", summary_interval=3600.0,
        )
        self.daemon = EmbeddedDaemon(settings)
        self.daemon.start()
        self._exit.callback(self._stop_daemon)

    def _stop_daemon(self) -> None:
        assert self.daemon is not None
        if not self.daemon.stop():
            click.echo("warning: the embedded daemon did not stop in time (a handler blocks it); leaving it behind",
                       err=True)

    def _remove_provider(self) -> None:
        """Remove what this invocation created (the endpoint may be shared)."""
        p = self.provider
        with contextlib.suppress(Exception):
            self.emulator.client("sns").delete_topic(TopicArn=p.topic_arn)
        with contextlib.suppress(Exception):
            self.emulator.client("sqs").delete_queue(QueueUrl=p.queue_url)
        with contextlib.suppress(Exception):
            s3 = self.emulator.client("s3")
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=p.bucket):
                for obj in page.get("Contents", []):
                    s3.delete_object(Bucket=p.bucket, Key=obj["Key"])
            s3.delete_bucket(Bucket=p.bucket)

    @property
    def topic_arn(self) -> str:
        return self.provider.topic_arn

    def describe(self) -> str:
        where = f"AWS endpoint {self.emulator.endpoint}" if self.endpoint_url else \
            f"embedded AWS emulator (moto) on {self.emulator.endpoint}"
        return f"{where}; topic {self.provider.topic_arn} -> queue {self.provider.name}; daemon in this process"

    def serves(self, resource_type: str) -> bool:
        assert self.daemon is not None
        return self.daemon.service.router.route(resource_type) is not None

    def available(self, resource_type: str) -> bool:
        """An installed handler registered as this type, not named (so not served)."""
        assert self.daemon is not None
        return any(r.pattern == resource_type for r in self.daemon.service.router.available)

    def handler_names(self) -> list[str]:
        assert self.daemon is not None
        return [r.pattern for r in self.daemon.service.router.routes()]

    # -- one request
    def stack(self, info: StackInfo) -> Any:
        from .emulator import Stack

        stack = Stack(self.provider, name=info.name)
        stack.stack_id = info.stack_id
        return stack

    def send(self, stack: Any, request: dict[str, Any], service_timeout: int, wait_limit: float | None,
             progress: Callable[[float, float], None]) -> Answer:
        limit = float(service_timeout)
        limited = wait_limit is not None and wait_limit < limit
        if limited:
            limit = float(wait_limit)  # type: ignore[arg-type]
        answer = Answer(request["RequestId"], None, 0.0, limit, limited, service_timeout)
        started = time.monotonic()
        try:
            stack.publish(request)
        except Exception as exc:  # noqa: BLE001 - an unreachable endpoint is this request's failure
            answer.daemon_error = f"publishing to SNS failed: {exc}"
            return answer
        while True:
            elapsed = time.monotonic() - started
            remaining = limit - elapsed
            try:
                response = stack.response(request, timeout=max(0.0, min(0.25, remaining)))
            except Exception as exc:  # noqa: BLE001 - garbage in the bucket counts as an invalid response
                response = {"Status": f"unreadable ({type(exc).__name__}: {exc})"}
            answer.waited = time.monotonic() - started
            if response is not None:
                answer.response = response
                return answer
            if answer.waited >= limit:
                return answer
            failure = self.daemon.failure if self.daemon else None
            if failure:
                answer.daemon_error = failure
                return answer
            progress(answer.waited, limit)


# ------------------------------------------------------------------------------- the engine
class _View:
    """A created resource as Template.resolve sees it; records reads of NoEcho Data."""

    def __init__(self, resource: Resource, touched: set[str], logical_id: str):
        self.physical_id = resource.physical_id
        self._resource, self._touched, self._logical_id = resource, touched, logical_id

    @property
    def data(self) -> Mapping[str, Any]:
        if self._resource.no_echo:
            self._touched.add(self._logical_id)
        return self._resource.data


@dataclass
class _Op:
    """One forward step of an update, for the rollback."""

    kind: str  # "create" | "update"
    logical_id: str
    before: Resource | None = None  # update: the resource as it was
    attempted: dict[str, Any] | None = None  # update: the properties sent
    current_id: str | None = None  # update: the id the resource has now (new id on a replacement)


class Engine:
    def __init__(self, backend: Backend, state: StackState, console: Console, save: Callable[[StackState], None],
                 wait_limit: float | None = None):
        self.backend, self.state, self.console, self.save = backend, state, console, save
        self.wait_limit = wait_limit
        self.stack = backend.stack(state.info)
        self.events: list[Event] = []
        self.failures: list[Event] = []  # resource events ending in _FAILED, for the summary

    # ---------------------------------------------------------------- helpers
    def lookup(self, logical_id: str, touched: set[str] | None = None) -> _View | None:
        resource = self.state.resources.get(logical_id)
        if resource is None or resource.status.endswith("FAILED"):
            return None
        return _View(resource, touched if touched is not None else set(), logical_id)

    def emit(self, logical_id: str, physical_id: str, rtype: str, status: str, reason: str = "") -> None:
        ev = Event(_now(), logical_id, physical_id, rtype, status, reason)
        self.events.append(ev)
        if status.endswith("_FAILED") and rtype != STACK_TYPE:
            self.failures.append(ev)
        self.state.events.append(ev.to_json())
        self.console.event(ev)

    def stack_status(self, status: str, reason: str = "") -> None:
        self.state.status, self.state.status_reason = status, reason
        self.state.updated = _now()
        self.emit(self.state.name, self.state.stack_id, STACK_TYPE, status, reason)
        self.save(self.state)

    def _request(self, kind: str, logical_id: str, rtype: str, props: dict[str, Any],
                 old: dict[str, Any] | None = None, physical_id: str | None = None) -> tuple[dict[str, Any], int]:
        timeout = service_timeout(props)
        return self.stack.request(kind, logical_id, rtype, properties=props, old_properties=old,
                                  physical_id=physical_id), timeout

    def _send(self, request: dict[str, Any], timeout: int) -> Answer:
        what = f"{request['LogicalResourceId']} {request['RequestType']}: waiting for the response"
        answer = self.backend.send(self.stack, request, timeout, self.wait_limit,
                                   lambda elapsed, limit: self.console.progress(what, elapsed, limit))
        self.console.progress_done()
        return answer

    def _outputs(self, template: Template) -> dict[str, dict[str, Any]]:
        outputs = {}
        for name in template.outputs_defs:
            touched: set[str] = set()
            entry = template.output(name, lambda lid: self.lookup(lid, touched))
            if touched:
                entry["Value"] = "****"  # NoEcho: CloudFormation masks it too
            outputs[name] = entry
        return outputs

    # ------------------------------------------------------------ resource steps
    def create_resource(self, template: Template, logical_id: str) -> bool:
        rtype = template.resources[logical_id]["Type"]
        self.emit(logical_id, "", rtype, "CREATE_IN_PROGRESS")
        try:
            props = template.properties(logical_id, self.lookup)
            request, timeout = self._request("Create", logical_id, rtype, props)
        except TemplateError as exc:
            self.emit(logical_id, "", rtype, "CREATE_FAILED", str(exc))
            return False
        self.emit(logical_id, "", rtype, "CREATE_IN_PROGRESS", "Resource creation Initiated")
        answer = self._send(request, timeout)
        if answer.response is None:
            # CloudFormation never learnt an id: it makes one up for the rollback Delete
            physical_id = generated_physical_id(self.state.name, logical_id)
        else:
            physical_id = answer.physical_id or generated_physical_id(self.state.name, logical_id)
        resource = Resource(rtype, physical_id, props, answer.data, answer.no_echo, "CREATE_FAILED")
        self.state.resources[logical_id] = resource
        if not answer.ok:
            self.emit(logical_id, physical_id if answer.response else "", rtype, "CREATE_FAILED", answer.reason())
            self.save(self.state)
            return False
        missing = self._missing_attributes(template, logical_id, resource)
        if missing:
            self.emit(logical_id, physical_id, rtype, "CREATE_FAILED", missing)
            self.save(self.state)
            return False
        resource.status = "CREATE_COMPLETE"
        self.emit(logical_id, physical_id, rtype, "CREATE_COMPLETE")
        self.save(self.state)
        return True

    def _missing_attributes(self, template: Template, logical_id: str, resource: Resource) -> str:
        missing = [a for a in template.attributes_used(logical_id) if a not in resource.data]
        if not missing:
            return ""
        return (f"CustomResource attribute error: Vendor response doesn't contain {missing[0]} key in object "
                f"{self.state.stack_id}|{logical_id}|{resource.physical_id} in region {self.state.region}")

    def delete_resource(self, logical_id: str, resource: Resource, policy: str = "Delete",
                        rolling_back_create: bool = False, physical_id: str | None = None,
                        policy_name: str = "DeletionPolicy") -> bool:
        """Delete one resource (or one old id of it, for cleanup); True when it is gone."""
        physical_id = physical_id or resource.physical_id
        if policy == "Retain" or (policy == "RetainExceptOnCreate" and not rolling_back_create):
            self.emit(logical_id, physical_id, resource.type, "DELETE_SKIPPED", f"{policy_name} {policy}: left in place")
            return True
        self.emit(logical_id, physical_id, resource.type, "DELETE_IN_PROGRESS")
        try:
            request, timeout = self._request("Delete", logical_id, resource.type, resource.properties,
                                             physical_id=physical_id)
        except TemplateError:
            request, timeout = self.stack.request("Delete", logical_id, resource.type, properties=resource.properties,
                                                  physical_id=physical_id), DEFAULT_SERVICE_TIMEOUT
        answer = self._send(request, timeout)
        if not answer.ok:
            self.emit(logical_id, physical_id, resource.type, "DELETE_FAILED", answer.reason())
            resource.status = "DELETE_FAILED"
            return False
        self.emit(logical_id, physical_id, resource.type, "DELETE_COMPLETE")
        return True

    # --------------------------------------------------------------- operations
    def create(self, template: Template) -> str:
        self.state.created = _now()
        self.stack_status("CREATE_IN_PROGRESS", "User Initiated")
        created: list[str] = []
        failed: str | None = None
        for logical_id in template.custom:
            created.append(logical_id)
            if not self.create_resource(template, logical_id):
                failed = logical_id
                break
        if failed is None:
            try:
                self.state.outputs = self._outputs(template)
            except TemplateError as exc:
                failed = "Outputs"
                self.console.warn(f"outputs: {exc}")
        if failed is None:
            self.stack_status("CREATE_COMPLETE")
            return self.state.status
        self.stack_status("ROLLBACK_IN_PROGRESS",
                          f"The following resource(s) failed to create: [{failed}]. Rollback requested by user.")
        ok = True
        for logical_id in reversed(created):
            resource = self.state.resources.get(logical_id)
            if resource is None:
                continue
            if self.delete_resource(logical_id, resource, template.policy(logical_id, "DeletionPolicy"),
                                    rolling_back_create=True):
                del self.state.resources[logical_id]
            else:
                ok = False
            self.save(self.state)
        self.state.outputs = {}
        self.stack_status("ROLLBACK_COMPLETE" if ok else "ROLLBACK_FAILED")
        return self.state.status

    def changes(self, old: Template, new: Template) -> bool:
        """Whether an update to `new` would change anything (resources or outputs)."""
        if set(new.custom) != set(self.state.resources):
            return True
        for logical_id in new.custom:
            try:
                if new.properties(logical_id, self.lookup) != self.state.resources[logical_id].properties:
                    return True
            except TemplateError:
                return True
        try:
            return self._outputs(new) != self.state.outputs
        except TemplateError:
            return True

    def update(self, old: Template, new: Template, overrides: Mapping[str, str] | None = None,
               template_file: str | None = None) -> str:
        """Update to `new` (made with parameter `overrides`, from `template_file`)."""
        self.stack_status("UPDATE_IN_PROGRESS", "User Initiated")
        ops: list[_Op] = []
        failed: list[tuple[str, str]] = []  # (logical id, "create" | "update")
        for logical_id in new.custom:
            rtype = new.resources[logical_id]["Type"]
            existing = self.state.resources.get(logical_id)
            if existing is None:
                ops.append(_Op("create", logical_id))
                if not self.create_resource(new, logical_id):
                    failed.append((logical_id, "create"))
                    break
                continue
            try:
                props = new.properties(logical_id, self.lookup)
            except TemplateError as exc:
                self.emit(logical_id, existing.physical_id, rtype, "UPDATE_FAILED", str(exc))
                failed.append((logical_id, "update"))
                break
            if props == existing.properties:
                continue
            op = _Op("update", logical_id, copy.deepcopy(existing), props, existing.physical_id)
            ops.append(op)
            if not self._update_resource(new, logical_id, existing, props, op):
                failed.append((logical_id, "update"))
                break
        if not failed:
            try:
                outputs = self._outputs(new)
            except TemplateError as exc:
                self.console.warn(f"outputs: {exc}")
                failed.append(("Outputs", "update"))
        if failed:
            return self._rollback_update(old, new, ops, failed)

        self.state.outputs = outputs
        self.state.template = dict(new.doc)
        self.state.parameters = new.parameters
        if overrides is not None:
            self.state.parameter_overrides = dict(overrides)
        if template_file:
            self.state.template_file = template_file
        self.stack_status("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS")
        # cleanup: old ids of replaced resources, then resources the new template no longer has
        for op in reversed(ops):
            if op.kind == "update" and op.before and op.current_id != op.before.physical_id:
                self.delete_resource(op.logical_id, op.before, new.policy(op.logical_id, "UpdateReplacePolicy"),
                                     physical_id=op.before.physical_id, policy_name="UpdateReplacePolicy")
                self.save(self.state)
        removed = [k for k in reversed(old.order) if k in self.state.resources and k not in new.custom]
        removed = [k for k in self.state.resources if k not in new.custom and k not in removed] + removed
        for logical_id in removed:
            resource = self.state.resources.pop(logical_id)
            policy = old.policy(logical_id, "DeletionPolicy") if logical_id in old.all_resources else "Delete"
            if not self.delete_resource(logical_id, resource, policy):
                self.console.warn(f"{logical_id} ({resource.physical_id}) could not be deleted and is no longer part "
                                  "of the stack (CloudFormation leaves it behind too)")
            self.save(self.state)
        self.stack_status("UPDATE_COMPLETE")
        return self.state.status

    def _update_resource(self, template: Template, logical_id: str, existing: Resource, props: dict[str, Any],
                         op: _Op) -> bool:
        rtype = existing.type
        self.emit(logical_id, existing.physical_id, rtype, "UPDATE_IN_PROGRESS")
        try:
            request, timeout = self._request("Update", logical_id, rtype, props, old=existing.properties,
                                             physical_id=existing.physical_id)
        except TemplateError as exc:
            self.emit(logical_id, existing.physical_id, rtype, "UPDATE_FAILED", str(exc))
            return False
        answer = self._send_update(logical_id, rtype, request, timeout, existing.physical_id)
        if answer is None:
            return False
        new_id = answer.physical_id or existing.physical_id
        updated = Resource(rtype, new_id, props, answer.data, answer.no_echo, "UPDATE_COMPLETE")
        self.state.resources[logical_id] = updated
        op.current_id = new_id
        missing = self._missing_attributes(template, logical_id, updated)
        if missing:
            updated.status = "UPDATE_FAILED"
            self.emit(logical_id, new_id, rtype, "UPDATE_FAILED", missing)
            self.save(self.state)
            return False
        self.emit(logical_id, new_id, rtype, "UPDATE_COMPLETE")
        self.save(self.state)
        return True

    def _send_update(self, logical_id: str, rtype: str, request: dict[str, Any], timeout: int,
                     current_id: str) -> Answer | None:
        """Send an Update. FAILED: the resource is marked UPDATE_FAILED and None comes back;
        otherwise the answer, a new physical id noted as CloudFormation's events note a replacement."""
        answer = self._send(request, timeout)
        if not answer.ok:
            self.emit(logical_id, current_id, rtype, "UPDATE_FAILED", answer.reason())
            self.state.resources[logical_id].status = "UPDATE_FAILED"
            self.save(self.state)
            return None
        if (answer.physical_id or current_id) != current_id:
            self.emit(logical_id, answer.physical_id, rtype, "UPDATE_IN_PROGRESS",
                      "Requested update required the provider to create a new physical resource")
        return answer

    def _rollback_update(self, old: Template, new: Template, ops: list[_Op], failed: list[tuple[str, str]]) -> str:
        parts = []
        for kind in ("create", "update"):
            names = [name for name, k in failed if k == kind]
            if names:
                parts.append(f"The following resource(s) failed to {kind}: [{', '.join(names)}].")
        self.stack_status("UPDATE_ROLLBACK_IN_PROGRESS", " ".join(parts))
        ok = True
        cleanup: list[tuple[str, Resource, str]] = []  # (logical id, resource, id to delete)
        for op in reversed(ops):
            if op.kind == "create":
                resource = self.state.resources.get(op.logical_id)
                if resource is None:
                    continue
                if self.delete_resource(op.logical_id, resource, new.policy(op.logical_id, "DeletionPolicy"),
                                        rolling_back_create=True):
                    del self.state.resources[op.logical_id]
                else:
                    ok = False
                self.save(self.state)
                continue
            assert op.before is not None and op.attempted is not None and op.current_id is not None
            ok = self._rollback_resource(op, cleanup) and ok
        self.stack_status("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS")
        for logical_id, resource, physical_id in cleanup:
            self.delete_resource(logical_id, resource, old.policy(logical_id, "UpdateReplacePolicy"),
                                 physical_id=physical_id, policy_name="UpdateReplacePolicy")
            self.save(self.state)
        with contextlib.suppress(TemplateError):
            self.state.outputs = self._outputs(old)
        self.stack_status("UPDATE_ROLLBACK_COMPLETE" if ok else "UPDATE_ROLLBACK_FAILED")
        return self.state.status

    def _rollback_resource(self, op: _Op, cleanup: list[tuple[str, Resource, str]]) -> bool:
        """The rollback Update: the old properties, to the id the resource has now."""
        before, logical_id = op.before, op.logical_id
        assert before is not None and op.attempted is not None and op.current_id is not None
        rtype = before.type
        self.emit(logical_id, op.current_id, rtype, "UPDATE_IN_PROGRESS")
        request, timeout = self.stack.request("Update", logical_id, rtype, properties=before.properties,
                                              old_properties=op.attempted, physical_id=op.current_id), \
            service_timeout(before.properties, strict=False)
        answer = self._send_update(logical_id, rtype, request, timeout, op.current_id)
        if answer is None:
            return False
        final_id = answer.physical_id or op.current_id
        self.state.resources[logical_id] = Resource(rtype, final_id, before.properties, answer.data, answer.no_echo,
                                                    "UPDATE_COMPLETE")
        self.emit(logical_id, final_id, rtype, "UPDATE_COMPLETE")
        attempted = Resource(rtype, op.current_id, op.attempted)
        for physical_id, props in ((op.current_id, attempted), (before.physical_id, before)):
            if physical_id != final_id and all(physical_id != c[2] for c in cleanup):
                cleanup.append((logical_id, props, physical_id))
        self.save(self.state)
        return True

    def delete(self, template: Template | None) -> str:
        self.stack_status("DELETE_IN_PROGRESS", "User Initiated")
        order = [k for k in reversed(template.order) if k in self.state.resources] if template else []
        order = [k for k in reversed(list(self.state.resources)) if k not in order] + order
        failed: list[str] = []
        for logical_id in order:
            resource = self.state.resources[logical_id]
            blockers = [d for d in (template.dependents(logical_id) if template and logical_id in template.resources
                                    else []) if d in failed]
            if blockers:
                failed.append(logical_id)  # CloudFormation keeps what a surviving resource depends on
                continue
            policy = template.policy(logical_id, "DeletionPolicy") if template else "Delete"
            if self.delete_resource(logical_id, resource, policy):
                del self.state.resources[logical_id]
            else:
                failed.append(logical_id)
            self.save(self.state)
        if failed:
            self.stack_status("DELETE_FAILED", f"The following resource(s) failed to delete: [{', '.join(failed)}]. ")
        else:
            self.state.outputs = {}
            self.stack_status("DELETE_COMPLETE")
        return self.state.status


def service_timeout(props: Mapping[str, Any], strict: bool = True) -> int:
    raw = props.get("ServiceTimeout")
    if raw is None:
        return DEFAULT_SERVICE_TIMEOUT
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= DEFAULT_SERVICE_TIMEOUT:
        if not strict:
            return DEFAULT_SERVICE_TIMEOUT
        raise TemplateError(f"Properties validation failed: ServiceTimeout {raw!r} must be an integer from 1 to 3600")
    return value


def generated_physical_id(stack_name: str, logical_id: str) -> str:
    """An id in CloudFormation's own style, for a resource whose Create was never answered."""
    suffix = "".join(random.choices(string.ascii_uppercase + string.digits, k=12))
    return f"{stack_name[:30]}-{logical_id[:30]}-{suffix}"


# ---------------------------------------------------------------------------- the commands
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")


def default_stack_name(template_path: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9-]+", "-", Path(template_path).stem).strip("-") or "stack"
    if not stem[0].isalpha():
        stem = "stack-" + stem
    return stem[:128]


def _state_path(stack_name: str | None, state_file: str | None, must_exist: bool) -> tuple[Path, str | None]:
    if state_file:
        return Path(state_file), stack_name
    if stack_name:
        return Path(DEFAULT_STATE_DIR) / f"{stack_name}.json", stack_name
    if must_exist:
        found = sorted(Path(DEFAULT_STATE_DIR).glob("*.json"))
        if len(found) == 1:
            return found[0], None
        if not found:
            raise SimulateError(f"no simulated stack in ./{DEFAULT_STATE_DIR}/: give --stack-name or --state-file")
        raise SimulateError(f"several simulated stacks in ./{DEFAULT_STATE_DIR}/ "
                            f"({', '.join(p.stem for p in found)}): give --stack-name")
    raise AssertionError("unreachable")


def _handlers(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    from ..pipeline.router import parse_handler_option

    try:
        return tuple(parse_handler_option(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _parameters(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_parameters(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--stack-name", help="Name of the simulated stack (create: default from the template's "
                                          "file name; update/delete: default the only stack in ./.cfn-simulate/)."),
        click.option("--state-file", type=click.Path(dir_okay=False),
                     help="Where the simulated stack is kept between calls (default ./.cfn-simulate/STACK.json)."),
        click.option("--handler", "handlers", multiple=True, callback=_handlers, metavar="TYPE=MODULE[:ATTR]",
                     help="Serve ResourceType TYPE with this handler, as for `run` (repeatable); the current "
                          "directory is importable. A bare TYPE serves the built-in or installed entry point "
                          "of that name (e.g. --handler Custom::Echo); nothing else is served."),
        click.option("--endpoint", metavar="URL",
                     help="Use this AWS-compatible endpoint (e.g. a running moto or LocalStack) instead of "
                          "the embedded moto server."),
        click.option("--region", help="With --endpoint: the region to use (default AWS_REGION / AWS_DEFAULT_REGION "
                                      "/ us-east-1). The embedded emulator is us-east-1."),
        click.option("--wait-limit", type=click.FloatRange(0.1, 3600), metavar="SECONDS",
                     help="Wait at most this long for each response, even when ServiceTimeout allows more "
                          "(CloudFormation waits the whole ServiceTimeout, default 3600 s)."),
        click.option("--logs/--no-logs", "show_logs", default=False,
                     help="Also show the daemon's log lines (handler tracebacks included) on stderr."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def simulate() -> None:
    """A local stand-in for CloudFormation, to try handlers: drive a template's custom
    resources through SNS -> SQS -> the daemon -> a presigned S3 URL, with CloudFormation's
    semantics (dependency order, OldResourceProperties, replacement and its cleanup Delete,
    rollbacks, ServiceTimeout, Fn::GetAtt on the answers' Data, Outputs).

    \b
      cfn-provider simulate create template.yaml --handler Custom::Thing=mything
      cfn-provider simulate update --template template-v2.yaml --parameter Size=4
      cfn-provider simulate delete

    Everything runs on this machine (an embedded moto server, unless --endpoint). Only custom
    resources are simulated; other resources are not created, and a Ref or Fn::GetAtt to one
    gives a placeholder. Each custom resource's ServiceToken is replaced by the simulated topic.
    The stack is kept in ./.cfn-simulate/STACK.json. Exit status: 0 when the stack ends
    CREATE_COMPLETE / UPDATE_COMPLETE / DELETE_COMPLETE, 1 otherwise (failed, rolled back),
    2 when nothing could be done (bad template, options or stack state).
    """


@simulate.command("create")
@click.argument("template_path", metavar="TEMPLATE", type=click.Path(dir_okay=False))
@click.option("--parameter", "parameters", multiple=True, callback=_parameters, metavar="KEY=VALUE",
              help="A template parameter (repeatable); others take their Default.")
@_common
def create_command(template_path: str, parameters: dict[str, str], **options: Any) -> None:
    """Create the stack from TEMPLATE (YAML or JSON): Create requests in dependency order; on a
    failure, the rollback (Delete of what was created)."""
    stack_name = options["stack_name"] or default_stack_name(template_path)
    _check_stack_name(stack_name)
    path, _ = _state_path(stack_name, options["state_file"], must_exist=False)
    existing = read_state(path)
    if existing is not None:
        hint = (" and can only be deleted: cfn-provider simulate delete" if existing.status == "ROLLBACK_COMPLETE"
                else ": update it, or delete it first")
        raise SimulateError(f"Stack [{existing.name}] already exists ({existing.status}, in {path}){hint}")
    doc = load_template_or_fail(template_path)
    make_template(doc, parameters, StackInfo.new(stack_name), None)  # a bad template fails before anything starts

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        template = make_template(doc, parameters, engine.state.info, console)
        engine.state.parameters = template.parameters
        _announce(console, backend, template, engine.state, path)
        return engine.create(template)

    def new_state(backend: Backend) -> StackState:
        info = StackInfo.new(stack_name, backend.region, backend.account_id)
        return StackState(stack_name, info.stack_id, info.region, info.account_id, doc,
                          template_file=str(Path(template_path).resolve()), parameter_overrides=parameters)

    _run("create", path, options, new_state, operation)


@simulate.command("update")
@click.option("--template", "template_path", type=click.Path(dir_okay=False),
              help="The new template (default: the stack's current one, e.g. to change parameters).")
@click.option("--parameter", "parameters", multiple=True, callback=_parameters, metavar="KEY=VALUE",
              help="A template parameter (repeatable). Values given before are kept unless given again "
                   "(as `aws cloudformation deploy` does); others take their Default.")
@_common
def update_command(template_path: str | None, parameters: dict[str, str], **options: Any) -> None:
    """Update the stack: Update requests (with OldResourceProperties) for changed resources,
    Create for new ones; then the cleanup phase Deletes replaced ids and removed resources. On a
    failure, the rollback: Update back to the old properties, Delete of what was created."""
    if options["stack_name"]:
        _check_stack_name(options["stack_name"])
    path, _ = _state_path(options["stack_name"], options["state_file"], must_exist=True)
    state = read_state(path)
    if state is None:
        raise SimulateError(f"Stack [{options['stack_name'] or path.stem}] does not exist (no state file {path}): "
                            "create it first")
    if state.status not in UPDATABLE:
        raise SimulateError(f"Stack [{state.name}] is in {state.status} state and can not be updated"
                            + (": delete it (cfn-provider simulate delete)" if state.status != "DELETE_COMPLETE" else ""))
    doc = load_template_or_fail(template_path) if template_path else state.template
    declared = doc.get("Parameters") if isinstance(doc.get("Parameters"), dict) else {}
    overrides = {k: v for k, v in state.parameter_overrides.items() if k in declared}
    overrides.update(parameters)
    new = make_template(doc, overrides, state.info, None)  # a bad template fails before anything starts
    changed_types = [k for k in new.custom if k in state.resources and state.resources[k].type != new.resources[k]["Type"]]
    if changed_types:
        raise SimulateError("Update of resource type is not permitted. The new template modifies resource type "
                            f"of the following resources: [{', '.join(changed_types)}]")

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        st = engine.state
        old = make_template(st.template, st.parameter_overrides, st.info, None)
        new = make_template(doc, overrides, st.info, console)
        _announce(console, backend, new, st, path)
        if not engine.changes(old, new):
            st.template, st.parameter_overrides, st.parameters = doc, overrides, new.parameters
            engine.save(st)
            console.line("No updates are to be performed.")
            return "NO_CHANGES"
        return engine.update(old, new, overrides, str(Path(template_path).resolve()) if template_path else None)

    _run("update", path, options, lambda _backend: state, operation)


@simulate.command("delete")
@_common
def delete_command(**options: Any) -> None:
    """Delete the stack: Delete requests in reverse dependency order (DeletionPolicy Retain is
    honoured); the state file goes once the stack is DELETE_COMPLETE."""
    if options["stack_name"]:
        _check_stack_name(options["stack_name"])
    try:
        path, _ = _state_path(options["stack_name"], options["state_file"], must_exist=True)
    except SimulateError as exc:
        if "no simulated stack" not in str(exc):
            raise
        click.echo(f"No simulated stack to delete ({exc.message.split(':')[0]}).")
        return
    state = read_state(path)
    if state is None:
        click.echo(f"Stack [{options['stack_name'] or path.stem}] does not exist (no state file {path}): nothing to delete.")
        return

    def operation(engine: Engine, backend: Backend, console: Console) -> str:
        st = engine.state
        try:
            template: Template | None = make_template(st.template, st.parameter_overrides, st.info, None)
        except SimulateError:
            template = None
        _announce(console, backend, template, st, path)
        return engine.delete(template)

    _run("delete", path, options, lambda _backend: state, operation)


def _check_stack_name(name: str) -> None:
    if not _STACK_NAME.fullmatch(name):
        raise SimulateError(f"1 validation error detected: Value '{name}' at 'stackName' failed to satisfy constraint: "
                            "a letter, then letters, digits and hyphens, at most 128 characters")


def load_template_or_fail(path: str) -> dict[str, Any]:
    try:
        return load_template(path)
    except TemplateError as exc:
        raise SimulateError(str(exc)) from None


def make_template(doc: Mapping[str, Any], parameters: Mapping[str, str], info: StackInfo,
                  console: Console | None) -> Template:
    try:
        template = Template(doc, parameters, info, on_warning=console.warn if console else None)
    except TemplateError as exc:
        raise SimulateError(str(exc)) from None
    return template


def _announce(console: Console, backend: Backend, template: Template | None, state: StackState, path: Path) -> None:
    """Say what is about to be simulated (after the template's own notes)."""
    console.note(f"stack {state.name} ({state.stack_id}), kept in {path}")
    console.note(backend.describe() + "; handlers: " + (", ".join(backend.handler_names()) or "none"))
    if template is None:
        return
    for note in template.notes:
        console.note(note)
    custom = template.custom
    if custom:
        console.note(f"ServiceToken of {', '.join(custom)} replaced by the simulated topic {backend.topic_arn}")
    for rtype in sorted({template.resources[k]["Type"] for k in custom}):
        if not backend.serves(rtype):
            hint = f"--handler '{rtype}'" if backend.available(rtype) else f"--handler '{rtype}=MODULE[:ATTR]'"
            console.warn(f"no handler serves {rtype}: its requests will be answered FAILED (add {hint})")
    types = [template.resources[k]["Type"] for k in template.order] + [r.type for r in state.resources.values()]
    console.widths(list(template.resources) + list(state.resources) + [state.name], types + [STACK_TYPE])


def _run(kind: str, path: Path, options: Mapping[str, Any], make_state: Callable[[Backend], StackState],
         operation: Callable[[Engine, Backend, Console], str]) -> None:
    from .. import logs
    from ..pipeline.router import HandlerError

    if options["show_logs"]:
        logs.configure("auto", "info", stream=sys.stderr)
    else:
        logs.configure("auto", "error", stream=sys.stderr)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --handler mymodule, from the author's working directory
    console = Console()
    status = ""
    engine: Engine | None = None
    try:
        with Backend(handlers=options["handlers"], endpoint=options["endpoint"], region=options["region"]) as backend:
            state = make_state(backend)

            def save(st: StackState) -> None:
                write_state(path, st)

            engine = Engine(backend, state, console, save, options["wait_limit"])
            try:
                status = operation(engine, backend, console)
            except KeyboardInterrupt:
                console.clear_progress()
                if state.status.endswith("IN_PROGRESS"):
                    engine.stack_status(INTERRUPTED[kind], "interrupted by the user (Ctrl-C): the resources created so "
                                                           "far are in the state file; delete the stack to clean up")
                raise
    except HandlerError as exc:
        raise SimulateError(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        _exit(130)
    if status == "NO_CHANGES":
        _exit(0)
    if status == "DELETE_COMPLETE":
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    _summary(console, state, status, path, engine.failures if engine else [])
    _exit(0 if status in COMPLETE else 1)


def _summary(console: Console, state: StackState, status: str, path: Path, failures: list[Event]) -> None:
    console.line()
    console.line(f"Stack {state.name}: {status}", bold=True, fg=_status_colour(status))
    if state.status_reason and status not in COMPLETE:
        console.line(f"  {state.status_reason}")
    for ev in failures:
        console.line(f"  {ev.logical_id} {ev.status}: {ev.reason}", fg="red")
    if state.outputs and status in ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"):
        console.line("Outputs:")
        width = max(map(len, state.outputs))
        for name, entry in state.outputs.items():
            export = f"  (Export: {entry['ExportName']})" if entry.get("ExportName") else ""
            console.line(f"  {name:<{width}}  {entry['Value']}{export}")
    if status == "DELETE_COMPLETE":
        console.line(f"(state file {path} removed)")
    else:
        console.line(f"(state: {path})")


def _exit(code: int) -> None:
    """Exit; a sync handler still running on an abandoned request cannot be killed and Python would
    wait for its thread, so leave it behind (as `cfn-provider run` does)."""
    stuck = [t.name for t in threading.enumerate() if t.name.startswith("handler") and t.is_alive()]
    if stuck and HARD_EXIT_PAST_STUCK_HANDLERS:
        click.echo(f"note: leaving {len(stuck)} handler thread(s) still running behind", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

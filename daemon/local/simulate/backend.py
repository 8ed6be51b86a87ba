"""The AWS side of a simulation: topic -> queue and bucket on the embedded moto server (or an
--endpoint), the embedded daemon serving the queue, and one request's round trip (`send`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..template import StackInfo
from . import interrupts
from .embedded import EmbeddedDaemon
from .fast_polls import FastPolls
from .remember import Remembered
from .state import DEFAULT_SERVICE_TIMEOUT, SimulateError
from .template_functions import TemplateDefaults

if TYPE_CHECKING:
    from ...config import Settings


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
                return (
                    f"Failed to receive a response from the custom resource: the embedded daemon stopped "
                    f"({self.daemon_error}). RequestId [{rid}]"
                )
            if self.limited_by_option:
                return (
                    f"No response from the custom resource within {self.limit:.0f} seconds (--wait-limit; "
                    f"CloudFormation would wait up to the ServiceTimeout of {self.service_timeout} seconds). "
                    f"Check the provider's logs for RequestId [{rid}]"
                )
            return (
                f"Failed to receive a response from the custom resource within {self.service_timeout} seconds "
                f"(ServiceTimeout). Check the provider's logs for RequestId [{rid}]"
            )
        status = self.response.get("Status")
        if status not in ("SUCCESS", "FAILED"):
            return f"Invalid response from the custom resource: Status {status!r}. RequestId [{rid}]"
        message = self.response.get("Reason") or ""
        return (
            f"Received response status [{status}] from custom resource. Message returned: {message} (RequestId: {rid})"
        )


class Endpoint:
    """An AWS-compatible endpoint given with --endpoint: the same interface as emulator.Emulator."""

    def __init__(self, url: str, region: str):
        self.endpoint, self.region = url.rstrip("/"), region

    def client(self, service: str) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        pass


_ENV_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SNS",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)


@contextlib.contextmanager
def _environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for the daemon's botocore; restore them after."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(saved)


def _set_environment(values: Mapping[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Backend:
    """The AWS side of one invocation (topic -> queue, bucket) and the daemon serving the queue."""

    def __init__(
        self,
        remembered: Remembered,
        state_path: Path,
        emulator_record: Any = None,
        defaults: TemplateDefaults | None = None,
    ):
        """`remembered`: the handlers, function settings, folders, endpoint and poll speed to use;
        `state_path` and `emulator_record`: the stack whose own emulator to use (or start) when there
        is no endpoint; `defaults`: what the template's own Lambda functions give, under `remembered`."""
        self.remembered, self.state_path, self.emulator_record = remembered, state_path, emulator_record
        self.defaults = defaults or TemplateDefaults()
        self.handler_options, self.function_options = self.defaults.merged(remembered.handlers, remembered.functions)
        self.endpoint_url, self.requested_region = remembered.endpoint, remembered.region
        self.warnings: list[str] = list(self.defaults.notes)  # said before the operation starts
        self.emulator: Any = None
        self.provider: Any = None
        self.daemon: EmbeddedDaemon | None = None
        self._exit = contextlib.ExitStack()
        self._tmp: str | None = None

    # -- set-up and tear-down
    def __enter__(self) -> Backend:
        try:
            self._start()
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._exit.close()

    def _start(self) -> None:
        from ..emulator import Provider

        if self.endpoint_url:
            self._use_endpoint(self.endpoint_url)
        else:
            self._use_stack_emulator()
        # A queue of this invocation's own, even on a fresh emulator: moto keeps its state per process,
        # and a long poll cut short when the daemon stops must not swallow the next invocation's request.
        name = f"cfn-simulate-{uuid.uuid4().hex[:8]}"
        try:
            self.provider = Provider.create(self.emulator, name=name)
        except Exception as exc:
            raise SimulateError(
                f"cannot create the topic, queue and bucket at {self.emulator.endpoint}: {exc}"
            ) from None
        self._exit.callback(self._remove_provider)
        self.account_id = self.provider.topic_arn.split(":")[4] or "123456789012"
        self._tmp = self._exit.enter_context(tempfile.TemporaryDirectory(prefix="cfn-simulate-"))
        self.daemon = EmbeddedDaemon(self._settings(self._tmp))
        self.daemon.start()
        self._exit.callback(self._stop_daemon)

    def _use_endpoint(self, endpoint_url: str) -> None:
        """--endpoint: its region (the one asked for, else the environment's), the environment pointed
        at it, and the emulators' test credentials when there are no others."""
        import boto3

        from ..emulator import TEST_CREDENTIALS

        self.region = (
            self.requested_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        )
        env: dict[str, str | None] = {
            "AWS_ENDPOINT_URL": endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL_SNS": None,
            "AWS_ENDPOINT_URL_SQS": None,
            "AWS_ENDPOINT_URL_S3": None,
        }
        with _environment({"AWS_EC2_METADATA_DISABLED": "true"}):  # no instance-metadata probe for this
            found = boto3.Session().get_credentials()
        if found is None:  # emulators take any credentials
            env.update(TEST_CREDENTIALS)
        self._exit.enter_context(_environment(env))
        self.emulator = Endpoint(endpoint_url, self.region)

    def _use_stack_emulator(self) -> None:
        """No endpoint: the stack's own emulator process (reused while it runs, else a new one)."""
        from .stack_emulator import StackEmulator

        had = self.emulator_record is not None
        self.emulator = StackEmulator.attach(self.emulator_record, self.state_path)
        self.emulator_record = self.emulator.record
        if not self.emulator.reused:  # a create that fails before its stack is saved keeps nothing running
            self._exit.callback(lambda: None if self.state_path.exists() else self.emulator.discard())
        if had and not self.emulator.reused:
            self.warnings.append(
                "the stack's emulator process is gone (stopped, or the machine restarted): a new "
                "one starts, without what earlier operations made in it"
            )
        self.region = "us-east-1"
        env: dict[str, str | None] = {k: None for k in _ENV_KEYS}
        env.update(self.emulator.env())
        env["AWS_REGION"] = self.region
        self._exit.enter_context(_environment(env))

    def _settings(self, tmp: str) -> Settings:
        """The embedded daemon's Settings: the provider's queue, state and health file under `tmp`, fast stops."""
        from ...config import Settings

        return Settings(
            queue_url=self.provider.queue_url,
            region=self.region,
            topic_arns=(self.provider.topic_arn,),
            handlers=self._handlers(),
            functions=self._functions(),
            handler_paths=tuple(self.remembered.handler_paths),
            state=f"sqlite://{tmp}/state.db",
            verify_signatures=False,
            allow_response_urls=(self.emulator.endpoint + "/",),
            wait_seconds=1,
            grace_period=0.2,
            max_backoff=1.0,
            concurrency=8,
            health_file=f"{tmp}/health.json",
            summary_interval=3600.0,
        )

    def _handlers(self) -> tuple[tuple[str, Any], ...]:
        """The remembered --handler values; with --poll-every, each loaded and served through FastPolls."""
        from ...pipeline.router import Router, parse_handler_option

        parsed = tuple(parse_handler_option(h) for h in self.handler_options)
        every = self.remembered.poll_every
        if every is None:
            return parsed
        router = Router(parsed, functions=self._functions(), handler_paths=self.remembered.handler_paths)
        return tuple((r.pattern, FastPolls(r.handler(), every, r.spec)) for r in router.routes())

    def _functions(self) -> dict[str, Any]:
        """The function settings (the template's, under --function's), each a lambda: handler's
        (FunctionSettingError, exit 2, naming one that is not)."""
        from ...functions.options import check_served
        from ...functions.settings import parse_options
        from ...pipeline.router import parse_handler_option

        functions = parse_options(self.function_options)
        check_served([parse_handler_option(h) for h in self.handler_options], functions)
        return functions

    def _stop_daemon(self) -> None:
        assert self.daemon is not None
        if not self.daemon.stop():
            click.echo(
                "warning: the embedded daemon did not stop in time (a handler blocks it); leaving it behind", err=True
            )

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
        arn: str = self.provider.topic_arn
        return arn

    def describe(self) -> str:
        if self.endpoint_url:
            where = f"AWS endpoint {self.emulator.endpoint}"
        else:
            kept = "kept from the last operation" if self.emulator.reused else "started now, kept for the next"
            where = f"the stack's AWS emulator (moto, pid {self.emulator.pid}, {kept}) on {self.emulator.endpoint}"
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
        from ..emulator import Stack

        stack = Stack(self.provider, name=info.name)
        stack.stack_id = info.stack_id
        return stack

    def polled(self, request: dict[str, Any]) -> str | None:
        """A long-running request's stored poll state (JSON text; cfn_provider.pipeline.poll_steps), or None."""
        import json
        import sqlite3

        try:
            with contextlib.closing(sqlite3.connect(f"file:{self._tmp}/state.db?mode=ro", uri=True, timeout=1)) as db:
                row = db.execute(
                    "SELECT progress FROM records WHERE key = ? AND state = 'POLLING'",
                    (json.dumps([request["StackId"], request["RequestId"]]),),
                ).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def send(
        self,
        stack: Any,
        request: dict[str, Any],
        service_timeout: int,
        wait_limit: float | None,
        progress: Callable[[float, float], None],
        polled: Callable[[str], None] | None = None,
    ) -> Answer:
        limit = float(service_timeout)
        limited = False
        if wait_limit is not None and wait_limit < limit:
            limit, limited = float(wait_limit), True
        answer = Answer(request["RequestId"], None, 0.0, limit, limited, service_timeout)
        started, seen = time.monotonic(), None
        try:
            stack.publish(request)
        except Exception as exc:  # noqa: BLE001 - an unreachable endpoint is this request's failure
            answer.daemon_error = f"publishing to SNS failed: {exc}"
            return answer
        while True:
            interrupts.check()  # a Ctrl-C the interpreter dropped is raised here (simulate/interrupts.py)
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
            state = self.polled(request) if polled is not None else None
            if polled is not None and state is not None and state != seen:  # a long-running request moved on:
                seen = state  # an event, as CloudFormation's
                polled(state)
            progress(answer.waited, limit)

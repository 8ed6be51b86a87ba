"""Fixtures for the ROS / MNS tests: a local MNS server, a ROS response endpoint, request builders,
in-process daemons on transport mns, and the daemon's real JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from cfn_provider import logs
from cfn_provider.config import Settings
from tests.support.daemons import TEST_HANDLERS, InProcessDaemon, in_process_daemons
from tests.support.mns_server import MnsServer
from tests.support.stub_s3 import StubS3

QUEUE = "ros-provider"
ROS_HANDLERS = (*TEST_HANDLERS, ("Custom::Remaining", "tests.dialects.handlers"))


@pytest.fixture
def mns() -> Iterator[MnsServer]:
    with MnsServer() as server:
        server.create_queue(QUEUE, visibility_timeout=30)
        yield server


@pytest.fixture
def mns_env(mns: MnsServer, monkeypatch: pytest.MonkeyPatch) -> MnsServer:
    """The MNS account's credentials in the environment, as an operator would give them."""
    for name, value in mns.env().items():
        monkeypatch.setenv(name, value)
    return mns


def ros_request(
    kind: str,
    url: str,
    *,
    logical: str = "Thing",
    rtype: str = "Custom::Test",
    props: dict[str, Any] | None = None,
    old_props: dict[str, Any] | None = None,
    physical_id: str | None = None,
    intranet: str | None = None,
    stack_id: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """A request as ROS sends it (its documented fields; StackId a plain id)."""
    req: dict[str, Any] = {
        "RequestType": kind,
        "RequestId": request_id or str(uuid.uuid4()).upper(),
        "ResponseURL": url,
        "IntranetResponseURL": intranet or url,
        "ResourceType": rtype,
        "LogicalResourceId": logical,
        "StackId": stack_id or str(uuid.uuid4()),
        "StackName": "ros-stack",
        "ResourceOwnerId": "1234567890123456",
        "CallerId": "1234567890123456",
        "RegionId": "cn-hangzhou",
        "ResourceProperties": props or {},
    }
    if physical_id is not None:
        req["PhysicalResourceId"] = physical_id
    if old_props is not None:
        req["OldResourceProperties"] = old_props
    return req


def mns_settings(mns: MnsServer, tmp_path: Path, s3: StubS3, **overrides: Any) -> Settings:
    base = Settings(
        queue_url="",
        transport="mns",
        mns_endpoint=mns.endpoint,
        mns_queue=QUEUE,
        handlers=ROS_HANDLERS,
        state=f"sqlite://{tmp_path}/state.db",
        allow_response_urls=(s3.base_url,),
        wait_seconds=1,
        visibility_timeout=30,
        max_backoff=0.5,
        alibaba_cloud=False,
        mns_allow_http=True,
    )
    return replace(base, **overrides)


@pytest.fixture
async def ros_daemon(mns_env: MnsServer, stub_s3: StubS3, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """`d = await ros_daemon(**settings_overrides)`: an in-process daemon on the MNS queue."""
    async with in_process_daemons() as start_daemon:

        async def start(**overrides: Any) -> InProcessDaemon:
            return await start_daemon(mns_settings(mns_env, tmp_path, stub_s3, **overrides))

        yield start


class JsonLog:
    """The daemon's log as rendered (cfn_provider.logs: JSON, redaction and all), parsed per line."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def events(self, **match: Any) -> list[dict[str, Any]]:
        out = []
        for line in self.text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if all(event.get(k) == v for k, v in match.items()):
                out.append(event)
        return out


@pytest.fixture
def json_log() -> Iterator[JsonLog]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    capture = JsonLog()
    logs.configure("json", "debug", capture.stream)
    yield capture
    structlog.reset_defaults()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])

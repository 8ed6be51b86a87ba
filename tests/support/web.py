"""The web listener under test: daemons on transport web (in-process or subprocess) serving HTTPS with a
certificate from a test CA (tests.support.tls), and the ROS-side helpers the tests share.

    d = await web_daemon()                           # in-process, HTTPS on 127.0.0.1, port 0
    status, headers, body = await post(https, d.url("sync"), ros_request("Create", s3.url("k")))
    await posted(s3, "k")                            # the async answer, as the ROS response endpoint got it
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from cfn_provider.config import Settings
from cfn_provider.intake.web import WebListener
from cfn_provider.web_settings import WebSettings
from tests.support.daemons import REPO, TEST_HANDLERS, InProcessDaemon, SubprocessDaemon, wait_for_event
from tests.support.stub_s3 import Request as StubRequest
from tests.support.stub_s3 import StubS3

WEB_HANDLERS = (
    *TEST_HANDLERS,
    ("Custom::Stamped", "tests.support.handlers:stamped"),
    ("Custom::Started", "tests.intake.web_handlers"),
)


@dataclass
class WebDaemon:
    daemon: InProcessDaemon
    token: str

    @property
    def listener(self) -> WebListener:
        listener = self.daemon.service.poller
        assert isinstance(listener, WebListener)
        return listener

    @property
    def base(self) -> str:
        return self.listener.url

    def url(self, mode: str = "async", token: str | None = None) -> str:
        return f"{self.base}/{token or self.token}" + ("/sync" if mode == "sync" else "")


def web_settings(
    state_dir: Path,
    s3: StubS3,
    *,
    cert: Path | None,
    key: Path | None,
    token_file: Path,
    web: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> Settings:
    base = Settings(
        queue_url="",
        transport="web",
        handlers=WEB_HANDLERS,
        state=f"sqlite://{state_dir}/state.db",
        allow_response_urls=(s3.base_url,),
        visibility_timeout=30,
        alibaba_cloud=False,
        grace_period=5.0,
        poll_interval=0.5,
        web=WebSettings(
            **{
                "address": "127.0.0.1",
                "port": 0,
                "cert_file": str(cert) if cert else None,
                "key_file": str(key) if key else None,
                "allow_http": cert is None,
                "token_file": str(token_file),
                **(web or {}),
            }
        ),
    )
    return replace(base, **overrides)


async def post(
    session: aiohttp.ClientSession, url: str, body: Any, *, method: str = "POST", timeout: float = 60, **kwargs: Any
) -> tuple[int, Mapping[str, str], bytes]:
    """One request (`body`: a dict is sent as JSON, bytes and str as they are); (status, headers, body)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    async with session.request(method, url, data=data, timeout=aiohttp.ClientTimeout(total=timeout), **kwargs) as resp:
        return resp.status, resp.headers, await resp.read()


async def posted(s3: StubS3, key: str, timeout: float = 20.0) -> StubRequest:
    """The successful POST of `key`'s answer to the ROS response endpoint (StubS3), waiting for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [r for r in s3.requests_for(key, "POST") if r.ok]
        if done:
            return done[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no POST of {key}; saw {[(r.method, r.key, r.status) for r in s3.requests]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def web_subprocess(
    state_dir: Path,
    s3: StubS3,
    log_path: Path,
    *,
    port: int,
    token_file: Path,
    cert: Path | None,
    key: Path | None,
    state: str | None = None,
    extra: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> SubprocessDaemon:
    """`python -m cfn_provider run --transport web ...` on 127.0.0.1:`port` (started with .start())."""
    tls = ["--web-cert", str(cert), "--web-key", str(key)] if cert and key else ["--web-allow-http"]
    args = [
        sys.executable,
        "-m",
        "cfn_provider",
        "run",
        "--transport",
        "web",
        "--web-address",
        "127.0.0.1",
        "--web-port",
        str(port),
        *tls,
        "--web-token-file",
        str(token_file),
        "--state",
        state or f"sqlite://{state_dir}/state.db",
        "--allow-response-url",
        s3.base_url,
        "--handler",
        "Custom::Test=tests.support.handlers",
        "--handler",
        "Custom::Stamped=tests.support.handlers:stamped",
        "--handler",
        "Custom::Started=tests.intake.web_handlers",
        "--log-format",
        "json",
        *extra,
    ]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return SubprocessDaemon(args, full_env, log_path)


def listening(daemon: SubprocessDaemon, timeout: float = 30.0) -> str:
    """The base URL a subprocess daemon listens on, once it does."""
    return str(wait_for_event(daemon, timeout, event="web.listening")["url"])

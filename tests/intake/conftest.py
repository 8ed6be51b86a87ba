"""The web listener's tests: a test CA, a token file, in-process daemons on transport web and an
HTTPS client; `captured` (the Settings `cfn-provider run` would serve) and the ROS dialect's
fixtures are the transports' (tests/transports/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cfn_provider.trust.web_tokens import new_token
from tests.support.daemons import in_process_daemons
from tests.support.stub_s3 import StubS3
from tests.support.tls import CertAuthority
from tests.support.web import WebDaemon, web_settings
from tests.transports.conftest import captured, json_log, mns, mns_env, ros_daemon  # noqa: F401 - fixtures


@pytest.fixture
def ca(tmp_path: Path) -> CertAuthority:
    return CertAuthority(tmp_path)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "web-token"
    path.write_text(new_token() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
async def web_daemon(
    tmp_path: Path, stub_s3: StubS3, ca: CertAuthority, token_file: Path
) -> AsyncIterator[Callable[..., Any]]:
    """`d = await web_daemon(**settings_overrides, web={...})`: an in-process daemon on transport web,
    HTTPS (a certificate from `ca`) on 127.0.0.1, a free port; `tls=False` for plain HTTP."""
    cert, key = ca.issue(tmp_path / "server")
    async with in_process_daemons() as start_daemon:

        async def start(tls: bool = True, **overrides: Any) -> WebDaemon:
            settings = web_settings(
                tmp_path,
                stub_s3,
                cert=cert if tls else None,
                key=key if tls else None,
                token_file=token_file,
                **overrides,
            )
            return WebDaemon(await start_daemon(settings), token_file.read_text().split()[0])

        yield start


@pytest.fixture
async def https(ca: CertAuthority) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTPS client trusting only the test CA."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca.client_context())) as session:
        yield session

"""Fixtures of the `lambda:` function tests: a thread pool as the daemon's, and a started FunctionHost
(the loopback listener and the pools, closed at the end: every function process ends with the test)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from cfn_provider.functions.host import FunctionHost


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="handler-test")
    yield pool
    pool.shutdown(wait=True)


@pytest.fixture
async def host(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # crhelper makes boto3 clients at import
    async with FunctionHost() as started:
        yield started

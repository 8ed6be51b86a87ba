"""A daemon says READY only once its idempotency store answers a read (cfn_provider.stores.probe).

Before, the DynamoDB store was opened lazily: a daemon whose table did not exist received from the
queue, said READY, passed `check`, and the deploy gate let a release through that could answer
nothing. Here the table is missing at start (dynalite, a real DynamoDB emulator): no READY, a
`store.probe_failed` line; the table appears: READY follows, with no restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Provider
from cfn_provider.service import Service
from tests.support.daemons import settings_for
from tests.support.dynalite import Dynalite, DynaliteMissing, make_table

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dynalite() -> Iterator[Dynalite]:
    try:
        server = Dynalite()
    except DynaliteMissing as exc:
        pytest.fail(str(exc))
    with server:
        yield server


async def test_ready_waits_for_the_store_to_answer(
    dynalite: Dynalite, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynalite.endpoint)
    table = f"probe-{time.monotonic_ns()}"
    ready = asyncio.Event()
    service = Service(settings_for(provider, tmp_path, state=f"dynamodb://{table}"), on_ready=ready.set)
    with capture_logs() as logs:
        task = asyncio.create_task(service.run())
        try:
            deadline = time.monotonic() + 20
            while sum(e["event"] == "store.probe_failed" for e in logs) < 2:
                assert time.monotonic() < deadline and not task.done(), [e["event"] for e in logs]
                await asyncio.sleep(0.1)
            assert not ready.is_set(), "READY before the store answered"
            await asyncio.to_thread(make_table, dynalite.client(), table)
            await asyncio.wait_for(ready.wait(), 30)
            assert any(e["event"] == "store.probe_ok" for e in logs)
        finally:
            service.stop()
            await asyncio.wait_for(task, 60)

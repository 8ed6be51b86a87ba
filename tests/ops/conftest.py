"""Fixtures for the operator commands on the store: the daemon's store, SQLite or DynamoDB (moto's,
over HTTP, in a table `bootstrap` makes), as `run --state` names it, and a way to write records
into it as a daemon would (at a chosen time)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.emulator import Emulator
from cfn_provider.ops.bootstrap import ensure_table
from cfn_provider.stores.base import Store
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic


@pytest.fixture(params=["sqlite", "dynamodb"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path, emulator: Emulator) -> Any:
    """The daemon's --state: a SQLite file made by a first store, or a fresh moto table."""
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/state/state.db"
        asyncio.run(_touch(url))
        yield url
        return
    make_dynamodb_writes_atomic()
    client = emulator.client("dynamodb")
    name = f"cfn-state-{uuid.uuid4().hex[:12]}"
    ensure_table(client, name)
    yield f"dynamodb://{name}"
    client.delete_table(TableName=name)


async def _touch(url: str) -> None:
    from cfn_provider.stores import open_store

    await open_store(url).close()


def open_at(url: str, clock: Callable[[], float] = time.time) -> Store:
    """The daemon's store at `url` on `clock`."""
    if url.startswith("sqlite://"):
        from cfn_provider.stores.sqlite import SQLiteStore

        return SQLiteStore(Path(url[len("sqlite://") :]), clock=clock)
    from cfn_provider.stores.dynamodb import DynamoDBStore

    return DynamoDBStore(url[len("dynamodb://") :], clock=clock)


@pytest.fixture
def in_store(state_url: str) -> Callable[..., Any]:
    """`in_store(lambda store: ..., ago=0)`: run store calls as a daemon would, `ago` seconds back."""

    def run(calls: Callable[[Store], Awaitable[Any]], ago: float = 0.0) -> Any:
        async def go() -> Any:
            store = open_at(state_url, lambda: time.time() - ago)
            try:
                return await calls(store)
            finally:
                await store.close()

        return asyncio.run(go())

    return run

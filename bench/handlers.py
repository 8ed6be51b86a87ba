"""Handlers the benchmarks register with the daemon (`--handler Custom::Bench=bench.handlers:NAME`).

- `trivial`: returns at once (no Data), so the figures are the daemon's own cost (a sync action:
  it runs in the daemon's handler thread pool, as every sync action does);
- `async_trivial`: the same as an `async def` action, run on the event loop (no thread hand-off);
- `async_sleep`: awaits `asyncio.sleep(1)` on the event loop;
- `sync_sleep`: `time.sleep(1)` in the daemon's handler thread pool.
ResourceProperties `SleepSeconds` overrides the 1 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any


def _seconds(event: Mapping[str, Any]) -> float:
    return float(event["ResourceProperties"].get("SleepSeconds", 1))


class Trivial:
    @staticmethod
    def create(event: Mapping[str, Any]) -> None:
        return None

    update = delete = create


class AsyncTrivial:
    @staticmethod
    async def create(event: Mapping[str, Any]) -> None:
        return None

    update = delete = create


class AsyncSleep:
    @staticmethod
    async def create(event: Mapping[str, Any]) -> None:
        await asyncio.sleep(_seconds(event))

    update = delete = create


class SyncSleep:
    @staticmethod
    def create(event: Mapping[str, Any]) -> None:
        time.sleep(_seconds(event))

    update = delete = create


trivial, async_trivial, async_sleep, sync_sleep = Trivial(), AsyncTrivial(), AsyncSleep(), SyncSleep()

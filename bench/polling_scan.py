"""What a look for due polls costs with many requests waiting (the poll scheduler's idle cost).

Fills a store with WAITING requests (POLLING, next poll an hour away) plus DUE ones, then times
`PollScheduler.look()`'s store query (`due_polls`) over several looks, on SQLite and on
DynamoDB (moto's server, on 127.0.0.1, with the table `bootstrap` makes: the sparse index).

    python -m bench.polling_scan [--waiting 1000] [--due 10] [--looks 50] [--store sqlite|dynamodb|both]

Prints, per store: milliseconds per look (median, p95) and keys returned per look. A waiting
request costs nothing between looks: no slot, lease or queue message.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


async def _fill(store: Any, waiting: int, due: int) -> None:
    now = time.time()
    for i in range(waiting + due):
        key, token = f'["arn:aws:cloudformation:us-east-1:1:stack/bench/x","req-{i}"]', f"t{i}"
        assert (await store.claim(key, "bench", "digest", 60, token=token)).acquired
        next_poll = now - 1 if i < due else now + 3600
        assert await store.save_progress(key, token, '{"progress":{"op":"x"}}', next_poll, '{"RequestType":"Create"}')


async def _looks(store: Any, looks: int, limit: int) -> tuple[list[float], int]:
    times, found = [], 0
    for _ in range(looks):
        started = time.perf_counter()
        keys = await store.due_polls(time.time(), limit)
        times.append((time.perf_counter() - started) * 1000)
        found = len(keys)
    return times, found


def _report(name: str, waiting: int, times: list[float], found: int) -> None:
    p95 = sorted(times)[max(0, int(len(times) * 0.95) - 1)]
    print(
        f"{name:9s} {waiting} waiting: look {statistics.median(times):.2f} ms median, {p95:.2f} ms p95; "
        f"{found} due found per look"
    )


async def bench_sqlite(waiting: int, due: int, looks: int) -> None:
    from cfn_provider.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "state.db")
        try:
            await _fill(store, waiting, due)
            times, found = await _looks(store, looks, 32)
        finally:
            await store.close()
    _report("sqlite", waiting, times, found)


async def bench_dynamodb(waiting: int, due: int, looks: int) -> None:
    import os

    from cfn_provider.local.emulator import Emulator
    from cfn_provider.ops.bootstrap import ensure_table
    from cfn_provider.stores.dynamodb import DynamoDBStore

    emulator = Emulator()
    os.environ.update(emulator.env())
    try:
        table = f"bench-{uuid.uuid4().hex[:8]}"
        ensure_table(emulator.client("dynamodb"), table)
        store = DynamoDBStore(table)
        try:
            await _fill(store, waiting, due)
            times, found = await _looks(store, looks, 32)
        finally:
            await store.close()
    finally:
        emulator.stop()
    _report("dynamodb", waiting, times, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--due", type=int, default=10)
    parser.add_argument("--looks", type=int, default=50)
    parser.add_argument("--store", choices=("sqlite", "dynamodb", "both"), default="both")
    args = parser.parse_args()
    if args.store in ("sqlite", "both"):
        asyncio.run(bench_sqlite(args.waiting, args.due, args.looks))
    if args.store in ("dynamodb", "both"):
        asyncio.run(bench_dynamodb(args.waiting, args.due, args.looks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

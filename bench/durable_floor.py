"""The durable floor: the limit loop plus the least bookkeeping that "no completed handler runs
twice" needs, and nothing else (the reference the daemon's CPU and throughput targets are judged on).

Each poller, per receive batch of up to 10:
    claim a row per request, in one SQLite transaction (WAL, synchronous=NORMAL: no fsync)
    -> run the trivial handler (bench.handlers.trivial, inline)
    -> store every answer body, in one transaction with synchronous=FULL (one fsync: group commit)
    -> PUT the answers concurrently
    -> mark them SENT, in one transaction (no fsync)
    -> delete the batch.
A request whose row another attempt already holds is not run again (its message is deleted with
the batch: the floor serves one copy of each). SQLite is called inline on the event loop; no
signature check, no validation, no log line, no retries, no leases or tokens beyond the row.
Prints `ready`, then `answered K` after each batch (the bench counts them).

    python -m bench.durable_floor --queue-url URL --state PATH [--pollers 3] [--wait-seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import sys
import time
import uuid
from pathlib import Path

import aiobotocore.session
import aiohttp
from yarl import URL

from cfn_provider import loops

from .handlers import trivial
from .limit_loop import Batches, response_body

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    token TEXT NOT NULL,
    body BLOB,
    expires_at REAL NOT NULL
)"""
TTL = 15 * 24 * 3600


def open_store(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(SCHEMA)
    return db


def claim(db: sqlite3.Connection, keys: list[str], token: str) -> list[bool]:
    """One transaction (no fsync): a row per key that nobody holds yet; which ones were taken."""
    expires = time.time() + TTL
    with db:  # BEGIN ... COMMIT (isolation_level None: sqlite3's own transaction control is off)
        db.execute("BEGIN IMMEDIATE")
        return [
            db.execute(
                "INSERT INTO records (key, state, token, expires_at) VALUES (?, 'CLAIMED', ?, ?) "
                "ON CONFLICT(key) DO NOTHING",
                (key, token, expires),
            ).rowcount
            == 1
            for key in keys
        ]


def store_bodies(db: sqlite3.Connection, answers: list[tuple[str, bytes]], token: str) -> None:
    """One transaction, fsynced at COMMIT (synchronous=FULL): every body of the batch."""
    db.execute("PRAGMA synchronous=FULL")
    try:
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "UPDATE records SET state = 'RESPONSE_READY', body = ? WHERE key = ? AND token = ?",
                [(body, key, token) for key, body in answers],
            )
    finally:
        db.execute("PRAGMA synchronous=NORMAL")


def mark_sent(db: sqlite3.Connection, keys: list[str], token: str) -> None:
    """One transaction (no fsync)."""
    with db:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("UPDATE records SET state = 'SENT' WHERE key = ? AND token = ?", [(key, token) for key in keys])


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    give_up = time.monotonic() + args.max_seconds
    db = open_store(args.state)
    session = aiobotocore.session.get_session()
    async with session.create_client("sqs") as sqs, aiohttp.ClientSession() as http:
        batches = Batches(sqs, args)

        async def put(url: str, body: bytes) -> bool:
            async with http.put(URL(url, encoded=True), data=body, headers={"Content-Type": ""}) as resp:
                await resp.read()
                if resp.status != 200:
                    print(f"error PUT {resp.status}", flush=True)
                return resp.status == 200

        async def poll() -> None:
            while not stop.is_set() and time.monotonic() < give_up:
                messages = await batches.receive()
                if not messages:
                    continue
                token = uuid.uuid4().hex  # this batch's attempt
                requests = [json.loads(json.loads(m["Body"])["Message"]) for m in messages]
                keys = [f"{r['StackId']}#{r['RequestId']}" for r in requests]
                taken = claim(db, keys, token)
                answers = []
                for request, key, mine in zip(requests, keys, taken, strict=True):
                    if mine:
                        getattr(trivial, request["RequestType"].lower())(request)
                        answers.append((key, request["ResponseURL"], response_body(request)))
                if answers:
                    store_bodies(db, [(key, body) for key, _, body in answers], token)
                    sent = await asyncio.gather(*(put(url, body) for _, url, body in answers))
                    mark_sent(db, [key for (key, _, _), ok in zip(answers, sent, strict=True) if ok], token)
                await batches.delete(messages)
                print(f"answered {len(answers)}", flush=True)

        print("ready", flush=True)
        pollers = [asyncio.create_task(poll()) for _ in range(args.pollers)]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({stopper, *pollers}, timeout=args.max_seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in (stopper, *pollers):
            task.cancel()
        await asyncio.gather(stopper, *pollers, return_exceptions=True)
    db.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--state", type=Path, required=True, help="the SQLite file (made if absent)")
    parser.add_argument("--pollers", type=int, default=1)
    parser.add_argument("--wait-seconds", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--event-loop", choices=loops.CHOICES, default="asyncio", help="default asyncio")
    args = parser.parse_args()
    return loops.run(lambda: serve(args), args.event_loop)


if __name__ == "__main__":
    sys.exit(main())

"""Idempotency store, keyed on StackId + RequestId.

States (shared/DESIGN.md):
    absent ──claim──> CLAIMED(owner, lease) ──save_response──> RESPONSE_READY(body, lease) ──mark_sent──> SENT
One conditional write is the lock: `claim` succeeds only when the key is absent, expired,
CLAIMED under a lapsed lease, or holds a FAILED answer sent to a different ResponseURL
(CloudFormation retrying the operation: a FAILED is re-run, a SUCCESS is re-sent). Every
ResponseURL answered is remembered, so a late duplicate for an answered URL never re-runs.
Expiry is derived from `expires_at`, never stored as a state. The body is stored before
the PUT, so a redelivery re-sends it and never re-runs the handler; while its owner's lease
lives the owner is still delivering it, so a duplicate waits instead of sending it twice.
"""
from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

CLAIMED, RESPONSE_READY, SENT = "CLAIMED", "RESPONSE_READY", "SENT"
DEFAULT_TTL = 15 * 24 * 3600  # longer than SQS's maximum retention (14 days)
T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    key: str
    state: str
    owner: str | None
    lease_until: float | None
    url_digest: str
    status: str | None  # SUCCESS | FAILED once a response is stored
    body: bytes | None
    expires_at: float
    sent_digests: str = ""  # space-separated digests of every ResponseURL already answered

    def answered(self, url_digest: str) -> bool:
        return url_digest in self.sent_digests.split()


@dataclass(frozen=True)
class Claim:
    acquired: bool
    record: Record | None  # what stood in the way (not acquired) or what was taken over


class Store(Protocol):
    async def claim(self, key: str, owner: str, url_digest: str, lease_seconds: float) -> Claim: ...
    async def extend(self, key: str, owner: str, lease_seconds: float) -> bool: ...
    async def save_response(self, key: str, owner: str, status: str, body: bytes) -> bool: ...
    async def mark_sent(self, key: str, url_digest: str) -> None: ...
    async def release(self, key: str, owner: str) -> None: ...
    async def close(self) -> None: ...


class StoreConfigError(ValueError):
    pass


def open_store(url: str, ttl: float = DEFAULT_TTL) -> Store:
    """`sqlite:///abs/path.db` (the default) or, with fleet mode, `dynamodb://TABLE`."""
    if url.startswith("sqlite://"):
        path = url[len("sqlite://"):]
        if not path.startswith("/"):
            raise StoreConfigError(f"{url!r}: use an absolute path, e.g. sqlite:///var/lib/cfn-provider/state.db")
        return SQLiteStore(Path(path), ttl=ttl)
    if url.startswith("dynamodb://"):
        from .dynamodb import DynamoDBStore, table_from_url  # aiobotocore is loaded only for fleet mode

        return DynamoDBStore(table_from_url(url), ttl=ttl)
    raise StoreConfigError(f"{url!r}: state must be sqlite:///PATH or dynamodb://TABLE")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    owner TEXT,
    lease_until REAL,
    url_digest TEXT NOT NULL,
    status TEXT,
    body BLOB,
    expires_at REAL NOT NULL,
    sent_digests TEXT NOT NULL DEFAULT ''
)"""
_CLAIM = """
INSERT INTO records (key, state, owner, lease_until, url_digest, expires_at)
VALUES (:key, 'CLAIMED', :owner, :lease_until, :url_digest, :expires_at)
ON CONFLICT(key) DO UPDATE SET
    state = 'CLAIMED', owner = excluded.owner, lease_until = excluded.lease_until,
    url_digest = excluded.url_digest, status = NULL, body = NULL, expires_at = excluded.expires_at
WHERE records.expires_at <= :now
   OR (records.state = 'CLAIMED' AND records.lease_until <= :now)
   OR (records.state != 'CLAIMED' AND records.status = 'FAILED'
       AND instr(records.sent_digests, excluded.url_digest) = 0 AND records.url_digest != excluded.url_digest)
"""
_PURGE_EVERY = 600.0


class SQLiteStore:
    """A WAL-mode SQLite file; one thread owns the connection, so calls never block the loop."""

    def __init__(self, path: Path, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        self.path, self.ttl, self.clock = path, ttl, clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._db: sqlite3.Connection | None = None
        self._purged_at = 0.0
        self._pool.submit(self._open).result()

    @retry(retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)),
           wait=wait_random_exponential(multiplier=0.05, max=1), stop=stop_after_delay(30), reraise=True)
    def _open(self) -> None:
        """Open and set up the file; switching to WAL skips SQLite's busy handler, so a second
        process opening a new file at the same moment gets "locked" at once: retry that."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)  # stored bodies may hold secrets
        os.close(fd)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # see _durable: only the stored body needs an fsync
            db.execute(_SCHEMA)
        except BaseException:
            db.close()
            raise
        self._db = db

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _record(self, key: str) -> Record | None:
        assert self._db is not None
        row = self._db.execute(
            "SELECT key, state, owner, lease_until, url_digest, status, body, expires_at, sent_digests "
            "FROM records WHERE key = ?",
            (key,),
        ).fetchone()
        return Record(*row) if row else None

    def _write(self, sql: str, params: tuple | dict) -> int:
        assert self._db is not None
        return self._db.execute(sql, params).rowcount

    # --- claim: the one conditional write that is the lock -------------------------------
    async def claim(self, key: str, owner: str, url_digest: str, lease_seconds: float) -> Claim:
        return await self._run(self._claim, key, owner, url_digest, lease_seconds)

    def _claim(self, key: str, owner: str, url_digest: str, lease_seconds: float) -> Claim:
        assert self._db is not None
        now = self.clock()
        self._maybe_purge(now)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            before = self._record(key)
            params = dict(key=key, owner=owner, lease_until=now + lease_seconds,
                          url_digest=url_digest, expires_at=now + self.ttl, now=now)
            acquired = self._write(_CLAIM, params) == 1
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        if before is not None and before.expires_at <= now:
            before = None  # expired: as if absent
        return Claim(acquired, before)

    def _maybe_purge(self, now: float) -> None:
        if now - self._purged_at >= _PURGE_EVERY:
            self._purged_at = now
            self._write("DELETE FROM records WHERE expires_at <= ?", (now,))

    # --- the other transitions, each conditional on the state it expects -------------------
    async def extend(self, key: str, owner: str, lease_seconds: float) -> bool:
        # a stored answer stays leased while its owner delivers it, so duplicates wait, not re-send
        sql = ("UPDATE records SET lease_until = ? WHERE key = ? AND owner = ? "
               "AND state IN ('CLAIMED', 'RESPONSE_READY')")
        return await self._run(self._write, sql, (self.clock() + lease_seconds, key, owner)) == 1

    async def save_response(self, key: str, owner: str, status: str, body: bytes) -> bool:
        sql = ("UPDATE records SET state = 'RESPONSE_READY', status = ?, body = ? "
               "WHERE key = ? AND owner = ? AND state = 'CLAIMED'")
        return await self._run(self._durable, sql, (status, body, key, owner)) == 1

    def _durable(self, sql: str, params: tuple) -> int:
        """The one write that must survive power loss before the PUT: the stored body. In WAL mode
        this fsync also makes every earlier commit durable; a claim or SENT mark lost with the
        power only costs a re-run of an unfinished handler or a re-send of the same body."""
        assert self._db is not None
        self._db.execute("PRAGMA synchronous=FULL")
        try:
            return self._write(sql, params)
        finally:
            self._db.execute("PRAGMA synchronous=NORMAL")

    async def mark_sent(self, key: str, url_digest: str) -> None:
        sql = ("UPDATE records SET state = 'SENT', url_digest = :d, lease_until = NULL, sent_digests = CASE "
               "WHEN instr(sent_digests, :d) > 0 THEN sent_digests ELSE trim(sent_digests || ' ' || :d) END "
               "WHERE key = :key AND state != 'CLAIMED'")
        await self._run(self._write, sql, {"d": url_digest, "key": key})

    async def release(self, key: str, owner: str) -> None:
        sql = "DELETE FROM records WHERE key = ? AND owner = ? AND state = 'CLAIMED'"
        await self._run(self._write, sql, (key, owner))

    async def get(self, key: str) -> Record | None:
        return await self._run(self._record, key)

    async def close(self) -> None:
        def _close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        await self._run(_close)
        self._pool.shutdown(wait=True)

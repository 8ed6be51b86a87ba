"""The idempotency store in a WAL-mode SQLite file (the default; one host).

The contract, states and token rules are in cfn_provider.stores.base; this module keeps them in
one table with SQL conditional writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..trust import retention
from .base import DEFAULT_TTL, Claim, Record, _parked_by, _progress_saved_by, _saved_by
from .sqlite_group import BUSY, Busy, Outcome, TickGroup, Write, commit_group, locked
from .sqlite_schema import COLUMNS, open_file
from .sqlite_thread import OwnerThread

T = TypeVar("T")


_CLAIM = """
INSERT INTO records (key, state, owner, token, lease_until, url_digest, expires_at, request)
VALUES (:key, 'CLAIMED', :owner, :token, :lease_until, :url_digest, :expires_at, :request)
ON CONFLICT(key) DO UPDATE SET
    state = 'CLAIMED', owner = excluded.owner, token = excluded.token, lease_until = excluded.lease_until,
    url_digest = excluded.url_digest, status = NULL, body = NULL, scrub_at = NULL, expires_at = excluded.expires_at,
    request = coalesce(excluded.request, records.request), progress = NULL, next_poll = NULL
WHERE records.expires_at <= :now
   OR (instr(records.sent_digests, excluded.url_digest) = 0 AND (
          (records.state = 'CLAIMED' AND coalesce(records.lease_until, 0) <= :now)
       OR (records.state != 'CLAIMED' AND records.status = 'FAILED' AND records.url_digest != excluded.url_digest
           AND coalesce(records.lease_until, 0) <= :now)))
"""
# Every answered URL is added in every state; the record becomes SENT only from RESPONSE_READY,
# and only for the attempt that stored it or when nobody's lease lives (a replay of a stored answer).
_MARK_SENT = """
UPDATE records SET
    sent_digests = CASE WHEN instr(sent_digests, :d) > 0 THEN sent_digests ELSE trim(sent_digests || ' ' || :d) END,
    state = CASE WHEN {moves} THEN 'SENT' ELSE state END,
    url_digest = CASE WHEN {moves} THEN :d ELSE url_digest END,
    lease_until = CASE WHEN {moves} THEN NULL ELSE lease_until END,
    next_poll = CASE WHEN {moves} THEN NULL ELSE next_poll END
WHERE key = :key""".format(
    moves="(state IN ('RESPONSE_READY', 'SENT') AND (token IS :token OR coalesce(lease_until, 0) <= :now))"
)
# A POLLING record takes its step's writes only while the step holds its lease (see base: `HELD`).
_HELD = "(state = 'CLAIMED' OR (state = 'POLLING' AND lease_until > :now))"
_PURGE_EVERY = 600.0


class SQLiteStore:
    """A WAL-mode SQLite file with two connections. One belongs to a thread of its own and takes
    every write that may wait: the stored body (fsync), waits on another process's lock, the
    hourly purge. The other is used on the event loop itself for the two short writes of every
    request (claim, SENT), which is cheaper than any hand-off to a thread; the claims queued in
    one tick of the loop (a receive's) share one transaction (`TickGroup`). It never waits for a
    lock (busy timeout 0: a busy database sends the write to the thread) and never checkpoints
    (no fsync on the loop). Neither can block the event loop for longer than one short group of
    writes."""

    def __init__(self, path: Path, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        self.path, self.ttl, self.clock = path, ttl, clock
        self._thread = OwnerThread("store", self._group)
        self._db: sqlite3.Connection | None = None  # the thread's
        self._quick: sqlite3.Connection | None = None  # the event loop's
        self._tick = TickGroup(lambda: self._quick)
        self._purged_at = 0.0
        try:
            self._thread.call(self._open)
            quick = sqlite3.connect(self.path, isolation_level=None, timeout=0, check_same_thread=False)
            quick.execute("PRAGMA synchronous=NORMAL")
            quick.execute("PRAGMA wal_autocheckpoint=0")
            quick.execute("PRAGMA secure_delete=ON")
            self._quick = quick
        except BaseException:
            self._thread.call(self._close)
            self._thread.stop()
            raise

    def _open(self) -> None:
        self._db = open_file(self.path)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._thread.run(fn, *args)

    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T | Busy:
        """`fn(quick_connection, *args)` on the event loop, at once, or BUSY when the database is locked."""
        if self._quick is None:
            return BUSY
        try:
            return fn(self._quick, *args)
        except sqlite3.OperationalError as exc:
            if locked(exc):
                return BUSY  # nothing was written: the statement did not start
            raise

    @staticmethod
    def _record(db: sqlite3.Connection, key: str) -> Record | None:
        row = db.execute(f"SELECT {COLUMNS} FROM records WHERE key = ?", (key,)).fetchone()
        return Record(*row) if row else None

    @staticmethod
    def _write(db: sqlite3.Connection, sql: str, params: tuple[Any, ...] | dict[str, Any]) -> int:
        return db.execute(sql, params).rowcount

    def _threads(self, fn: Callable[..., T], *args: Any) -> T:
        """On the store's thread: `fn` with the thread's connection."""
        assert self._db is not None
        return fn(self._db, *args)

    # --- claim: the one conditional write that is the lock -------------------------------
    async def claim(
        self, key: str, owner: str, url_digest: str, lease_seconds: float, *, token: str, request: str | None = None
    ) -> Claim:
        args = (key, owner, url_digest, lease_seconds, token, request)
        if self.clock() - self._purged_at < _PURGE_EVERY:
            claim = await self._tick.run(self._claim_in, *args)
            if not isinstance(claim, Busy):
                return claim
        return await self._run(self._threads, self._claim_and_purge, *args)

    def _claim_and_purge(self, db: sqlite3.Connection, *args: Any) -> Claim:
        now = self.clock()
        if now - self._purged_at >= _PURGE_EVERY:
            self._purged_at = now
            self._write(db, "DELETE FROM records WHERE expires_at <= ?", (now,))
        return self._claim(db, *args)

    def _claim(self, db: sqlite3.Connection, *args: Any) -> Claim:
        with _immediate(db):
            return self._claim_in(db, *args)

    def _claim_in(
        self,
        db: sqlite3.Connection,
        key: str,
        owner: str,
        url_digest: str,
        lease_seconds: float,
        token: str,
        request: str | None = None,
    ) -> Claim:
        """The claim inside a write transaction (its caller's: the store thread's own, or a tick's group)."""
        now = self.clock()
        before = self._record(db, key)
        params = dict(
            key=key,
            owner=owner,
            token=token,
            lease_until=now + lease_seconds,
            url_digest=url_digest,
            expires_at=now + self.ttl,
            now=now,
            request=request,
        )
        acquired = self._write(db, _CLAIM, params) == 1
        if before is not None and before.expires_at <= now:
            before = None  # expired: as if absent
        if before is not None and before.token == token:
            return Claim(True, None)  # this attempt's own claim, applied by an earlier try
        return Claim(acquired, before)

    # --- the other transitions, each conditional on the attempt's token --------------------
    async def extend(self, key: str, token: str, lease_seconds: float) -> bool:
        # a stored answer stays leased while its owner delivers it, so duplicates wait, not re-send
        # a poll step's lease only while it is held: after save_progress let go of it, a late beat must not retake it
        now = self.clock()
        sql = (
            "UPDATE records SET lease_until = ? WHERE key = ? AND token = ? "
            "AND (state IN ('CLAIMED', 'RESPONSE_READY') OR (state = 'POLLING' AND lease_until > ?))"
        )
        return bool(await self._run(self._threads, self._write, sql, (now + lease_seconds, key, token, now)) == 1)

    async def save_response(self, key: str, token: str, status: str, body: bytes) -> bool:
        return await self._thread.run_durable(self._save, key, token, status, body)  # _group calls _save(db, ...)

    def _save(self, db: sqlite3.Connection, key: str, token: str, status: str, body: bytes) -> bool:
        sql = (
            "UPDATE records SET state = 'RESPONSE_READY', status = :status, body = :body, "
            "scrub_at = coalesce(:scrub_at, scrub_at) "  # a NoEcho progress's stays: it may be past the window
            f"WHERE key = :key AND token = :token AND {_HELD}"
        )
        now = self.clock()
        params = dict(status=status, body=body, scrub_at=retention.scrub_at(body, now), key=key, token=token, now=now)
        if self._write(db, sql, params) == 1:
            return True
        record = self._record(db, key)  # an earlier try of this very write may have been applied
        return _saved_by(record, token, body)

    def _group(self, writes: list[Write]) -> list[Outcome]:
        """On the store's thread: durable writes (`write(db, *args)` each), in one transaction that
        commits with an fsync (group commit: the stored bodies of requests that finish together
        share one; cfn_provider.stores.sqlite_group says how a failure is kept to its own write).
        Only these writes must survive power loss before what follows them (the PUT, the queue
        delete); in WAL mode their fsync also makes every earlier commit durable, and a claim or
        SENT mark lost with the power only costs a re-run of an unfinished handler or a re-send of
        the same body."""
        assert self._db is not None
        return commit_group(self._db, writes)

    async def mark_sent(self, key: str, url_digest: str, token: str | None = None) -> None:
        # One statement in autocommit, at once: SENT marks come back one per tick (their PUTs return
        # apart), and a lone mark waiting for a tick's group costs more than grouping saves
        # (docs/performance.md, "Claims of a receive in one transaction").
        params = {"d": url_digest, "key": key, "token": token, "now": self.clock()}
        if self._on_loop(self._write, _MARK_SENT, params) is BUSY:
            await self._run(self._threads, self._write, _MARK_SENT, params)

    async def release(self, key: str, token: str) -> None:
        await self._run(self._threads, self._release, key, token)

    def _release(self, db: sqlite3.Connection, key: str, token: str) -> None:
        """Give a claim up: forget it or, when URLs were already answered for this key, keep the
        record (and that memory) under a lapsed lease, for anyone to take over."""
        owned = "key = ? AND token = ? AND state = 'CLAIMED'"
        with _immediate(db):
            if self._write(db, f"DELETE FROM records WHERE {owned} AND sent_digests = ''", (key, token)) == 0:
                self._write(db, f"UPDATE records SET lease_until = 0 WHERE {owned}", (key, token))

    async def get(self, key: str) -> Record | None:
        return await self._run(self._threads, self._record, key)

    async def own_stack(self, stack_id: str, principal: str) -> str:
        return await self._run(self._threads, self._own_stack, stack_id, principal)

    def _own_stack(self, db: sqlite3.Connection, stack_id: str, principal: str) -> str:
        with _immediate(db):
            db.execute(
                "INSERT OR IGNORE INTO stack_owners (stack_id, principal, since) VALUES (?, ?, ?)",
                (stack_id, principal, self.clock()),
            )
            row = db.execute("SELECT principal FROM stack_owners WHERE stack_id = ?", (stack_id,)).fetchone()
        return str(row[0])

    async def list_records(self, since: float | None = None) -> list[Record]:
        """Every unexpired record (claimed at or after `since`, if given): for `cfn-provider requests`."""
        return await self._run(self._threads, self._list, since)

    def _list(self, db: sqlite3.Connection, since: float | None) -> list[Record]:
        oldest = since + self.ttl if since is not None else 0.0
        rows = db.execute(
            f"SELECT {COLUMNS} FROM records WHERE expires_at > ? AND expires_at >= ? ORDER BY expires_at DESC",
            (self.clock(), oldest),
        )
        return [Record(*row) for row in rows.fetchall()]

    # --- long-running actions: POLLING (cfn_provider.intake.poll_scheduler) ---------------------------
    async def save_progress(
        self, key: str, token: str, progress: str, next_poll: float, request: str | None = None
    ) -> bool:
        """CLAIMED or POLLING under this token -> POLLING with the progress, lease let go. Durable
        (fsync): the queue message is deleted next, and this record is then all there is."""
        return await self._thread.run_durable(self._save_progress, key, token, progress, next_poll, request)

    def _save_progress(
        self, db: sqlite3.Connection, key: str, token: str, progress: str, next_poll: float, request: str | None
    ) -> bool:
        sql = (
            "UPDATE records SET state = 'POLLING', progress = :progress, next_poll = :next_poll, lease_until = 0, "
            "scrub_at = :scrub_at, request = coalesce(:request, request) "
            f"WHERE key = :key AND token = :token AND {_HELD}"
        )
        now = self.clock()
        params = dict(
            progress=progress,
            next_poll=next_poll,
            request=request,
            key=key,
            token=token,
            now=now,
            scrub_at=retention.progress_scrub_at(progress, now),
        )
        if self._write(db, sql, params) == 1:
            return True
        return _progress_saved_by(self._record(db, key), token, progress, next_poll)  # an earlier try applied

    async def park(self, key: str, token: str) -> bool:
        return await self._run(self._threads, self._park, key, token)

    def _park(self, db: sqlite3.Connection, key: str, token: str) -> bool:
        """RESPONSE_READY (or a held POLLING) under this token: no lease, out of the due polls for good."""
        sql = (
            "UPDATE records SET lease_until = 0, next_poll = NULL WHERE key = :key AND token = :token "
            "AND (state = 'RESPONSE_READY' OR (state = 'POLLING' AND lease_until > :now))"
        )
        if self._write(db, sql, dict(key=key, token=token, now=self.clock())) == 1:
            return True
        return _parked_by(self._record(db, key), token)  # an earlier try of this very call was applied

    async def due_polls(self, now: float, limit: int) -> list[str]:
        sql = (
            "SELECT key FROM records WHERE next_poll IS NOT NULL AND next_poll <= ? AND coalesce(lease_until, 0) <= ? "
            "AND state IN ('POLLING', 'RESPONSE_READY') AND expires_at > ? ORDER BY next_poll LIMIT ?"
        )
        rows = await self._run(self._threads, lambda db: db.execute(sql, (now, now, now, limit)).fetchall())
        return [row[0] for row in rows]

    async def take_poll(
        self, key: str, owner: str, lease_seconds: float, *, token: str, early: bool = False
    ) -> Record | None:
        return await self._run(self._threads, self._take_poll, key, owner, lease_seconds, token, early)

    def _take_poll(
        self, db: sqlite3.Connection, key: str, owner: str, lease_seconds: float, token: str, early: bool
    ) -> Record | None:
        """Lease a due POLLING record (or a polled answer stored but not sent: its owner died) to
        `token` for one step (not due again until the lease ends); the record, or None when
        another step holds it or it is no longer due. `early`: due or not (the operator ending it)."""
        now = self.clock()
        sql = (
            "UPDATE records SET owner = ?, token = ?, lease_until = ?, next_poll = ? WHERE key = ? "
            "AND state IN ('POLLING', 'RESPONSE_READY') AND (? OR next_poll <= ?) AND coalesce(lease_until, 0) <= ? "
            "AND expires_at > ?"
        )
        self._write(db, sql, (owner, token, now + lease_seconds, now + lease_seconds, key, early, now, now, now))
        record = self._record(db, key)  # taken now, or by an earlier try of this very call
        taken = record is not None and record.state in ("POLLING", "RESPONSE_READY") and record.token == token
        return record if taken else None

    # --- NoEcho retention (cfn_provider.trust.retention): Data out of bodies past the replay window -----
    async def scrub(self, key: str) -> None:
        await self._run(self._threads, self._scrub, key)

    async def scrub_due(self) -> int:
        return await self._run(self._threads, self._scrub, None)

    def _scrub(self, db: sqlite3.Connection, key: str | None) -> int:
        """The NoEcho Data out of the due records' bodies, and the handler's part out of their NoEcho progress."""
        now, where = self.clock(), "scrub_at > 0 AND scrub_at <= ?" + (" AND key = ?" if key is not None else "")
        rows = db.execute(
            f"SELECT key, body, progress FROM records WHERE {where}", (now, key) if key is not None else (now,)
        )
        done = sum(
            self._write(
                db,
                f"UPDATE records SET body = ?, progress = ?, scrub_at = {retention.SCRUBBED} "
                "WHERE key = ? AND body IS ? AND progress IS ? AND scrub_at > 0 AND scrub_at <= ?",
                (
                    retention.scrub(body) if body else None,
                    retention.scrub_progress(progress) if progress else None,
                    k,
                    body,
                    progress,
                    now,
                ),
            )
            for k, body, progress in rows.fetchall()
        )
        if done:  # the old pages may still sit in the WAL: fold it in and empty it
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return done

    async def close(self) -> None:
        if self._thread.stopped:
            return
        await self._run(self._close)
        self._thread.stop()

    def _close(self) -> None:
        for db in (self._quick, self._db):
            if db is not None:
                db.close()
        self._quick = self._db = None


@contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction: BEGIN IMMEDIATE (the write lock first, so nothing read inside it can
    change before the write), then COMMIT; on any error ROLLBACK, unless SQLite already ended the
    transaction itself, and the error goes on. A BEGIN that fails (locked) has started nothing."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise

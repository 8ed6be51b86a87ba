"""Group commit for the SQLite store (cfn_provider.stores.sqlite): writes queued together run in
one transaction, and fail safely. Durable writes (the stored bodies) queued on the store's thread
in one pass commit with one fsync; the claims queued on the event loop in one tick (`TickGroup`)
commit together without one.

Each write is `write(db, *args)`, one conditional statement (atomic on its own) plus reads, and
safe to run again (it recognises its own earlier application by its token). What can go wrong:
- a write fails and SQLite keeps the transaction (a constraint, a trigger's RAISE(ABORT)): that
  write's caller hears its error; the others commit;
- a write fails and SQLite ends the transaction itself (SQLITE_FULL, SQLITE_IOERR, a trigger's
  RAISE(ROLLBACK)): everything the group wrote before it is gone. That caller hears its own error,
  and the rest run again as a fresh group without it (never one by one outside a transaction);
- BEGIN or COMMIT fails (locked; disk full or an I/O error at commit): nothing was committed,
  and every caller of the group hears that error as it was raised.

A full disk and an I/O error are transient (cfn_provider.stores.base.transient): callers retry
them with backoff, as they retry a locked file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Write = tuple[Callable[..., Any], tuple[Any, ...]]
Outcome = tuple[Any, "BaseException | None"]


def commit_group(db: sqlite3.Connection, writes: list[Write], *, durable: bool = True) -> list[Outcome]:
    """Run `writes` in one transaction on `db` (`durable`: synchronous=FULL, the commit is fsynced;
    else as `db` is set); each write's outcome, in order: (result, None) or (None, the error its
    caller is to hear)."""
    outcomes: list[Outcome | None] = [None] * len(writes)
    todo = list(range(len(writes)))
    if durable:
        db.execute("PRAGMA synchronous=FULL")
    try:
        while todo:
            ended_by = _one_transaction(db, writes, todo, outcomes)
            if ended_by is None:
                break
            todo = [i for i in todo if i != ended_by]  # a fresh group, without the write that ended it
    finally:
        if durable:
            db.execute("PRAGMA synchronous=NORMAL")
    return [outcome if outcome is not None else (None, RuntimeError("not run")) for outcome in outcomes]


def _one_transaction(
    db: sqlite3.Connection, writes: list[Write], todo: list[int], outcomes: list[Outcome | None]
) -> int | None:
    """The writes `todo` in one transaction, their outcomes set in `outcomes`; the index of a write
    whose error made SQLite end the transaction (run the rest again without it), else None."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except Exception as exc:  # noqa: BLE001 - nothing started (locked, I/O): every caller hears it
        for i in todo:
            outcomes[i] = (None, exc)
        return None
    done: dict[int, Outcome] = {}
    for i in todo:
        write, args = writes[i]
        try:
            done[i] = (write(db, *args), None)
        except Exception as exc:  # noqa: BLE001 - this write's caller hears of it
            outcomes[i] = (None, exc)
            if not db.in_transaction:  # SQLite rolled the whole transaction back
                return i
    try:
        db.execute("COMMIT")
    except Exception as exc:  # noqa: BLE001 - nothing was committed: every caller hears the true error
        if db.in_transaction:
            db.execute("ROLLBACK")
        for i in done:
            outcomes[i] = (None, exc)
        return None
    for i, outcome in done.items():
        outcomes[i] = outcome
    return None


class Busy:
    """The database was locked: the write did not happen on the event loop (nothing of it was
    committed), and goes to the store's thread, which may wait for the lock."""


BUSY = Busy()


class TickGroup:
    """Short writes of the event loop queued in one tick of the loop, run as one group
    (`commit_group`, no fsync) on the loop's own connection once the tick's other callbacks have
    run: the claims of messages that arrive together (one receive's tasks reach their claims in
    one tick) share one BEGIN IMMEDIATE ... COMMIT. Each caller hears its own
    outcome, only after the commit that covers its write; BUSY when the database was locked (the
    loop's connection never waits for a lock), or when `db()` is None (the store is closing)."""

    def __init__(self, db: Callable[[], sqlite3.Connection | None]) -> None:
        self._db = db
        self._queued: list[tuple[asyncio.Future[Any], Write]] = []

    def run(self, write: Callable[..., T], *args: Any) -> asyncio.Future[T | Busy]:
        """`write(connection, *args)` in this tick's group: its result, BUSY, or its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T | Busy] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._commit)
        self._queued.append((future, (write, args)))
        return future

    def _commit(self) -> None:
        queued = [(future, write) for future, write in self._queued if not future.cancelled()]  # callers gone: not run
        self._queued = []
        db = self._db()
        if db is None:
            outcomes: list[Outcome] = [(BUSY, None)] * len(queued)
        else:
            outcomes = commit_group(db, [write for _, write in queued], durable=False)
        for (future, _), (result, error) in zip(queued, outcomes, strict=True):
            if future.cancelled():
                continue
            if error is None:
                future.set_result(result)
            elif locked(error):
                future.set_result(BUSY)  # nothing of it was committed: BEGIN, or its statement, or COMMIT failed
            else:
                future.set_exception(error)


def locked(error: BaseException) -> bool:
    """Whether `error` is SQLite's "database is locked" (or busy): nothing of the write was done."""
    return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))

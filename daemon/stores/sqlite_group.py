"""Group commit for the SQLite store (cfn_provider.stores.sqlite): durable writes queued together
run in one transaction that commits with one fsync, and fail safely.

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

import sqlite3
from collections.abc import Callable
from typing import Any

Write = tuple[Callable[..., Any], tuple[Any, ...]]
Outcome = tuple[Any, "BaseException | None"]


def commit_group(db: sqlite3.Connection, writes: list[Write]) -> list[Outcome]:
    """Run `writes` in one transaction on `db` (synchronous=FULL: the commit is fsynced); each
    write's outcome, in order: (result, None) or (None, the error its caller is to hear)."""
    outcomes: list[Outcome | None] = [None] * len(writes)
    todo = list(range(len(writes)))
    db.execute("PRAGMA synchronous=FULL")
    try:
        while todo:
            ended_by = _one_transaction(db, writes, todo, outcomes)
            if ended_by is None:
                break
            todo = [i for i in todo if i != ended_by]  # a fresh group, without the write that ended it
    finally:
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

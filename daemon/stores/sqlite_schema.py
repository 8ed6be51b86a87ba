"""The SQLite store's file (cfn_provider.stores.sqlite): its tables, and opening it safely.

Opening makes the file (0600: stored bodies may hold secrets) in a private folder, switches it to
WAL, creates the tables (the records; the stacks' owners), and gives a file made by an older
release the columns it lacks.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from ..config import default_state_dir
from ..trust.at_rest import secure_sqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    owner TEXT,
    lease_until REAL,
    url_digest TEXT NOT NULL,
    status TEXT,
    body BLOB,
    expires_at REAL NOT NULL,
    sent_digests TEXT NOT NULL DEFAULT '',
    scrub_at REAL,
    token TEXT,
    request TEXT,
    progress TEXT,
    next_poll REAL
)"""
COLUMNS = (
    "key, state, owner, lease_until, url_digest, status, body, expires_at, sent_digests, scrub_at, token, "
    "request, progress, next_poll"
)  # in cfn_provider.stores.base.Record's order
OWNERS = """
CREATE TABLE IF NOT EXISTS stack_owners (
    stack_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    since REAL NOT NULL
)"""  # a stack's owner (cfn_provider.stores.base: own_stack); never expires
POLL_INDEX = "CREATE INDEX IF NOT EXISTS due_polls ON records (next_poll) WHERE next_poll IS NOT NULL"


@retry(
    retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)),
    wait=wait_random_exponential(multiplier=0.05, max=1),
    stop=stop_after_delay(30),
    reraise=True,
)
def open_file(path: Path) -> sqlite3.Connection:
    """Open and set up the file; switching to WAL skips SQLite's busy handler, so a second
    process opening a new file at the same moment gets "locked" at once: retry that."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secure_sqlite(path, default_state_dir())  # an existing file open to others: fixed, or refused
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)  # stored bodies may hold secrets
    os.close(fd)
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # see the store's _group: only the stored body needs an fsync
        db.execute(SCHEMA)
        db.execute(OWNERS)
        _add_columns(
            db,
            {
                "scrub_at": "REAL",
                "token": "TEXT",  # a file from before NoEcho retention / tokens
                "request": "TEXT",
                "progress": "TEXT",
                "next_poll": "REAL",
            },
        )  # / polling
        db.execute(POLL_INDEX)
        db.execute("PRAGMA secure_delete=ON")  # a scrubbed or purged body is zeroed, not left in free pages
    except BaseException:
        db.close()
        raise
    return db


def _add_columns(db: sqlite3.Connection, columns: dict[str, str]) -> None:
    """A state file made by an older release gets the columns it lacks (name -> SQL type)."""
    present = {row[1] for row in db.execute("PRAGMA table_info(records)")}
    for name, sql_type in columns.items():
        if name in present:
            continue
        try:
            db.execute(f"ALTER TABLE records ADD COLUMN {name} {sql_type}")
        except sqlite3.OperationalError as exc:  # another process added it first
            if "duplicate column" not in str(exc):
                raise

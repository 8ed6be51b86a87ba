"""cfn_provider.stores.sqlite: the SQLite idempotency store, driven by a fake clock.

The behavioural cases are the shared Store contract (tests/stores/contract.py), run here
against SQLiteStore; the cases below are about the SQLite file itself and `open_store`.
"""

from __future__ import annotations

import inspect
import os
import stat
from pathlib import Path

import pytest

from cfn_provider.stores import open_store
from cfn_provider.stores.base import Record, State, StoreConfigError
from cfn_provider.stores.sqlite import SQLiteStore
from tests.stores.contract import *  # noqa: F401,F403 - the Store contract cases
from tests.stores.contract import KEY, LEASE, TTL, URL_A, answered
from tests.stores.polling_contract import *  # noqa: F401,F403 - the POLLING cases
from tests.stores.transition_contract import *  # noqa: F401,F403 - the transition table


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.db"


@pytest.fixture
async def store(db_path, clock):
    s = SQLiteStore(db_path, ttl=TTL, clock=clock)
    yield s
    await s.close()


@pytest.fixture
def make_store(db_path, clock):
    """More SQLiteStores on the same file."""
    return lambda: SQLiteStore(db_path, ttl=TTL, clock=clock)


@pytest.fixture
def listing(store):
    """The SQLite store lists its records itself."""
    return store


@pytest.mark.parametrize("factory", [SQLiteStore, open_store])
def test_default_ttl_outlives_sqs_retention(factory):
    assert inspect.signature(factory).parameters["ttl"].default > 14 * 24 * 3600


# --- the file ---------------------------------------------------------------------------


async def test_file_and_its_companions_are_private(store, db_path):
    await answered(store, body=b"secret-data")
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600
    companions = list(db_path.parent.glob(db_path.name + "-*"))  # -wal, -shm hold the same data
    assert companions
    for companion in companions:
        assert stat.S_IMODE(os.stat(companion).st_mode) & 0o077 == 0, companion


async def test_missing_parent_directory_is_created_private(tmp_path, clock):
    path = tmp_path / "new" / "state.db"
    s = SQLiteStore(path, clock=clock)
    try:
        assert path.exists()
        assert stat.S_IMODE(os.stat(path.parent).st_mode) & 0o077 == 0
    finally:
        await s.close()


# --- open_store -------------------------------------------------------------------------


async def test_open_store_sqlite_absolute_path(tmp_path):
    s = open_store(f"sqlite://{tmp_path}/x.db")
    try:
        assert isinstance(s, SQLiteStore)
        assert (await s.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
        assert (tmp_path / "x.db").exists()
    finally:
        await s.close()


@pytest.mark.parametrize("url", ["sqlite://relative/state.db", "sqlite://state.db", "sqlite://"])
def test_open_store_refuses_relative_paths(url):
    with pytest.raises(StoreConfigError, match="absolute path"):
        open_store(url)


@pytest.mark.parametrize(
    "url",
    ["", "/var/lib/state.db", "redis://localhost/0", "file:///tmp/x.db", "postgres://db/state", "SQLITE:///tmp/x.db"],
)
def test_open_store_refuses_unknown_schemes(url):
    with pytest.raises(StoreConfigError, match="sqlite:///PATH or dynamodb://TABLE"):
        open_store(url)


async def test_a_write_locked_elsewhere_never_blocks_the_event_loop(store, db_path):
    """Another process holding the write lock: claim and SENT wait on the store's thread (up to its
    30 s busy timeout), not on the event loop, and go through once the lock is let go."""
    import asyncio
    import sqlite3
    import threading

    await store.claim(
        "first-key", "owner-a", URL_A, LEASE, token="owner-a"
    )  # the first claim also purges, on the thread
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock, as a second daemon mid-write would
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    ticker = asyncio.create_task(tick())
    threading.Timer(0.6, lambda: other.execute("COMMIT")).start()
    try:
        claim = await asyncio.wait_for(store.claim(KEY, "owner-a", URL_A, LEASE, token="owner-a"), 10)
    finally:
        ticker.cancel()
    assert claim.acquired
    assert ticks >= 10, f"the event loop stalled while the database was locked ({ticks} ticks in 0.6 s)"

    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    assert await asyncio.wait_for(store.save_response(KEY, "owner-a", "SUCCESS", b"{}"), 10)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    await asyncio.wait_for(store.mark_sent(KEY, URL_A, token="owner-a"), 10)
    other.close()
    record = await store.get(KEY)
    assert record is not None and record.state == "SENT" and record.answered(URL_A)


async def test_a_closed_store_refuses_work_instead_of_hanging(db_path, clock):
    import asyncio

    store = SQLiteStore(db_path, ttl=TTL, clock=clock)
    await store.claim(
        "first-key", "owner-a", URL_A, LEASE, token="owner-a"
    )  # past the purge: the next claim would go on the loop
    await store.close()
    await store.close()  # twice is fine
    for attempt in (
        store.claim(KEY, "owner-a", URL_A, LEASE, token="owner-a"),
        store.save_response(KEY, "owner-a", "SUCCESS", b"{}"),
        store.mark_sent(KEY, URL_A),
        store.get(KEY),
    ):
        with pytest.raises(RuntimeError, match="closed"):
            await asyncio.wait_for(attempt, 5)


# --- which store errors are retried -----------------------------------------------------


def test_transient_errors_are_the_ones_a_retry_can_get_past():
    """Retried with the same token (the worker's tenacity loop): connection errors, timeouts,
    throttling, 5xx, a locked SQLite file; never a failed condition or a bad request."""
    import sqlite3

    from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    from cfn_provider.stores.base import transient

    def client_error(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "UpdateItem")

    assert transient(ReadTimeoutError(endpoint_url="http://x/"))
    assert transient(ConnectionClosedError(endpoint_url="http://x/"))
    assert transient(EndpointConnectionError(endpoint_url="http://x/"))
    assert transient(ConnectionResetError())
    assert transient(client_error("ProvisionedThroughputExceededException", 400))
    assert transient(client_error("ThrottlingException", 400))
    assert transient(client_error("InternalServerError", 500))
    assert transient(sqlite3.OperationalError("database is locked"))
    assert not transient(client_error("ConditionalCheckFailedException", 400))
    assert not transient(client_error("ValidationException", 400))
    assert not transient(client_error("ResourceNotFoundException", 400))
    assert not transient(sqlite3.OperationalError("no such table: records"))
    assert not transient(RuntimeError("the store is closed"))


async def test_a_state_file_from_before_claim_tokens_is_upgraded_in_place(db_path, clock):
    import sqlite3

    db_path.parent.mkdir(parents=True)
    old = sqlite3.connect(db_path)
    old.execute("""CREATE TABLE records (key TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, lease_until REAL,
                   url_digest TEXT NOT NULL, status TEXT, body BLOB, expires_at REAL NOT NULL,
                   sent_digests TEXT NOT NULL DEFAULT '')""")
    old.execute(
        "INSERT INTO records VALUES (?, 'SENT', 'old-daemon', NULL, ?, 'SUCCESS', ?, ?, ?)",
        (KEY, URL_A, b"old-body", clock.now + TTL, URL_A),
    )
    old.commit()
    old.close()
    store = SQLiteStore(db_path, ttl=TTL, clock=clock)
    try:
        record = await store.get(KEY)
        assert record.state is State.SENT and record.body == b"old-body" and record.token is None
        assert record.answered(URL_A)
        claim = await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
        assert not claim.acquired and claim.record.answered(URL_A)  # answered before the upgrade: not re-run
        assert (await store.claim(KEY + "-new", "w1", URL_A, LEASE, token="w1")).acquired
    finally:
        await store.close()


async def test_a_state_file_from_before_stored_requests_is_upgraded_in_place(db_path, clock):
    """A file with tokens but no `request` column (the release before it): its records read with
    request None, list, and take a request on their next claim."""
    import sqlite3

    db_path.parent.mkdir(parents=True)
    old = sqlite3.connect(db_path)
    old.execute("""CREATE TABLE records (key TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, lease_until REAL,
                   url_digest TEXT NOT NULL, status TEXT, body BLOB, expires_at REAL NOT NULL,
                   sent_digests TEXT NOT NULL DEFAULT '', scrub_at REAL, token TEXT)""")
    old.execute(
        "INSERT INTO records VALUES (?, 'CLAIMED', 'old-daemon', ?, ?, NULL, NULL, ?, '', NULL, 'old')",
        (KEY, clock.now - 1, URL_A, clock.now + TTL),
    )
    old.commit()
    old.close()
    store = SQLiteStore(db_path, ttl=TTL, clock=clock)
    try:
        [record] = await store.list_records()
        assert record.key == KEY and record.owner == "old-daemon" and record.request is None
        assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1", request='{"RequestId":"r"}')).acquired
        assert (await store.get(KEY)).request == '{"RequestId":"r"}'
    finally:
        await store.close()
    columns = [row[1] for row in sqlite3.connect(db_path).execute("PRAGMA table_info(records)")]
    assert columns[-3:] == ["request", "progress", "next_poll"]


async def test_states_are_stored_as_plain_text_and_a_plain_string_reads_back_as_the_state(db_path, clock):
    """The `state` column holds the plain names earlier builds wrote (State is a StrEnum): a file
    written by them, rows in every state, reads back with State members and keeps working."""
    import sqlite3

    store = SQLiteStore(db_path, ttl=TTL, clock=clock)
    await store.close()  # the current schema, then rows as an earlier build wrote them: plain strings
    old = sqlite3.connect(db_path)
    for state in ("CLAIMED", "RESPONSE_READY", "SENT", "POLLING"):
        old.execute(
            "INSERT INTO records (key, state, owner, lease_until, url_digest, status, body, expires_at, next_poll) "
            "VALUES (?, ?, 'old-daemon', 0, ?, ?, ?, ?, ?)",
            (
                f"{KEY}-{state}",
                state,
                URL_A,
                "SUCCESS" if state in ("RESPONSE_READY", "SENT") else None,
                b"{}" if state in ("RESPONSE_READY", "SENT") else None,
                clock.now + TTL,
                clock.now if state == "POLLING" else None,
            ),
        )
    old.commit()
    old.close()
    store = SQLiteStore(db_path, ttl=TTL, clock=clock)
    try:
        for state in State:
            record = await store.get(f"{KEY}-{state.value}")
            assert record is not None and record.state is state
        assert {r.state for r in await store.list_records()} == set(State)
        assert await store.due_polls(clock.now, 10) == [f"{KEY}-POLLING"]  # the old rows keep working
        assert (await store.claim(f"{KEY}-CLAIMED", "w1", URL_A, LEASE, token="w1")).acquired  # its lease lapsed
        await store.mark_sent(f"{KEY}-RESPONSE_READY", URL_A)
    finally:
        await store.close()
    stored = dict(sqlite3.connect(db_path).execute("SELECT key, state || ':' || typeof(state) FROM records"))
    assert stored[f"{KEY}-CLAIMED"] == "CLAIMED:text" and stored[f"{KEY}-RESPONSE_READY"] == "SENT:text"


def test_a_stored_state_that_names_no_state_is_refused_by_name():
    with pytest.raises(ValueError, match="'LOST' is not a valid State"):
        Record(KEY, "LOST", None, None, URL_A, None, None, 0.0)


# --- group commit: stored bodies that finish together share one fsync ------------------------
async def _queued_together(store: SQLiteStore, writes):
    """Run `writes` (coroutine factories) while the store's thread is held, so they are all queued
    when it is let go; their outcomes, and the statements the thread's connection ran."""
    import asyncio
    import threading

    statements: list[str] = []
    store._thread.call(lambda: store._db.set_trace_callback(statements.append))
    gate = threading.Event()
    held = store._thread.run(gate.wait)
    tasks = [asyncio.ensure_future(w()) for w in writes]
    await asyncio.sleep(0.05)  # every write is on the queue behind the held job
    gate.set()
    await held
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    store._thread.call(lambda: store._db.set_trace_callback(None))
    return outcomes, statements


async def test_stored_bodies_queued_together_share_one_durable_commit(store):
    keys = [f"{KEY}-{i}" for i in range(8)]
    for k in keys:
        assert (await store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}")).acquired
    outcomes, statements = await _queued_together(
        store, [lambda k=k: store.save_response(k, f"t-{k}", "SUCCESS", f'{{"k":"{k}"}}'.encode()) for k in keys]
    )
    assert outcomes == [True] * len(keys)
    commits = [s for s in statements if s.strip().upper() == "COMMIT"]
    assert len(commits) == 1, statements  # one transaction, so one fsync, for all eight
    assert statements.index("PRAGMA synchronous=FULL") < statements.index(commits[0])
    for k in keys:
        record = await store.get(k)
        assert record is not None and record.state == "RESPONSE_READY" and record.body == f'{{"k":"{k}"}}'.encode()


async def test_a_write_that_fails_in_a_group_fails_alone(store):
    """One caller's write raising inside the group's transaction (here: a body that is not JSON) leaves
    the others' writes
    committed and their callers told so; a refused write (wrong token) is False, not an error."""
    keys = [f"{KEY}-{i}" for i in range(3)]
    for k in keys:
        await store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}")
    outcomes, _ = await _queued_together(
        store,
        [
            lambda: store.save_response(keys[0], f"t-{keys[0]}", "SUCCESS", b"{}"),
            lambda: store.save_response(keys[1], f"t-{keys[1]}", "SUCCESS", object()),  # type: ignore[arg-type]
            lambda: store.save_response(keys[2], "someone-else", "SUCCESS", b"{}"),
        ],
    )
    assert outcomes[0] is True
    assert isinstance(outcomes[1], TypeError)
    assert outcomes[2] is False
    assert (await store.get(keys[0])).state == "RESPONSE_READY"
    assert (await store.get(keys[1])).state == "CLAIMED"
    assert (await store.get(keys[2])).state == "CLAIMED"


async def test_a_group_whose_commit_fails_fails_every_caller(store, db_path):
    """Nothing committed, nobody told otherwise: each caller retries its own write (same token)."""
    import sqlite3

    keys = [f"{KEY}-{i}" for i in range(3)]
    for k in keys:
        await store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}")
    store._thread.call(lambda: store._db.execute("PRAGMA busy_timeout = 100"))
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
    try:
        outcomes, _ = await _queued_together(
            store, [lambda k=k: store.save_response(k, f"t-{k}", "SUCCESS", b"{}") for k in keys]
        )
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert all(isinstance(o, sqlite3.OperationalError) and "locked" in str(o) for o in outcomes), outcomes
    for k in keys:
        assert (await store.get(k)).state == "CLAIMED"
        assert await store.save_response(k, f"t-{k}", "SUCCESS", b"{}")  # the retry goes through


def _trigger(db_path, key: str, action: str) -> None:
    """A trigger that makes storing `key`'s answer fail: RAISE(ABORT) fails the statement alone,
    RAISE(ROLLBACK) ends the whole transaction, as a full disk or an I/O error does."""
    import sqlite3

    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute(
            f"CREATE TRIGGER injected BEFORE UPDATE ON records WHEN NEW.key = '{key}' "
            f"AND NEW.state = 'RESPONSE_READY' BEGIN SELECT RAISE({action}, 'injected failure'); END"
        )
    finally:
        db.close()


@pytest.mark.parametrize("action", ["ROLLBACK", "ABORT"])
async def test_a_write_that_fails_a_group_fails_alone_and_the_rest_commit_as_a_group(
    store, db_path, make_store, action
):
    """Whether the failing write ends the transaction (ROLLBACK) or only its own statement (ABORT),
    its caller hears its own error, every other caller's write is committed durably (in a fresh
    group, never one by one outside a transaction), and each of them is told so."""
    import sqlite3

    keys = [f"{KEY}-{i}" for i in range(5)]
    for k in keys:
        assert (await store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}")).acquired
    _trigger(db_path, keys[2], action)
    outcomes, statements = await _queued_together(
        store, [lambda k=k: store.save_response(k, f"t-{k}", "SUCCESS", f'{{"k":"{k}"}}'.encode()) for k in keys]
    )
    assert isinstance(outcomes[2], sqlite3.IntegrityError) and "injected failure" in str(outcomes[2]), outcomes
    assert [o for i, o in enumerate(outcomes) if i != 2] == [True] * 4, outcomes
    begins = [s for s in statements if s.upper().startswith("BEGIN")]
    commits = [s for s in statements if s.strip().upper() == "COMMIT"]
    assert len(commits) == 1 and len(begins) == (2 if action == "ROLLBACK" else 1), statements
    other = make_store()  # what survives: read through another connection
    try:
        for i, k in enumerate(keys):
            record = await other.get(k)
            assert record.state == ("CLAIMED" if i == 2 else "RESPONSE_READY"), (k, record.state)
    finally:
        await other.close()


async def test_a_full_disk_fails_each_write_with_its_true_error_and_is_retried(store, db_path):
    """SQLITE_FULL ends the transaction: each caller hears "database or disk is full" (not "cannot
    commit - no transaction is active"), a transient error, and its retry (the same call, the same
    token) succeeds once there is room again."""
    import sqlite3

    from cfn_provider.stores.base import transient

    keys = [f"{KEY}-{i}" for i in range(3)]
    for k in keys:
        assert (await store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}")).acquired
    pages = store._thread.call(lambda: store._db.execute("PRAGMA page_count").fetchone()[0])
    store._thread.call(lambda: store._db.execute(f"PRAGMA max_page_count = {pages}").fetchone())  # the disk is full
    body = b'{"Data":"' + b"x" * 20000 + b'"}'
    outcomes, _ = await _queued_together(
        store, [lambda k=k: store.save_response(k, f"t-{k}", "SUCCESS", body) for k in keys]
    )
    assert all(isinstance(o, sqlite3.OperationalError) and "full" in str(o) for o in outcomes), outcomes
    assert all(transient(o) for o in outcomes)
    for k in keys:
        assert (await store.get(k)).state == "CLAIMED"
    store._thread.call(lambda: store._db.execute("PRAGMA max_page_count = 1073741823").fetchone())  # room again
    assert [await store.save_response(k, f"t-{k}", "SUCCESS", body) for k in keys] == [True] * 3
    assert [(await store.get(k)).body for k in keys] == [body] * 3


def test_a_full_disk_and_an_io_error_are_transient():
    import sqlite3

    from cfn_provider.stores.base import transient

    assert transient(sqlite3.OperationalError("database or disk is full"))
    assert transient(sqlite3.OperationalError("disk I/O error"))
    assert not transient(sqlite3.OperationalError("cannot commit - no transaction is active"))

"""cfn_provider.stores.sqlite_group's TickGroup, through SQLiteStore: the claims queued on the
event loop in one tick share one transaction, each caller hears its own outcome after the COMMIT
that covers it, and a write that fails fails alone.

(The durable group commit of stored bodies, on the store's thread, is tested in test_sqlite.py.)
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from cfn_provider.stores.sqlite import SQLiteStore
from tests.stores.contract import LEASE, TTL, URL_A, URL_B, clock  # noqa: F401 - `clock` is a fixture

KEYS = [f"arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid|req-{i}" for i in range(8)]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.db"


@pytest.fixture
async def store(db_path, clock):  # noqa: F811 - the fixture imported above
    s = SQLiteStore(db_path, ttl=TTL, clock=clock)
    assert (await s.claim("first-key", "owner-a", URL_A, LEASE, token="first")).acquired  # the purge, on the thread
    yield s
    await s.close()


async def _together(store: SQLiteStore, calls):
    """Start `calls` (coroutine factories) in one tick; their outcomes, the statements the event
    loop's connection ran, and how many statements had run when each caller heard its outcome."""
    statements: list[str] = []
    heard_after: list[int] = [0] * len(calls)
    store._quick.set_trace_callback(statements.append)

    async def one(i: int):
        try:
            return await calls[i]()
        finally:
            heard_after[i] = len(statements)

    try:
        outcomes = await asyncio.gather(*(one(i) for i in range(len(calls))), return_exceptions=True)
    finally:
        store._quick.set_trace_callback(None)
    return outcomes, statements, heard_after


def _commits(statements: list[str]) -> list[int]:
    return [i for i, s in enumerate(statements) if s.strip().upper() == "COMMIT"]


async def test_claims_that_arrive_together_share_one_commit_and_a_refused_one_refuses_alone(store):
    held = KEYS[3]
    assert (await store.claim(held, "owner-b", URL_B, LEASE, token="other-attempt")).acquired
    outcomes, statements, heard_after = await _together(
        store, [lambda k=k: store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}") for k in KEYS]
    )
    commits = _commits(statements)
    assert len(commits) == 1, statements  # eight claims, one transaction
    assert [s for s in statements if s.upper().startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    assert all(after > commits[0] for after in heard_after), (heard_after, statements)  # nobody hears before it
    for k, claim in zip(KEYS, outcomes, strict=True):
        if k == held:  # the conflict: refused, and told who holds it
            assert not claim.acquired and claim.record.token == "other-attempt"
        else:
            assert claim.acquired and claim.record is None
            assert (await store.get(k)).token == f"t-{k}"
    assert (await store.get(held)).token == "other-attempt"


async def test_two_claims_of_one_key_in_one_group_have_one_winner(store):
    """Two copies of one message in a receive: the conditional write still lets exactly one claim."""
    outcomes, statements, _ = await _together(
        store, [lambda t=t: store.claim(KEYS[0], "owner-a", URL_A, LEASE, token=t) for t in ("copy-1", "copy-2")]
    )
    assert len(_commits(statements)) == 1
    assert [claim.acquired for claim in outcomes] == [True, False]
    assert outcomes[1].record.token == "copy-1"
    assert (await store.get(KEYS[0])).token == "copy-1"


@pytest.mark.parametrize("action", ["ABORT", "ROLLBACK"])
async def test_a_claim_that_fails_fails_alone_and_the_others_commit(store, db_path, action):
    """A claim whose statement fails (ABORT: its statement alone; ROLLBACK: the whole transaction, as a
    full disk does) raises to its own caller; the others' claims are committed and they hear so."""
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute(
        f"CREATE TRIGGER injected BEFORE INSERT ON records WHEN NEW.key = '{KEYS[2]}' "
        f"BEGIN SELECT RAISE({action}, 'injected failure'); END"
    )
    db.close()
    outcomes, statements, _ = await _together(
        store, [lambda k=k: store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}") for k in KEYS[:5]]
    )
    assert isinstance(outcomes[2], sqlite3.IntegrityError) and "injected failure" in str(outcomes[2]), outcomes
    assert [o.acquired for i, o in enumerate(outcomes) if i != 2] == [True] * 4, outcomes
    assert len(_commits(statements)) == 1, statements
    assert await store.get(KEYS[2]) is None
    for i, k in enumerate(KEYS[:5]):
        if i != 2:
            assert (await store.get(k)).token == f"t-{k}"


async def test_a_locked_database_sends_the_whole_group_to_the_thread(store, db_path):
    """The loop's connection never waits for a lock: a group that cannot begin is not committed,
    and each of its writes goes to the store's thread, which waits for the lock."""
    import threading

    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    try:
        outcomes, statements, _ = await _together(
            store, [lambda k=k: store.claim(k, "owner-a", URL_A, LEASE, token=f"t-{k}") for k in KEYS[:4]]
        )
    finally:
        await asyncio.sleep(0.35)
        other.close()
    assert [claim.acquired for claim in outcomes] == [True] * 4, outcomes
    assert _commits(statements) == [], statements  # nothing committed on the loop
    for k in KEYS[:4]:
        assert (await store.get(k)).token == f"t-{k}"

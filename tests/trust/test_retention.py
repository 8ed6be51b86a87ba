"""NoEcho retention (cfn_provider.trust.retention): stored NoEcho Data leaves both stores after the replay window,
and a request that comes back after it is answered FAILED, never re-run, never given the secret."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from structlog.testing import capture_logs

from cfn_provider.ops.bootstrap import ensure_table
from cfn_provider.stores.dynamodb import DynamoDBStore
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.trust import retention
from tests.stores.contract import KEY, LEASE, URL_A, URL_B, Clock
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic

SECRET = "hunter2-" + uuid.uuid4().hex
NOECHO = json.dumps(
    {
        "Status": "SUCCESS",
        "PhysicalResourceId": "pid-1",
        "StackId": "s",
        "RequestId": "r",
        "LogicalResourceId": "L",
        "NoEcho": True,
        "Data": {"Password": SECRET},
    }
).encode()
PLAIN = json.dumps(
    {
        "Status": "SUCCESS",
        "PhysicalResourceId": "pid-2",
        "StackId": "s",
        "RequestId": "r",
        "LogicalResourceId": "L",
        "Data": {"Url": "https://example.com"},
    }
).encode()
W = retention.NOECHO_REPLAY_WINDOW
TTL = 20 * W  # records outlive the window, as the default TTL (15 days) does


def test_the_window_covers_the_longest_service_timeout_with_a_margin():
    assert 3600 < W <= 2 * 3600


@pytest.mark.parametrize(
    "body, secret",
    [
        (NOECHO, True),
        (PLAIN, False),
        (json.dumps({"Status": "SUCCESS", "NoEcho": True}).encode(), False),  # nothing to hide
        (json.dumps({"Status": "SUCCESS", "NoEcho": True, "Data": {}}).encode(), False),
        (json.dumps({"Status": "SUCCESS", "NoEcho": "true", "Data": {"a": "b"}}).encode(), False),  # never sent so
        (b"not json", False),
        (b"", False),
        (None, False),
    ],
)
def test_holds_secret(body, secret):
    assert retention.holds_secret(body) is secret


def test_scrub_keeps_everything_but_the_data():
    doc = json.loads(retention.scrub(NOECHO))
    assert SECRET not in retention.scrub(NOECHO).decode()
    assert doc == {
        "Status": "SUCCESS",
        "PhysicalResourceId": "pid-1",
        "StackId": "s",
        "RequestId": "r",
        "LogicalResourceId": "L",
    }
    assert retention.physical_id(NOECHO) == "pid-1"


# --- both stores ---------------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock(float(int(time.time())))


@pytest.fixture(params=["sqlite", "dynamodb"])
async def backend(request, tmp_path, clock):
    """(store, make_another_store_on_the_same_backing) for each implementation."""
    if request.param == "sqlite":
        path = tmp_path / "state.db"

        def make():
            return SQLiteStore(path, ttl=TTL, clock=clock)
    else:
        emulator = request.getfixturevalue("emulator")
        make_dynamodb_writes_atomic()
        name = f"cfn-state-{uuid.uuid4().hex[:12]}"
        ensure_table(emulator.client("dynamodb"), name)

        def make():
            return DynamoDBStore(name, ttl=TTL, clock=clock)

    store = make()
    yield store, make
    await store.close()


async def stored(store, body, digest=URL_A):
    assert (await store.claim(KEY, "w1", digest, LEASE, token="w1")).acquired
    assert await store.save_response(KEY, "w1", "SUCCESS", body)
    await store.mark_sent(KEY, digest)


async def test_noecho_body_is_kept_whole_inside_the_window_and_scrubbed_after(backend, clock):
    store, _ = backend
    await stored(store, NOECHO)
    record = await store.get(KEY)
    assert record.body == NOECHO and record.scrub_at == pytest.approx(clock.now + W)
    clock.advance(W - 1)
    assert await store.scrub_due() == 0
    assert (await store.get(KEY)).body == NOECHO  # still replayable to a new URL
    clock.advance(2)
    assert await store.scrub_due() == 1
    record = await store.get(KEY)
    assert SECRET.encode() not in record.body and json.loads(record.body)["PhysicalResourceId"] == "pid-1"
    assert retention.past_window(record.scrub_at, clock.now) and record.scrub_at == retention.SCRUBBED
    assert record.answered(URL_A) and record.status == "SUCCESS"  # duplicates are still recognised
    assert await store.scrub_due() == 0  # once


async def test_a_body_without_noecho_data_is_never_scrubbed(backend, clock):
    store, _ = backend
    await stored(store, PLAIN)
    assert (await store.get(KEY)).scrub_at is None
    clock.advance(W * 3)
    await store.scrub_due()
    await store.scrub(KEY)
    assert (await store.get(KEY)).body == PLAIN


async def test_any_store_on_the_same_backing_scrubs_a_record_it_meets_past_the_window(backend, clock):
    """The daemon that stored it may be gone: whoever meets the record later scrubs it."""
    store, make = backend
    await stored(store, NOECHO)
    other = make()
    try:
        await other.scrub(KEY)  # inside the window: nothing
        assert (await other.get(KEY)).body == NOECHO
        clock.advance(W + 1)
        await other.scrub(KEY)
        assert SECRET.encode() not in (await store.get(KEY)).body
    finally:
        await other.close()


async def test_sqlite_leaves_no_copy_of_the_secret_in_its_files(tmp_path, clock):
    path = tmp_path / "state.db"
    store = SQLiteStore(path, ttl=TTL, clock=clock)
    try:
        await stored(store, NOECHO)
        clock.advance(W + 1)
        assert await store.scrub_due() == 1
    finally:
        await store.close()
    for file in tmp_path.iterdir():
        assert SECRET.encode() not in file.read_bytes(), file.name


async def test_an_older_state_file_gains_the_column(tmp_path, clock):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE records (key TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, lease_until REAL, "
        "url_digest TEXT NOT NULL, status TEXT, body BLOB, expires_at REAL NOT NULL, "
        "sent_digests TEXT NOT NULL DEFAULT '')"
    )
    db.execute(
        "INSERT INTO records VALUES ('k', 'SENT', 'w', NULL, 'd', 'SUCCESS', ?, ?, 'd')", (NOECHO, clock.now + TTL)
    )
    db.commit()
    db.close()
    store = SQLiteStore(path, ttl=TTL, clock=clock)
    try:
        record = await store.get("k")
        assert record.body == NOECHO and record.scrub_at is None  # stored before: kept as it was
        await stored(store, NOECHO)
        assert (await store.get(KEY)).scrub_at == pytest.approx(clock.now + W)
    finally:
        await store.close()


async def test_a_resend_within_the_window_still_gets_the_whole_body(backend, clock):
    """CloudFormation retrying with a new URL inside the window: the stored SUCCESS, Data included."""
    store, _ = backend
    await stored(store, NOECHO)
    clock.advance(W / 2)
    claim = await store.claim(KEY, "w2", URL_B, LEASE, token="w2")
    assert not claim.acquired and claim.record.body == NOECHO
    assert not retention.past_window(claim.record.scrub_at, clock.now)


# --- the replay path, through the real queue -----------------------------------------------------


async def test_a_request_back_after_the_window_is_answered_failed_never_rerun(run_daemon, stack, monkeypatch, tmp_path):
    """Same StackId + RequestId, a new ResponseURL, after the window: FAILED with the stored id, the
    handler not called again, and the secret nowhere in the answer."""
    monkeypatch.setenv("CFN_TEST_NOECHO_SECRET", SECRET)
    monkeypatch.setattr(retention, "NOECHO_REPLAY_WINDOW", 1.0)
    daemon = await run_daemon(handlers=(("Custom::Secret", "tests.support.noecho_handler"),))
    first = stack.request("Create", "Db", resource_type="Custom::Secret")
    stack.publish(first)
    answer = await asyncio.to_thread(stack.response, first, 30)
    assert answer["Status"] == "SUCCESS" and answer["Data"]["Password"].startswith(SECRET)
    await asyncio.sleep(1.5)  # past the (shortened) window
    again = dict(first, ResponseURL=stack.response_url(f"{stack.name}/Db/retry-{uuid.uuid4()}"))
    with capture_logs() as logs:
        stack.publish(again)
        late = await asyncio.to_thread(stack.response, again, 30)
    assert late is not None and late["Status"] == "FAILED", late
    assert late["PhysicalResourceId"] == answer["PhysicalResourceId"]
    assert "Data" not in late and SECRET not in json.dumps(late) and "NoEcho" in late["Reason"]
    assert [e for e in logs if e["event"] == "replay.scrubbed"]
    assert not [e for e in logs if e["event"] == "handler.raised"]
    for file in tmp_path.glob("state.db*"):  # the replay scrubbed the stored body on its way
        assert SECRET.encode() not in file.read_bytes(), file.name
    assert await daemon.stop() == 0


# --- the progress of a long-running request --------------------------------------------------------


def poll_state(no_echo: bool) -> str:
    from cfn_provider.pipeline.poll_steps import PollState

    return PollState(
        {"CrHelperData": {"Password": SECRET}}, "pid-9", time.time() + 3000, 1, time.time(), no_echo
    ).dumps()


@pytest.mark.parametrize("answer", ["polling", "SUCCESS", "FAILED"])
async def test_noecho_progress_is_kept_for_the_window_then_scrubbed_whatever_the_answer(backend, clock, answer):
    """A NoEcho progress (crhelper's helper.Data with helper.NoEcho) is kept in clear for the replay
    window after it was stored, as a NoEcho body is, then scrubbed, keeping the bookkeeping: while the
    request still polls, and after its answer, even a FAILED one that has no Data of its own."""
    store, _ = backend
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
    assert await store.save_progress(KEY, "w1", poll_state(True), clock.now + 5, '{"RequestType":"Create"}')
    assert (await store.get(KEY)).scrub_at == pytest.approx(clock.now + W)
    if answer != "polling":
        clock.advance(5)
        assert await store.take_poll(KEY, "w1", LEASE, token="step") is not None
        body = NOECHO if answer == "SUCCESS" else b'{"Status":"FAILED","Reason":"gone"}'
        assert await store.save_response(KEY, "step", answer, body)
        await store.mark_sent(KEY, URL_A, "step")
    clock.advance(W - 10)
    assert await store.scrub_due() == 0
    assert SECRET in (await store.get(KEY)).progress
    clock.advance(W)
    assert await store.scrub_due() == 1
    record = await store.get(KEY)
    assert SECRET not in record.progress and SECRET.encode() not in (record.body or b"")
    assert json.loads(record.progress)["physical_id"] == "pid-9" and json.loads(record.progress)["progress"] is None


async def test_a_progress_not_marked_noecho_is_kept(backend, clock):
    store, _ = backend
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
    assert await store.save_progress(KEY, "w1", poll_state(False), clock.now + 5, '{"RequestType":"Create"}')
    assert (await store.get(KEY)).scrub_at is None
    clock.advance(W * 2)
    await store.scrub_due()
    await store.scrub(KEY)
    assert SECRET in (await store.get(KEY)).progress

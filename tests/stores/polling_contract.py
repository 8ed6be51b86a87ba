"""The Store contract for long-running actions (POLLING), run against every store like contract.py.

    absent -> CLAIMED -> save_progress -> POLLING -> take_poll (leased) -> save_progress (let go) ...
                                                                      -> save_response -> RESPONSE_READY -> SENT

Imported by tests/stores/test_sqlite.py and tests/stores/test_dynamodb.py, with their `store`,
`make_store` and `clock` fixtures.
"""

from __future__ import annotations

import json

import pytest

from cfn_provider.stores.base import CLAIMED, POLLING, RESPONSE_READY, SENT
from tests.stores.contract import KEY, LEASE, TTL, URL_A, URL_B, Rival, retried
from tests.support.lying_store import LyingStore

REQUEST = json.dumps({"RequestType": "Create", "RequestId": "req-1", "ResponseURL": "https://example/x"})
STEP = '{"Operation":"op-1"}'


async def polling(store, clock, after=10.0, token="w1"):
    """Claim KEY and save its first progress, as the worker does when `create` returns InProgress."""
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token=token)).acquired
    assert await store.save_progress(KEY, token, STEP, clock.now + after, REQUEST)


async def test_save_progress_keeps_the_request_and_lets_go_of_the_lease(store, clock):
    await polling(store, clock)
    record = await store.get(KEY)
    assert record.state == POLLING and record.request == REQUEST and record.progress == STEP
    assert record.next_poll == pytest.approx(clock.now + 10) and not record.leased(clock.now)
    assert await store.due_polls(clock.now, 10) == []  # not before its time
    clock.advance(10)
    assert await store.due_polls(clock.now, 10) == [KEY]


async def test_save_progress_needs_the_attempts_token(store, clock):
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
    assert not await store.save_progress(KEY, "w2", STEP, clock.now, REQUEST)
    assert (await store.get(KEY)).state == CLAIMED
    assert not await store.save_progress(KEY + "-absent", "w1", STEP, clock.now, REQUEST)
    assert await store.get(KEY + "-absent") is None


@pytest.mark.parametrize("digest", [URL_A, URL_B])
async def test_a_polling_request_is_never_claimed_again(store, clock, digest):
    """A redelivered message (or CloudFormation's retry) meets the POLLING record: never re-run `create`."""
    await polling(store, clock)
    clock.advance(LEASE * 10)  # no lease anywhere
    claim = await store.claim(KEY, "w2", digest, LEASE, token="w2")
    assert not claim.acquired and claim.record.state == POLLING
    assert (await store.get(KEY)).progress == STEP


async def test_take_poll_leases_a_due_poll_to_one_token(store, clock, make_store):
    await polling(store, clock, after=5)
    assert await store.take_poll(KEY, "w2", LEASE, token="early") is None  # not due yet
    clock.advance(5)
    other = make_store()
    try:
        taken = await store.take_poll(KEY, "w2", LEASE, token="t2")
        assert taken is not None and taken.token == "t2" and taken.progress == STEP and taken.request == REQUEST
        assert await other.take_poll(KEY, "w3", LEASE, token="t3") is None  # one fleet member per step
    finally:
        await other.close()
    assert await store.due_polls(clock.now, 10) == []  # not due while its step is leased
    assert await store.extend(KEY, "t2", LEASE)  # the step's heartbeat
    assert not await store.save_progress(KEY, "w1", '{"stale":1}', clock.now, None)  # the old token lost it
    assert await store.save_progress(KEY, "t2", '{"Operation":"op-1","n":2}', clock.now + 30)
    record = await store.get(KEY)
    assert record.state == POLLING and record.progress == '{"Operation":"op-1","n":2}' and record.request == REQUEST
    assert not record.leased(clock.now)
    assert not await store.extend(KEY, "t2", LEASE), "a late heartbeat re-took a poll it had let go"


async def test_a_poll_step_whose_owner_died_is_taken_over_after_its_lease(store, clock):
    await polling(store, clock, after=1)
    clock.advance(1)
    assert await store.take_poll(KEY, "dead", LEASE, token="dead") is not None  # then SIGKILL
    clock.advance(LEASE / 2)
    assert await store.due_polls(clock.now, 10) == []
    assert await store.take_poll(KEY, "w2", LEASE, token="t2") is None
    clock.advance(LEASE / 2 + 1)
    assert await store.due_polls(clock.now, 10) == [KEY]
    taken = await store.take_poll(KEY, "w2", LEASE, token="t2")
    assert taken is not None and taken.progress == STEP  # resumes from the stored progress
    assert not await store.save_response(KEY, "dead", "SUCCESS", b"late")


async def test_a_finished_poll_is_answered_like_any_request(store, clock):
    await polling(store, clock, after=1)
    clock.advance(1)
    await store.take_poll(KEY, "w2", LEASE, token="t2")
    assert await store.save_response(KEY, "t2", "SUCCESS", b"done")
    record = await store.get(KEY)
    assert record.state == RESPONSE_READY and record.body == b"done" and record.leased(clock.now)
    await store.mark_sent(KEY, URL_A, token="t2")
    clock.advance(LEASE * 2)
    assert await store.due_polls(clock.now, 10) == []
    record = await store.get(KEY)
    assert record.state == SENT and record.answered(URL_A)
    late = await store.claim(KEY, "w3", URL_A, LEASE, token="w3")
    assert not late.acquired and late.record.answered(URL_A)


async def test_a_polled_answer_whose_owner_died_before_sending_it_is_due_again(store, clock):
    """No queue message brings a polled request back: its stored answer stays due until sent."""
    await polling(store, clock, after=1)
    clock.advance(1)
    await store.take_poll(KEY, "dead", LEASE, token="dead")
    assert await store.save_response(KEY, "dead", "SUCCESS", b"the-answer")  # then SIGKILL, before the PUT
    assert await store.due_polls(clock.now, 10) == []  # its owner is still delivering it
    clock.advance(LEASE + 1)
    assert await store.due_polls(clock.now, 10) == [KEY]
    taken = await store.take_poll(KEY, "w2", LEASE, token="t2")
    assert taken is not None and taken.state == RESPONSE_READY and taken.body == b"the-answer"
    await store.mark_sent(KEY, URL_A, token="t2")
    clock.advance(LEASE * 10)
    assert await store.due_polls(clock.now, 10) == [] and (await store.get(KEY)).state == SENT


async def test_an_answer_from_a_claim_is_never_listed_as_a_poll(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert await store.save_response(KEY, "w1", "SUCCESS", b"x")
    clock.advance(LEASE * 10)  # the redelivered message replays it, not the poll scheduler
    assert await store.due_polls(clock.now, 10) == []
    assert await store.take_poll(KEY, "w2", LEASE, token="t2") is None


async def test_due_polls_are_oldest_first_and_limited(store, clock):
    for i in range(5):
        key = f"{KEY}-{i}"
        assert (await store.claim(key, "w1", URL_A, LEASE, token=f"w{i}")).acquired
        assert await store.save_progress(key, f"w{i}", STEP, clock.now + 10 - i, REQUEST)
    clock.advance(20)
    assert await store.due_polls(clock.now, 3) == [f"{KEY}-4", f"{KEY}-3", f"{KEY}-2"]
    assert len(await store.due_polls(clock.now, 100)) == 5


async def test_an_expired_polling_record_is_as_if_absent(store, clock):
    await polling(store, clock, after=1)
    clock.advance(TTL + 1)
    assert await store.due_polls(clock.now, 10) == []
    assert await store.take_poll(KEY, "w2", LEASE, token="t2") is None
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert claim.acquired and claim.record is None
    record = await store.get(KEY)
    assert record.state == CLAIMED and record.progress is None and record.next_poll is None


LIES = [
    pytest.param(set(), id="no-lie"),
    *(pytest.param({n}, id=f"lie-at-write-{n}") for n in range(1, 8)),
    pytest.param(set(range(1, 30, 2)), id="every-write-lies-once"),
]


@pytest.mark.parametrize("lie_at", LIES)
async def test_a_lost_answer_at_any_polling_write_is_recognised_as_this_attempts_own(store, clock, make_store, lie_at):
    """claim -> save_progress -> take_poll -> save_progress -> take_poll -> save_response -> mark_sent,
    each answer possibly lost after the write was applied, with a rival on the same data."""
    rival = Rival(make_store(), clock)
    try:
        w = LyingStore(store, lie_at)
        assert (await retried(lambda: w.claim(KEY, "w1", URL_A, LEASE, token="a1"))).acquired
        assert await retried(lambda: w.save_progress(KEY, "a1", STEP, clock.now + 1, REQUEST))
        await rival.tries()  # a redelivered copy: refused, POLLING
        for step, token in enumerate(("p1", "p2")):
            clock.advance(1)
            taken = await retried(lambda token=token: w.take_poll(KEY, "w1", LEASE, token=token))
            assert taken is not None and taken.token == token, "a retried take_poll met its own lease"
            assert await rival.store.take_poll(KEY, "rival", LEASE, token=f"r{step}") is None
            if step == 0:
                assert await retried(lambda token=token: w.save_progress(KEY, token, '{"n":1}', clock.now + 1))
        assert await retried(lambda: w.save_response(KEY, "p2", "SUCCESS", b"done"))
        await retried(lambda: w.mark_sent(KEY, URL_A, "p2"))
        record = await store.get(KEY)
        assert record.state == SENT and record.body == b"done" and record.progress == '{"n":1}'
        assert record.request == REQUEST
        assert w.lies == len(lie_at & set(range(1, w.writes + 1)))
    finally:
        await rival.store.close()


async def test_a_due_poll_is_found_behind_more_held_entries_than_the_limit(store, clock):
    """DynamoDB applies a query's Limit before its filter: entries in the poll index whose next
    poll has passed but whose lease lives (a step running long, an answer an older release parked
    with a 30-day lease) must not hide a due poll behind them, however many there are."""
    for i in range(40):
        key = f"{KEY}-held-{i}"
        assert (await store.claim(key, "w1", URL_A, LEASE, token=f"c{i}")).acquired
        assert await store.save_progress(key, f"c{i}", STEP, clock.now, REQUEST)
        assert await store.take_poll(key, "w1", LEASE, token=f"s{i}") is not None
        assert await store.extend(key, f"s{i}", 30 * 24 * 3600)  # held far past its next poll
    clock.advance(LEASE + 1)
    assert (await store.claim(KEY, "w2", URL_A, LEASE, token="due")).acquired
    assert await store.save_progress(KEY, "due", STEP, clock.now, REQUEST)
    clock.advance(1)
    assert await store.due_polls(clock.now, 2) == [KEY]


async def test_a_parked_answer_is_never_due_again_and_holds_no_lease(store, clock):
    """An answer that cannot be delivered is parked: out of the due polls for good (not leased
    for 30 days), so nothing waits for it and no look meets it again."""
    await polling(store, clock, after=1)
    clock.advance(1)
    assert await store.take_poll(KEY, "w2", LEASE, token="t2") is not None
    assert await store.save_response(KEY, "t2", "SUCCESS", b"undeliverable")
    assert await store.park(KEY, "t2")
    assert await store.park(KEY, "t2")  # a retry of it: done already
    record = await store.get(KEY)
    assert record.state == RESPONSE_READY and not record.leased(clock.now) and record.next_poll is None
    for _ in range(3):
        clock.advance(LEASE * 5)
        assert await store.due_polls(clock.now, 10) == []
    claim = await store.claim(KEY, "w3", URL_A, LEASE, token="w3")  # a later copy: replays it at once
    assert not claim.acquired and claim.record.body == b"undeliverable" and not claim.record.leased(clock.now)


async def test_take_poll_early_takes_a_waiting_poll_but_never_a_held_one(store, clock):
    """The operator ending a stuck request (`answer --force`) takes its poll before it is due, never
    from under a live step; a parked one (out of the index) too."""
    await polling(store, clock, after=600)
    taken = await store.take_poll(KEY, "operator", LEASE, token="op", early=True)
    assert taken is not None and taken.token == "op" and taken.progress == STEP
    assert await store.take_poll(KEY, "other", LEASE, token="other", early=True) is None  # held by "op" now
    assert await store.park(KEY, "op")
    assert await store.take_poll(KEY, "operator", LEASE, token="op2", early=True) is not None
    assert await store.save_response(KEY, "op2", "FAILED", b"ended")
    await store.mark_sent(KEY, URL_A, "op2")
    assert (await store.get(KEY)).state == SENT and await store.due_polls(clock.now + LEASE * 10, 10) == []

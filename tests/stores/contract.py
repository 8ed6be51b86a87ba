"""The Store contract (daemon/stores/sqlite.py) as behaviour: every implementation runs these cases.

A test module for one implementation imports everything from here and provides three fixtures:
`store`, a fresh empty store on the `clock` fixture with ttl=TTL, and `make_store()`, a factory
for further stores on the SAME backing file or table (same clock and TTL; the caller closes
them); and `listing`, a store on the same data that can `list_records` (the operator's view).
Time is the fake `clock`: nothing sleeps.

    from tests.stores.contract import *  # noqa: F401,F403 - the shared cases
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from cfn_provider.stores.base import CLAIMED, POLLING, RESPONSE_READY, SENT, State
from tests.support.lying_store import LyingStore

KEY = "arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid|req-1"
URL_A, URL_B = "digest-of-url-a", "digest-of-url-b"
LEASE = 60.0
TTL = 1000.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def answered(store, owner="w1", status="SUCCESS", body=b'{"Status":"SUCCESS"}', digest=URL_A):
    """Drive KEY through claim -> save_response, as a worker does."""
    claim = await store.claim(KEY, owner, digest, LEASE, token=owner)
    assert claim.acquired
    assert await store.save_response(KEY, owner, status, body)


# --- claim ------------------------------------------------------------------------------


async def test_claim_on_absent_key_is_acquired(store, clock):
    claim = await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert claim.acquired and claim.record is None
    record = await store.get(KEY)
    assert record.state == CLAIMED and record.owner == "w1" and record.url_digest == URL_A
    assert record.lease_until == pytest.approx(clock.now + LEASE)


async def test_second_claim_by_another_owner_is_refused_and_shows_the_holder(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    clock.advance(LEASE / 2)
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert not claim.acquired
    assert claim.record.state == CLAIMED and claim.record.owner == "w1"
    assert (await store.get(KEY)).owner == "w1"


async def test_claims_on_different_keys_are_independent(store):
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
    assert (await store.claim(KEY + "-other", "w2", URL_A, LEASE, token="w2")).acquired


async def test_lapsed_lease_is_taken_over_and_shows_the_old_owner(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    clock.advance(LEASE + 1)
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert claim.acquired
    assert claim.record.owner == "w1" and claim.record.state == CLAIMED
    assert (await store.get(KEY)).owner == "w2"


async def test_extend_keeps_a_lease_alive(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    for _ in range(5):
        clock.advance(LEASE * 0.75)
        assert await store.extend(KEY, "w1", LEASE)
    assert not (await store.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired


async def test_extend_by_another_owner_does_nothing(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert not await store.extend(KEY, "w2", LEASE * 100)
    clock.advance(LEASE + 1)
    assert (await store.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired


async def test_extend_after_losing_the_claim_fails(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    clock.advance(LEASE + 1)
    await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert not await store.extend(KEY, "w1", LEASE)


async def test_a_stored_answer_stays_leased_to_its_owner_until_sent(store, clock):
    """While its owner delivers a stored answer, the lease keeps duplicates from re-sending it."""
    await answered(store)
    record = await store.get(KEY)
    assert record.owner == "w1" and record.lease_until > clock.now
    assert await store.extend(KEY, "w1", LEASE)  # the heartbeat keeps it during long PUT retries
    assert not await store.extend(KEY, "w2", LEASE)  # nobody else can
    assert await store.extend(KEY, "w1", 0)  # delivery failed: let a redelivery try at once
    assert (await store.get(KEY)).lease_until <= clock.now
    await store.mark_sent(KEY, URL_A, token="w1")
    assert not await store.extend(KEY, "w1", LEASE)  # sent: nothing left to hold


# --- save_response ----------------------------------------------------------------------


async def test_save_response_by_the_owner_stores_the_exact_body(store):
    body = '{"Status":"SUCCESS","Data":{"k":"ü"}}'.encode()
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert await store.save_response(KEY, "w1", "SUCCESS", body)
    record = await store.get(KEY)
    assert record.state == RESPONSE_READY and record.status == "SUCCESS" and record.body == body


async def test_save_response_by_another_owner_is_refused(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert not await store.save_response(KEY, "w2", "SUCCESS", b"x")
    assert (await store.get(KEY)).state == CLAIMED


async def test_save_response_after_the_claim_was_taken_over_is_refused(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    clock.advance(LEASE + 1)
    await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert not await store.save_response(KEY, "w1", "SUCCESS", b"stale")
    assert await store.save_response(KEY, "w2", "SUCCESS", b"fresh")
    assert (await store.get(KEY)).body == b"fresh"


async def test_save_response_without_a_claim_is_refused(store):
    assert not await store.save_response(KEY, "w1", "SUCCESS", b"x")
    assert await store.get(KEY) is None


async def test_save_response_happens_once(store):
    await answered(store, body=b"first")
    assert not await store.save_response(KEY, "w1", "FAILED", b"second")
    assert (await store.get(KEY)).body == b"first"


# --- redelivery after an answer ---------------------------------------------------------


@pytest.mark.parametrize("status", ["SUCCESS", "FAILED"])
async def test_stored_answer_for_the_same_url_is_resent_never_rerun(store, clock, status):
    await answered(store, status=status, body=b"the-body")
    clock.advance(LEASE * 10)  # no lease left to lapse
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert not claim.acquired
    assert claim.record.state == RESPONSE_READY
    assert claim.record.status == status and claim.record.body == b"the-body"


async def test_mark_sent_records_the_delivery(store):
    await answered(store)
    await store.mark_sent(KEY, URL_A, token="w1")
    record = await store.get(KEY)
    assert record.state == SENT and record.url_digest == URL_A and record.body == b'{"Status":"SUCCESS"}'


async def test_mark_sent_does_not_touch_a_claim_in_progress(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    await store.mark_sent(KEY, URL_A, token="w1")
    assert (await store.get(KEY)).state == CLAIMED


async def test_sent_with_the_same_url_is_not_acquired_and_reports_sent(store, clock):
    await answered(store)
    await store.mark_sent(KEY, URL_A, token="w1")
    clock.advance(LEASE * 10)
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert not claim.acquired and claim.record.state == SENT and claim.record.url_digest == URL_A


@pytest.mark.parametrize("ended", ["sent", "lease-ended", "lease-lapsed"])
async def test_stored_failed_with_a_different_url_is_reclaimed_to_rerun(store, clock, ended):
    await answered(store, status="FAILED", body=b"failed-body")
    if ended == "sent":
        await store.mark_sent(KEY, URL_A, token="w1")
    elif ended == "lease-ended":
        assert await store.extend(KEY, "w1", 0)  # delivery failed: the owner lets go
    else:
        clock.advance(LEASE + 1)  # the owner died while delivering
    claim = await store.claim(KEY, "w2", URL_B, LEASE, token="w2")
    assert claim.acquired
    assert claim.record.status == "FAILED"
    record = await store.get(KEY)
    assert record.state == CLAIMED and record.owner == "w2" and record.url_digest == URL_B
    assert record.body is None and record.status is None  # the old answer is not re-sent by mistake


async def test_stored_failed_is_not_rerun_while_its_owner_still_holds_the_lease(store, clock):
    """The owner is still delivering the FAILED to A: a retry for URL B waits for that lease."""
    await answered(store, status="FAILED", body=b"failed-body")
    clock.advance(LEASE / 2)
    claim = await store.claim(KEY, "w2", URL_B, LEASE, token="w2")
    assert not claim.acquired
    assert claim.record.state == RESPONSE_READY and claim.record.leased(clock.now)
    assert claim.record.lease_until == pytest.approx(clock.now + LEASE / 2)  # how long to wait
    await store.mark_sent(KEY, URL_A, token="w1")
    assert (await store.claim(KEY, "w2", URL_B, LEASE, token="w2")).acquired


@pytest.mark.parametrize("sent", [False, True], ids=["ready", "sent"])
async def test_stored_success_with_a_different_url_is_returned_for_resending(store, sent):
    await answered(store, status="SUCCESS", body=b"success-body")
    if sent:
        await store.mark_sent(KEY, URL_A, token="w1")
    claim = await store.claim(KEY, "w2", URL_B, LEASE, token="w2")
    assert not claim.acquired
    assert claim.record.status == "SUCCESS" and claim.record.body == b"success-body"
    assert claim.record.url_digest == URL_A  # the caller sees it has not gone to URL_B yet


async def test_late_redelivery_for_an_already_answered_url_is_not_rerun(store):
    """FAILED sent to A, re-run for B: the old message for A coming back must not run the handler again."""
    await answered(store, status="FAILED", body=b"first-failure")
    await store.mark_sent(KEY, URL_A, token="w1")
    assert (await store.claim(KEY, "w2", URL_B, LEASE, token="w2")).acquired
    assert await store.save_response(KEY, "w2", "FAILED", b"second-failure")
    await store.mark_sent(KEY, URL_B, token="w2")
    late = await store.claim(KEY, "w3", URL_A, LEASE, token="w3")
    assert not late.acquired and late.record.status == "FAILED"
    assert (await store.claim(KEY, "w3", "digest-of-url-c", LEASE, token="w3")).acquired  # a new retry still re-runs


async def test_resent_success_can_be_marked_sent_to_the_new_url(store):
    await answered(store, status="SUCCESS")
    await store.mark_sent(KEY, URL_A, token="w1")
    await store.claim(KEY, "w2", URL_B, LEASE, token="w2")
    await store.mark_sent(KEY, URL_B)
    claim = await store.claim(KEY, "w3", URL_B, LEASE, token="w3")
    assert not claim.acquired and claim.record.state == SENT and claim.record.url_digest == URL_B


# --- release ----------------------------------------------------------------------------


async def test_release_frees_your_own_claim(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    await store.release(KEY, "w1")
    assert await store.get(KEY) is None
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert claim.acquired and claim.record is None


async def test_release_by_another_owner_does_nothing(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    await store.release(KEY, "w2")
    assert (await store.get(KEY)).owner == "w1"
    assert not (await store.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired


async def test_release_never_drops_a_stored_answer(store):
    await answered(store)
    await store.release(KEY, "w1")
    assert (await store.get(KEY)).state == RESPONSE_READY
    await store.mark_sent(KEY, URL_A, token="w1")
    await store.release(KEY, "w1")
    assert (await store.get(KEY)).state == SENT


# --- expiry -----------------------------------------------------------------------------


async def test_record_lives_until_its_ttl(store, clock):
    await answered(store)
    await store.mark_sent(KEY, URL_A, token="w1")
    clock.advance(TTL - 1)
    assert not (await store.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired


@pytest.mark.parametrize("state", ["claimed", "ready", "sent"])
async def test_expired_record_is_as_if_absent(store, clock, state):
    await store.claim(KEY, "w1", URL_A, TTL * 10, token="w1")  # even a lease that has not lapsed
    if state != "claimed":
        assert await store.save_response(KEY, "w1", "SUCCESS", b"old")
    if state == "sent":
        await store.mark_sent(KEY, URL_A, token="w1")
    clock.advance(TTL + 1)
    claim = await store.claim(KEY, "w2", URL_A, LEASE, token="w2")
    assert claim.acquired and claim.record is None
    record = await store.get(KEY)
    assert record.owner == "w2" and record.body is None


# --- more than one store on the same data -----------------------------------------------


async def test_data_survives_closing_and_reopening(make_store):
    first = make_store()
    await first.claim(KEY, "w1", URL_A, LEASE, token="w1")
    await first.save_response(KEY, "w1", "SUCCESS", b"durable")
    await first.close()

    second = make_store()
    try:
        record = await second.get(KEY)
        assert record.state == RESPONSE_READY and record.body == b"durable"
        assert not (await second.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired
    finally:
        await second.close()


async def test_concurrent_claims_from_two_stores_on_one_file_acquire_exactly_once(make_store):
    """Two stores on one file (SQLite) or one table (DynamoDB), racing for the same keys."""
    one = make_store()
    two = make_store()
    try:
        keys = [f"stack|req-{i}" for i in range(40)]
        claims = await asyncio.gather(
            *(s.claim(k, owner, URL_A, LEASE, token=owner) for k in keys for s, owner in ((one, "w1"), (two, "w2")))
        )
        for i, k in enumerate(keys):
            a, b = claims[2 * i], claims[2 * i + 1]
            assert a.acquired != b.acquired, k
            winner = "w1" if a.acquired else "w2"
            loser = b if a.acquired else a
            assert loser.record.owner == winner
            assert (await one.get(k)).owner == winner
    finally:
        await one.close()
        await two.close()


def test_concurrent_claims_from_threads_acquire_exactly_once(make_store):
    """Many workers, each its own store and event loop, race for one key."""
    results: list[tuple[str, bool]] = []
    barrier = threading.Barrier(6)

    def worker(owner: str) -> None:
        async def run() -> None:
            s = make_store()
            try:
                barrier.wait(timeout=30)
                claim = await s.claim(KEY, owner, URL_A, LEASE, token=owner)
                results.append((owner, claim.acquired))
            finally:
                await s.close()

        asyncio.run(run())

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 6
    assert sum(acquired for _, acquired in results) == 1


# --- every write safe to retry: the network lies ------------------------------------------
#
# botocore retries a call whose answer was lost with identical parameters, and the worker
# retries a store call that failed with a connection error: a write applied on the first try
# and repeated must read as this attempt's success, never as another worker's claim.

BODY = b'{"Status":"SUCCESS","Data":{"k":"v"}}'


async def retried(call):
    """What the worker does: the same call (same token) again after a transient error."""
    from cfn_provider.stores.base import transient

    for _ in range(5):
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - re-raised unless transient
            if not transient(exc):
                raise
    raise AssertionError("still failing after 5 tries")


class Rival:
    """A second worker on the same data (its own store object), trying to take the request."""

    def __init__(self, store, clock):
        self.store, self.clock, self.claims = store, clock, []

    async def tries(self, digest=URL_A, expect_acquired=False):
        if self.store is None:
            return None
        claim = await self.store.claim(KEY, "rival", digest, LEASE, token=f"rival-{len(self.claims)}")
        self.claims.append(claim)
        assert claim.acquired == expect_acquired, claim
        return claim


@pytest.fixture(params=["alone", "rival"])
async def rival(request, make_store, clock):
    other = make_store() if request.param == "rival" else None
    yield Rival(other, clock)
    if other is not None:
        await other.close()


LIES = [
    pytest.param(set(), id="no-lie"),
    *(pytest.param({n}, id=f"lie-at-write-{n}") for n in range(1, 5)),
    pytest.param(set(range(1, 20, 2)), id="every-write-lies-once"),
]  # each write's first try; its retry gets through


@pytest.mark.parametrize("lie_at", LIES)
async def test_a_lost_answer_at_any_write_of_a_request_is_recognised_as_this_attempts_own(store, clock, rival, lie_at):
    """claim -> extend -> save_response -> mark_sent, each answer possibly lost after it was applied."""
    w1 = LyingStore(store, lie_at)
    token = "attempt-1"
    claim = await retried(lambda: w1.claim(KEY, "w1", URL_A, LEASE, token=token))
    assert claim.acquired, "the retried claim met its own first try and took it for another worker's"
    blocked = await rival.tries()
    if blocked is not None:
        assert blocked.record.owner == "w1" and blocked.record.leased(clock.now)
    clock.advance(LEASE / 2)
    assert await retried(lambda: w1.extend(KEY, token, LEASE))
    await rival.tries()
    assert await retried(lambda: w1.save_response(KEY, token, "SUCCESS", BODY)), (
        "a retried save_response met its own stored answer and called it a lost claim"
    )
    blocked = await rival.tries()
    if blocked is not None:  # the stored answer is still being delivered: the rival must wait
        assert blocked.record.state == RESPONSE_READY and blocked.record.leased(clock.now)
    await retried(lambda: w1.mark_sent(KEY, URL_A, token))
    record = await store.get(KEY)
    assert record.state == SENT and record.body == BODY and record.answered(URL_A) and record.token == token
    late = await rival.tries()
    if late is not None:
        assert late.record.answered(URL_A)
    assert w1.lies == len(lie_at & set(range(1, w1.writes + 1)))


@pytest.mark.parametrize("lie_at", LIES[:4])
async def test_a_lost_answer_on_a_takeover_claim_is_recognised(store, make_store, clock, rival, lie_at):
    dead = make_store()
    try:
        assert (await dead.claim(KEY, "dead", URL_A, LEASE, token="dead-attempt")).acquired
    finally:
        await dead.close()
    clock.advance(LEASE + 1)  # its owner was SIGKILLed: the lease lapses
    w1 = LyingStore(store, lie_at)
    claim = await retried(lambda: w1.claim(KEY, "w1", URL_A, LEASE, token="attempt-1"))
    assert claim.acquired
    await rival.tries()
    assert await retried(lambda: w1.save_response(KEY, "attempt-1", "FAILED", b"failed"))
    assert (await store.get(KEY)).token == "attempt-1"


@pytest.mark.parametrize("lie_at", LIES[:3] + LIES[-1:])
async def test_a_lost_answer_on_release_still_releases_and_keeps_answered_urls(store, clock, rival, lie_at):
    """A FAILED answered to A, re-run for B, released at shutdown: every write may lie."""
    await answered(store, owner="w0", status="FAILED", body=b"failed-a")
    await store.mark_sent(KEY, URL_A, token="w0")
    w1 = LyingStore(store, lie_at)
    claim = await retried(lambda: w1.claim(KEY, "w1", URL_B, LEASE, token="attempt-1"))
    assert claim.acquired
    await retried(lambda: w1.release(KEY, "attempt-1"))
    record = await store.get(KEY)
    assert record is not None and record.answered(URL_A), "release erased the record of an answered URL"
    assert not record.leased(clock.now)
    if rival.store is not None:
        late = await rival.tries(URL_A)  # the old message for A: answered there, never re-run
        assert late.record.answered(URL_A)
        await rival.tries(URL_B, expect_acquired=True)  # B is free again at once


@pytest.mark.parametrize("lie_at", LIES[:3])
async def test_a_lost_answer_on_release_of_a_fresh_claim_frees_it(store, rival, lie_at):
    w1 = LyingStore(store, lie_at)
    assert (await retried(lambda: w1.claim(KEY, "w1", URL_A, LEASE, token="attempt-1"))).acquired
    await retried(lambda: w1.release(KEY, "attempt-1"))
    assert await store.get(KEY) is None
    claim = await rival.tries(expect_acquired=True)
    if claim is not None:
        assert claim.record is None


@pytest.mark.parametrize("lie_at", LIES[:3])
async def test_a_lost_answer_on_a_replays_mark_sent_records_both_urls(store, clock, rival, lie_at):
    """A stored SUCCESS re-sent to a new URL by a worker that holds no claim (no token)."""
    await answered(store, owner="w0")
    await store.mark_sent(KEY, URL_A, token="w0")
    w1 = LyingStore(store, lie_at)
    claim = await retried(lambda: w1.claim(KEY, "w1", URL_B, LEASE, token="attempt-1"))
    assert not claim.acquired and claim.record.status == "SUCCESS"  # re-send it, never re-run
    await rival.tries(URL_B)
    await retried(lambda: w1.mark_sent(KEY, URL_B))
    record = await store.get(KEY)
    assert record.state == SENT and record.answered(URL_A) and record.answered(URL_B)


async def test_mark_sent_records_the_url_in_every_state(store, clock):
    """FAILED delivered to A, but a retry for B claimed it before A's mark_sent landed."""
    await answered(store, status="FAILED", body=b"failed-a")
    assert await store.extend(KEY, "w1", 0)
    assert (await store.claim(KEY, "w2", URL_B, LEASE, token="w2")).acquired
    await store.mark_sent(KEY, URL_A, token="w1")  # late
    record = await store.get(KEY)
    assert record.state == CLAIMED and record.owner == "w2" and record.answered(URL_A)
    clock.advance(LEASE + 1)  # w2 died: its lapsed claim is not taken over for the answered URL
    late = await store.claim(KEY, "w3", URL_A, LEASE, token="w3")
    assert not late.acquired and late.record.answered(URL_A)


async def test_a_replays_mark_sent_leaves_the_owners_delivery_lease_alone(store, clock):
    await answered(store)  # w1 still delivering to A, under its lease
    await store.mark_sent(KEY, URL_B)  # another worker re-sent the SUCCESS to B
    record = await store.get(KEY)
    assert record.state == RESPONSE_READY and record.leased(clock.now) and record.answered(URL_B)
    await store.mark_sent(KEY, URL_A, token="w1")
    record = await store.get(KEY)
    assert record.state == SENT and record.answered(URL_A) and record.answered(URL_B)


async def test_save_response_with_another_body_under_the_same_token_is_refused(store):
    await answered(store, body=b"first")
    assert await store.save_response(KEY, "w1", "SUCCESS", b"first")  # a retry: the same body
    assert not await store.save_response(KEY, "w1", "SUCCESS", b"other")
    assert (await store.get(KEY)).body == b"first"


async def test_a_second_attempt_by_the_same_daemon_is_not_its_first(store):
    """Two copies of one request in one daemon: same owner, different attempts (tokens)."""
    assert (await store.claim(KEY, "daemon-1", URL_A, LEASE, token="copy-1")).acquired
    second = await store.claim(KEY, "daemon-1", URL_A, LEASE, token="copy-2")
    assert not second.acquired and second.record.token == "copy-1"
    assert not await store.save_response(KEY, "copy-2", "SUCCESS", b"x")


# --- the stored request, and listing (`cfn-provider requests`) ---------------------------
# `listing` is the store an operator lists with: the same store (SQLite), or one that can Scan
# (DynamoDB, cfn_provider.stores.dynamodb_admin) on the same table.
REQUEST = '{"RequestType":"Create","ResponseURL":"https://example.invalid/r?X-Amz-Signature=s","LogicalResourceId":"A"}'


async def test_a_claim_stores_its_request_and_a_claim_without_one_keeps_it(store, clock):
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1", request=REQUEST)).acquired
    assert (await store.get(KEY)).request == REQUEST
    clock.advance(LEASE + 1)
    assert (await store.claim(KEY, "w2", URL_A, LEASE, token="w2")).acquired  # an older daemon's claim
    record = await store.get(KEY)
    assert record.owner == "w2" and record.request == REQUEST


async def test_a_takeover_claim_stores_the_new_request(store, clock):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1", request=REQUEST)
    clock.advance(LEASE + 1)
    newer = REQUEST.replace("/r?", "/r2?")
    assert (await store.claim(KEY, "w2", URL_B, LEASE, token="w2", request=newer)).acquired
    assert (await store.get(KEY)).request == newer


async def test_a_refused_claim_leaves_the_stored_request_alone(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1", request=REQUEST)
    assert not (await store.claim(KEY, "w2", URL_A, LEASE, token="w2", request="{}")).acquired
    assert (await store.get(KEY)).request == REQUEST


async def test_a_claim_without_a_request_stores_none(store):
    await store.claim(KEY, "w1", URL_A, LEASE, token="w1")
    assert (await store.get(KEY)).request is None


async def test_list_records_lists_every_state_and_leaves_out_expired_ones(store, listing, clock):
    await store.claim("old", "w0", URL_A, LEASE, token="w0")
    clock.advance(TTL / 2)
    await answered(store)  # KEY: RESPONSE_READY
    await store.claim(KEY + "-sent", "w2", URL_A, LEASE, token="w2", request=REQUEST)
    assert await store.save_response(KEY + "-sent", "w2", "FAILED", b"{}")
    await store.mark_sent(KEY + "-sent", URL_A, token="w2")
    clock.advance(1)
    await store.claim(KEY + "-claimed", "w3", URL_A, LEASE, token="w3", request=REQUEST)
    records = {r.key: r for r in await listing.list_records()}
    assert {k: r.state for k, r in records.items()} == {
        "old": CLAIMED,
        KEY: RESPONSE_READY,
        KEY + "-sent": SENT,
        KEY + "-claimed": CLAIMED,
    }
    assert records[KEY + "-claimed"].request == REQUEST and records[KEY + "-claimed"].owner == "w3"
    assert [r.key for r in await listing.list_records()][0] == KEY + "-claimed"  # the newest claim first
    clock.advance(TTL / 2)  # "old" has expired: as if absent
    assert "old" not in {r.key for r in await listing.list_records()}


async def test_every_state_reads_back_as_the_state_enum_and_prints_as_its_plain_name(store, listing, clock):
    """Record.state is a State (a StrEnum) after every transition, read by get and by list_records:
    equal to, printed and serialised as the plain name earlier builds stored and compared."""

    async def state_now() -> State:
        record = await store.get(KEY)
        [listed] = [r for r in await listing.list_records() if r.key == KEY]
        assert type(record.state) is State and type(listed.state) is State and listed.state is record.state
        assert str(record.state) == f"{record.state}" == record.state.value and json.dumps(record.state) == (
            f'"{record.state.value}"'
        )
        return record.state

    await store.claim(KEY, "w1", URL_A, LEASE, token="w1", request=REQUEST)
    assert await state_now() is CLAIMED and CLAIMED == "CLAIMED"
    assert await store.save_progress(KEY, "w1", "{}", clock.now + 60)
    assert await state_now() is POLLING and POLLING == "POLLING"
    assert (await store.take_poll(KEY, "w2", LEASE, token="w2", early=True)) is not None
    assert await store.save_response(KEY, "w2", "SUCCESS", b"{}")
    assert await state_now() is RESPONSE_READY and RESPONSE_READY == "RESPONSE_READY"
    await store.mark_sent(KEY, URL_A, token="w2")
    assert await state_now() is SENT and SENT == "SENT"


async def test_list_records_since_leaves_out_older_claims(store, listing, clock):
    await store.claim("older", "w1", URL_A, LEASE, token="w1")
    clock.advance(100)
    await store.claim("newer", "w2", URL_A, LEASE, token="w2")
    assert {r.key for r in await listing.list_records(since=clock.now - 50)} == {"newer"}
    assert {r.key for r in await listing.list_records(since=clock.now - 150)} == {"older", "newer"}
    assert await listing.list_records(since=clock.now + 1) == []


# --- a stack's owner (principals: cfn_provider.trust.tenants) ------------------------------


async def test_the_first_principal_to_name_a_stack_owns_it_for_good(store, clock, make_store):
    stack = "arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid"
    assert await store.own_stack(stack, "team-a") == "team-a"
    assert await store.own_stack(stack, "team-a") == "team-a"  # a retry of an applied write: still ours
    assert await store.own_stack(stack, "team-b") == "team-a"  # refused: the owner is said
    other = make_store()
    try:
        clock.advance(TTL * 10)  # owners outlive every record
        assert await other.own_stack(stack, "default") == "team-a"  # the same table or file
        assert await other.own_stack(stack + "-2", "team-b") == "team-b"
    finally:
        await other.close()
    assert await store.get(KEY) is None  # an owner is not a request's record


async def test_owners_race_one_wins(store):
    stack = "stack-raced"
    owners = await asyncio.gather(*(store.own_stack(stack, f"p{i}") for i in range(8)))
    assert len(set(owners)) == 1 and owners[0] in {f"p{i}" for i in range(8)}


async def test_an_owner_is_never_listed_as_a_record(store, listing, clock):
    await store.own_stack("stack-listed", "team-a")
    await answered(store)
    assert [r.key for r in await listing.list_records()] == [KEY]

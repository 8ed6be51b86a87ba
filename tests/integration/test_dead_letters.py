"""No request ends in the dead-letter queue unanswered (cfn_provider.intake.dead_letters), on a real moto queue
with a real RedrivePolicy: a request whose receives ran out gets exactly one FAILED at its
presigned URL, however many daemons watch; a message that fails admission (unsigned, forged,
foreign topic, foreign ResponseURL, raw) or is not a request is never answered and stays there;
an answered one gets nothing more."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Emulator, Provider, Stack
from cfn_provider.pipeline.response import TIMED_OUT_PREFIX
from tests.support import handlers
from tests.support.aws import exhaust, queue_counts, wait_for_event
from tests.support.daemons import in_process_daemons, settings_for
from tests.support.sns_signing import CertServer, Signer
from tests.support.stub_s3 import StubS3


@pytest.fixture
def certs():
    with CertServer() as server:
        yield server


@pytest.fixture
def dl_provider(emulator: Emulator) -> Provider:
    return Provider.create(emulator, dlq=True, max_receive_count=1)


@pytest.fixture
async def start(dl_provider: Provider, tmp_path: Path, certs: CertServer, stub_s3: StubS3):
    """Start verifying daemons (signatures on, the provider's topic only, ResponseURLs only at
    stub_s3) sharing one state file, watching the dead-letter queue twice a second."""
    async with in_process_daemons() as start_daemon:

        async def go(**overrides: Any):
            base = dict(
                verify_signatures=True,
                trust_signing_cert_urls=(certs.base_url,),
                allow_response_urls=(stub_s3.base_url,),
                dead_letter_interval=0.5,
            )
            return await start_daemon(settings_for(dl_provider, tmp_path, **{**base, **overrides}))

        yield go


@pytest.fixture
def signer(dl_provider: Provider, certs: CertServer) -> Signer:
    return Signer(dl_provider, certs)


def request_at(stack: Stack, s3: StubS3, kind: str, logical_id: str, **kwargs: Any) -> dict[str, Any]:
    """A request whose ResponseURL is on `s3` (which counts every PUT)."""
    req = stack.request(kind, logical_id, resource_type="Custom::Test", **kwargs)
    req["ResponseURL"] = s3.url(f"{stack.name}/{logical_id}")
    return req


def key_of(req: dict[str, Any]) -> str:
    return req["ResponseURL"].split("/", 3)[3].split("?")[0]


def in_dlq(provider: Provider) -> int:
    visible, hidden = queue_counts(provider.emulator.client("sqs"), provider.dlq_url)
    return visible + hidden


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_dead_lettered_requests_get_exactly_one_failed_with_two_watchers(
    start, dl_provider: Provider, stack: Stack, stub_s3: StubS3, signer: Signer
) -> None:
    stack = Stack(dl_provider)
    requests = [
        request_at(stack, stub_s3, "Create", "Made"),
        request_at(stack, stub_s3, "Update", "Changed", physical_id="thing-7", old_properties={}),
        request_at(stack, stub_s3, "Delete", "Gone", physical_id="thing-8"),
    ]
    # each twice (SNS delivers at least once): copies of one request reach both watchers at once
    exhaust(dl_provider, [signer.body(r) for r in requests for _ in range(2)])
    with capture_logs() as logs:
        await start()
        await start()  # two fleet members watch the same dead-letter queue; the store decides who answers
        for req in requests:
            assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(req), 1, 30), req["LogicalResourceId"]
        await until(lambda: in_dlq(dl_provider) == 0, 15, "the answered messages to leave the dead-letter queue")
        await asyncio.sleep(2)  # a few more passes of both watchers
    dlq_name = f"{dl_provider.name}-dlq"
    for req in requests:
        assert stub_s3.put_count(key_of(req)) == 1, req["LogicalResourceId"]
        doc = json.loads(stub_s3.bodies(key_of(req))[0])
        assert doc["Status"] == "FAILED"
        assert dlq_name in doc["Reason"] and "deadletter.answered" in doc["Reason"]
        assert doc["RequestId"] == req["RequestId"]
    made, changed, gone = (json.loads(stub_s3.bodies(key_of(r))[0]) for r in requests)
    assert made["PhysicalResourceId"].startswith(TIMED_OUT_PREFIX)  # its rollback Delete reaches delete
    assert (changed["PhysicalResourceId"], gone["PhysicalResourceId"]) == ("thing-7", "thing-8")
    assert handlers.started == []  # answered from the dead-letter queue, never run
    outcomes = sorted(
        e["outcome"] for e in logs if e["event"] == "request" and e.get("outcome") != "in-progress-elsewhere"
    )
    assert outcomes == ["answered"] * 3 + ["duplicate"] * 3  # the second copy of each: the store says answered
    answered = [e for e in logs if e["event"] == "deadletter.answered"]
    assert len(answered) == 3 and all(
        e["log_level"] == "error" and e["dead_letter_queue"] == dlq_name for e in answered
    )


async def test_messages_that_fail_admission_are_never_answered_and_stay(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer
) -> None:
    stack = Stack(dl_provider)
    with StubS3() as outsider:  # a ResponseURL host outside the allowlist
        good = request_at(stack, stub_s3, "Create", "Good")
        unsigned = request_at(stack, stub_s3, "Create", "Unsigned")
        forged = request_at(stack, stub_s3, "Create", "Forged")
        foreign_topic = request_at(stack, stub_s3, "Create", "ForeignTopic")
        raw = request_at(stack, stub_s3, "Create", "Raw")
        foreign_url = stack.request("Create", "ForeignUrl", resource_type="Custom::Test")
        foreign_url["ResponseURL"] = outsider.url("foreign")
        tampered = signer.envelope(forged)
        tampered["Message"] = tampered["Message"].replace("Custom::Test", "Custom::Echo")
        bodies = [
            signer.body(good),
            signer.body(unsigned, sign=False),
            json.dumps(tampered),
            signer.body(foreign_topic, topic_arn=dl_provider.topic_arn + "-other"),
            json.dumps(raw),
            signer.body(foreign_url),
            "definitely not json",
            signer.body("not a request"),
        ]
        exhaust(dl_provider, bodies)
        with capture_logs() as logs:
            await start()
            assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(good), 1, 30)
            await until(lambda: any(e["event"] == "deadletter.sweep" for e in logs), 30, "a pass to end")
            await asyncio.sleep(1.5)  # more passes: the ones left are hidden a while, not looked at again at once
        sweeps = [e for e in logs if e["event"] == "deadletter.sweep"]
        assert [(e.get("deleted"), e.get("left")) for e in sweeps] == [(1, len(bodies) - 1)]
        for req in (unsigned, forged, foreign_topic, raw):
            assert stub_s3.put_count(key_of(req)) == 0, req["LogicalResourceId"]
        assert outsider.requests == []
    assert in_dlq(dl_provider) == len(bodies) - 1  # all but the answered one are left for the operator
    assert [e["event"] for e in logs if e["event"] in ("security", "rejected")].count("security") >= 5
    assert handlers.started == []


async def test_an_already_answered_request_gets_nothing_more(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer
) -> None:
    stack = Stack(dl_provider)
    req = request_at(stack, stub_s3, "Create", "Done")
    await start()
    body = signer.body(req)
    sqs = dl_provider.emulator.client("sqs")
    sqs.send_message(QueueUrl=dl_provider.queue_url, MessageBody=body)
    assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(req), 1, 30)
    assert json.loads(stub_s3.bodies(key_of(req))[0])["Status"] == "SUCCESS"
    sqs.send_message(QueueUrl=dl_provider.dlq_url, MessageBody=body)  # a duplicate that ran out of receives
    await until(lambda: in_dlq(dl_provider) == 0, 15, "the duplicate to be deleted from the dead-letter queue")
    await asyncio.sleep(1)
    assert stub_s3.put_count(key_of(req)) == 1
    assert handlers.count(req["RequestId"]) == 1


async def test_watching_can_be_turned_off(start, dl_provider: Provider, stub_s3: StubS3, signer: Signer) -> None:
    stack = Stack(dl_provider)
    req = request_at(stack, stub_s3, "Create", "Waiting")
    exhaust(dl_provider, [signer.body(req)])
    with capture_logs() as logs:
        await start(dead_letter_interval=0)
        await wait_for_event(logs, "deadletter.off")
        await asyncio.sleep(2)
    assert stub_s3.put_count(key_of(req)) == 0 and in_dlq(dl_provider) == 1


async def test_a_request_another_worker_holds_waits_for_its_lease_then_is_answered(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer, tmp_path: Path
) -> None:
    # a member claimed the request and was SIGKILLed (its lease runs 3 s more); the message then ran out of receives
    from cfn_provider.pipeline.request import idempotency_key
    from cfn_provider.stores.sqlite import SQLiteStore

    stack = Stack(dl_provider)
    req = request_at(stack, stub_s3, "Create", "Orphaned")
    store = SQLiteStore(tmp_path / "state.db")
    try:
        claim = await store.claim(
            idempotency_key(req["StackId"], req["RequestId"]), "dead-member", "digest", 3, token="dead-member-attempt"
        )
        assert claim.acquired
        held_until = time.monotonic() + 3
        exhaust(dl_provider, [signer.body(req)])
        await start()
        assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(req), 1, 30)
        # deferred from pass to pass (the watcher never waits in the daemon) until the lease ran out, then answered
        assert time.monotonic() >= held_until - 0.5  # not before the lease ran out
        doc = json.loads(stub_s3.bodies(key_of(req))[0])
        assert doc["Status"] == "FAILED" and doc["PhysicalResourceId"].startswith(TIMED_OUT_PREFIX)
        await until(lambda: in_dlq(dl_provider) == 0, 15, "the answered message to leave the dead-letter queue")
        assert stub_s3.put_count(key_of(req)) == 1
    finally:
        await store.close()


async def held_by_a_live_claim(tmp_path: Path, req: dict[str, Any], seconds: float) -> None:
    """A member claimed `req` and holds it (its lease runs `seconds` more): a handler still running."""
    from cfn_provider.pipeline.request import idempotency_key
    from cfn_provider.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "state.db")
    try:
        assert (
            await store.claim(
                idempotency_key(req["StackId"], req["RequestId"]),
                "busy-member",
                "digest",
                seconds,
                token="busy-member-attempt",
            )
        ).acquired
    finally:
        await store.close()


async def test_a_held_request_does_not_stall_the_pass(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer, tmp_path: Path
) -> None:
    """A request another member holds for an hour is put off to a later pass (hidden meanwhile):
    the pass ends and answers the others, it never waits in the daemon for that lease."""
    stack = Stack(dl_provider)
    held, good = request_at(stack, stub_s3, "Create", "Held"), request_at(stack, stub_s3, "Create", "Good")
    await held_by_a_live_claim(tmp_path, held, 3600)
    exhaust(dl_provider, [signer.body(held), signer.body(good)])
    with capture_logs() as logs:
        await start()
        assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(good), 1, 30)
        await until(lambda: any(e["event"] == "deadletter.sweep" for e in logs), 15, "the pass to end")
    sweep = next(e for e in logs if e["event"] == "deadletter.sweep")
    assert (sweep.get("deleted"), sweep.get("deferred")) == (1, 1), sweep
    assert stub_s3.put_count(key_of(held)) == 0 and in_dlq(dl_provider) == 1


async def test_a_slow_message_does_not_stall_the_pass(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer, monkeypatch
) -> None:
    """A pass waits a bounded time for any one message (here a PUT its endpoint holds for 20 s):
    the others are answered and the pass ends; the slow one is finished in the background."""
    from cfn_provider.intake import dead_letters as watcher

    monkeypatch.setattr(watcher, "MESSAGE_SECONDS", 1.0)
    stack = Stack(dl_provider)
    slow, good = request_at(stack, stub_s3, "Create", "Slow"), request_at(stack, stub_s3, "Create", "Quick")
    stub_s3.stall(20, times=1, key=key_of(slow))
    exhaust(dl_provider, [signer.body(slow), signer.body(good)])
    with capture_logs() as logs:
        await start()
        await until(lambda: any(e["event"] == "deadletter.sweep" for e in logs), 10, "the pass to end")
        sweep = next(e for e in logs if e["event"] == "deadletter.sweep")
        assert (sweep.get("deleted"), sweep.get("still-running")) == (1, 1), sweep
        assert stub_s3.put_count(key_of(good)) == 1
        assert await asyncio.to_thread(stub_s3.wait_for_put, key_of(slow), 1, 60)  # finished after all
        await until(lambda: in_dlq(dl_provider) == 0, 30, "both messages to leave the dead-letter queue")


async def test_each_dead_letter_is_logged_as_arrived_once_however_often_it_is_looked_at(
    start, dl_provider: Provider, stub_s3: StubS3, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's dead-letter alarm counts arrivals (`deadletter.arrived`), not what is there:
    a message left for the operator is looked at on every pass, and must not keep it in ALARM."""
    from cfn_provider.intake import dead_letters as watcher

    monkeypatch.setattr(watcher, "LEAVE_SECONDS", 1)  # left messages come back on the next passes
    stack = Stack(dl_provider)
    unsigned = request_at(stack, stub_s3, "Create", "Unsigned")
    exhaust(dl_provider, [signer.body(unsigned, sign=False), "definitely not json"])
    with capture_logs() as logs:
        await start()
        await until(lambda: sum(e["event"] == "deadletter.sweep" for e in logs) >= 3, 30, "three passes")
    sweeps = [e for e in logs if e["event"] == "deadletter.sweep"]
    assert sum(e.get("left", 0) for e in sweeps) >= 6  # both messages looked at on three passes or more
    arrived = [e for e in logs if e["event"] == "deadletter.arrived"]
    assert len(arrived) == 2 and len({e["message_id"] for e in arrived}) == 2, arrived
    assert all(e["log_level"] == "warning" for e in arrived)

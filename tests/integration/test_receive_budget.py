"""SQS receives are a budget (the queue's maxReceiveCount): the daemon spends them knowingly.

Every test here runs on a queue whose redrive policy allows ONE receive per message
(maxReceiveCount 1): a message the daemon hands back and receives again lands in the dead-
letter queue at once, so an empty DLQ proves no receive was spent beyond the first.

- A copy of a request another attempt holds waits in process (its visibility kept extended)
  until that attempt lets go, instead of bouncing through the queue every few seconds.
- A store that cannot be reached holds its messages hidden and backs off; the outage is logged
  once when it starts and once when it ends, not once per message or per retry.

Real in-process daemons on a real moto SNS -> SQS (with DLQ) -> S3; the unreachable store is a
DynamoDB table behind tests.support.tcp_proxy.TcpProxy, taken down and brought back.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlparse

import pytest
from structlog.testing import capture_logs

from cfn_provider.local.emulator import Emulator, Provider, Stack
from cfn_provider.ops.bootstrap import ensure_table
from tests.support import handlers
from tests.support.aws import queue_counts, response_of, wait_for_event, wait_until_queue_empty
from tests.support.lying_store import LyingStore
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic
from tests.support.tcp_proxy import TcpProxy

VISIBILITY = 3  # seconds: a message handed back would be received again within the test


@pytest.fixture
def provider(emulator: Emulator, request) -> Provider:
    return Provider.create(emulator, dlq=True, max_receive_count=getattr(request, "param", 1))


async def a_handler_runs(timeout: float = 10.0) -> int:
    """How many handlers run (tests.support.handlers), once one does or `timeout` seconds have passed."""
    for _ in range(int(timeout / 0.05)):
        if handlers.running["now"]:
            break
        await asyncio.sleep(0.05)
    return handlers.running["now"]


def dead_lettered(provider: Provider) -> int:
    return sum(queue_counts(provider.emulator.client("sqs"), provider.dlq_url))


async def test_a_copy_waits_for_the_attempt_that_holds_it_without_spending_receives(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    """The handler outlives the lease period several times over; the second copy must neither run
    it again nor come back through the queue (which, at maxReceiveCount 1, dead-letters it)."""
    daemon = await run_daemon(visibility_timeout=VISIBILITY, concurrency=4)
    request = stack.request(
        "Create", "Slow", resource_type="Custom::Test", properties={"SleepSeconds": str(VISIBILITY * 2.5)}
    )
    with capture_logs() as logs:
        stack.publish(request)
        stack.publish(request)  # at-least-once: a second copy while the first is in flight
        response = await response_of(stack, request, timeout=30)
        assert response is not None and response["Status"] == "SUCCESS"
        await wait_until_queue_empty(provider, timeout=30)
    await daemon.stop()
    assert handlers.calls == [(request["RequestId"], "Create")]
    assert dead_lettered(provider) == 0, "a copy was handed back to the queue and received again"
    outcomes = sorted(e["outcome"] for e in logs if e.get("event") == "request")
    assert outcomes == ["answered", "duplicate"], outcomes
    waited = [e for e in logs if e.get("event") == "request" and e["outcome"] == "duplicate"]
    assert waited[0].get("waited_for"), "the copy should have waited for the attempt holding it"


@pytest.fixture
def dynamodb_proxy(emulator: Emulator, monkeypatch):
    """A fleet table reached through a TCP proxy the test can take down (AWS_ENDPOINT_URL_DYNAMODB)."""
    make_dynamodb_writes_atomic()
    table = f"budget-{uuid.uuid4().hex[:10]}"
    ensure_table(emulator.client("dynamodb"), table)
    endpoint = urlparse(emulator.endpoint)
    with TcpProxy(endpoint.hostname, endpoint.port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        yield proxy, table


async def test_a_store_outage_holds_messages_hidden_and_is_logged_once(
    run_daemon, stack: Stack, provider: Provider, dynamodb_proxy
) -> None:
    proxy, table = dynamodb_proxy
    # up at start: a daemon says READY only once its store answers (tests/integration/test_store_probe.py)
    daemon = await run_daemon(visibility_timeout=VISIBILITY, concurrency=8, state=f"dynamodb://{table}")
    proxy.down()
    requests = [stack.request("Create", f"R{i}", resource_type="Custom::Test") for i in range(4)]
    with capture_logs() as logs:
        for request in requests:
            stack.publish(request)
        await wait_for_event(logs, "store.unreachable", timeout=30)
        await asyncio.sleep(VISIBILITY * 3)  # long enough for bounced messages to be received again
        assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, len(requests))
        proxy.up()
        for request in requests:
            response = await response_of(stack, request, timeout=60)
            assert response is not None and response["Status"] == "SUCCESS"
        await wait_until_queue_empty(provider, timeout=30)
    await daemon.stop()
    assert dead_lettered(provider) == 0, "a message was handed back during the outage and received again"
    events = [e.get("event") for e in logs]
    assert events.count("store.unreachable") == 1 and events.count("store.back") == 1, [
        e for e in events if e and e.startswith(("store", "heartbeat"))
    ]
    assert "heartbeat.failed" not in events and "message.crashed" not in events
    assert sorted(handlers.calls) == sorted((r["RequestId"], "Create") for r in requests)


async def test_store_writes_whose_answers_are_lost_are_retried_as_the_same_attempt(
    run_daemon, stack: Stack, provider: Provider, monkeypatch
) -> None:
    """Every store write the daemon makes is applied and its answer lost on the first try (then
    retried): no copy defers against its own claim, no save is taken for a lost claim."""
    import cfn_provider.service as service

    lying: list[LyingStore] = []

    def open_lying_store(*args, **kwargs):
        lying.append(LyingStore(real_open_store(*args, **kwargs), first_tries=True))
        return lying[-1]

    real_open_store = service.open_store
    monkeypatch.setattr(service, "open_store", open_lying_store)
    daemon = await run_daemon(visibility_timeout=VISIBILITY, concurrency=8)
    requests = [
        stack.request("Create", f"L{i}", resource_type="Custom::Test", properties={"SleepSeconds": str(0.2 * i)})
        for i in range(4)
    ]
    with capture_logs() as logs:
        for request in requests:
            stack.publish(request)
            stack.publish(request)
        for request in requests:
            response = await response_of(stack, request, timeout=30)
            assert response is not None and response["Status"] == "SUCCESS"
        await wait_until_queue_empty(provider, timeout=30)
    await daemon.stop()
    assert lying[0].lies >= 3 * len(requests)  # claim, save_response and mark_sent of each, at least
    assert sorted(handlers.calls) == sorted((r["RequestId"], "Create") for r in requests)
    outcomes = sorted(e["outcome"] for e in logs if e.get("event") == "request")
    assert outcomes == ["answered"] * len(requests) + ["duplicate"] * len(requests), outcomes
    assert not [e for e in logs if e.get("event") == "store.lost_claim"]
    assert dead_lettered(provider) == 0
    assert "store.unreachable" not in [e.get("event") for e in logs]  # a lost answer is a blip, not an outage


async def test_a_full_disk_while_storing_an_answer_is_waited_out_and_never_reruns_the_handler(
    run_daemon, stack: Stack, provider: Provider, monkeypatch
) -> None:
    """SQLite's SQLITE_FULL while the answer is stored is an outage like an unreachable store:
    retried with backoff (the message kept hidden), logged once (though the lease extensions beside
    it, which need no room, get through), and the answer stored and sent once there is room
    again; the handler that completed is never run again."""
    import cfn_provider.service as service

    stores: list = []

    def keep(*args, **kwargs):
        stores.append(real_open_store(*args, **kwargs))
        return stores[-1]

    real_open_store = service.open_store
    monkeypatch.setattr(service, "open_store", keep)
    daemon = await run_daemon(visibility_timeout=VISIBILITY, concurrency=2)
    store = stores[0]

    def limit(pages: int | None) -> None:  # the store thread's connection: no page past `pages` (the disk is full)
        def apply() -> None:
            size = store._db.execute("PRAGMA page_count").fetchone()[0]
            store._db.execute(f"PRAGMA max_page_count = {size if pages is None else pages}").fetchone()

        store._thread.call(apply)

    request = stack.request(
        "Create", "Big", resource_type="Custom::Test", properties={"DataSize": "3500", "SleepSeconds": "1"}
    )
    with capture_logs() as logs:
        stack.publish(request)
        assert await a_handler_runs(), "the handler never started"
        limit(None)  # claimed, the handler running: now the disk fills up
        await wait_for_event(logs, "store.unreachable", timeout=30)
        await asyncio.sleep(VISIBILITY * 2)  # the message stays hidden meanwhile
        assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 1)
        limit(1073741823)  # room again
        response = await response_of(stack, request, timeout=30)
        assert response is not None and response["Status"] == "SUCCESS" and len(response["Data"]["Blob"]) == 3500
        await wait_until_queue_empty(provider, timeout=30)
    await daemon.stop()
    assert handlers.calls == [(request["RequestId"], "Create")]
    assert dead_lettered(provider) == 0
    events = [e.get("event") for e in logs]
    assert events.count("store.unreachable") == 1 and events.count("store.back") == 1, events
    unreachable = next(e for e in logs if e.get("event") == "store.unreachable")
    assert "full" in unreachable["error"]


@pytest.mark.parametrize("provider", [2], indirect=True)  # the copy is received twice: waiter, then holder
async def test_a_waiting_copy_is_handed_back_at_once_when_its_daemon_stops(
    run_daemon, stack: Stack, provider: Provider
) -> None:
    """A deploy stops a daemon whose copy waits for another daemon's attempt: the stop does not
    wait out the grace period for it, and the copy is hidden for the lease's remaining time."""
    holder = await run_daemon(visibility_timeout=VISIBILITY, concurrency=1)
    request = stack.request("Create", "Held", resource_type="Custom::Test", properties={"SleepSeconds": "6"})
    stack.publish(request)
    assert await a_handler_runs() == 1, "the holder is not running the handler"
    waiter = await run_daemon(visibility_timeout=VISIBILITY, concurrency=1, grace_period=60)
    with capture_logs() as logs:
        stack.publish(request)  # the copy: only the second daemon has a free slot
        for _ in range(200):
            if queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 2):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # the waiter has claimed, been refused, and waits
        started = asyncio.get_running_loop().time()
        assert await waiter.stop() == 0
        stopped_in = asyncio.get_running_loop().time() - started
    assert stopped_in < 30, f"the stop waited {stopped_in:.1f} s for a copy that was only waiting"
    [event] = [e for e in logs if e.get("event") == "request"]
    assert event["outcome"] == "in-progress-elsewhere" and event.get("waited_for")
    response = await response_of(stack, request, timeout=30)
    assert response is not None and response["Status"] == "SUCCESS"
    await wait_until_queue_empty(provider, timeout=30)
    await holder.stop()
    assert handlers.calls == [(request["RequestId"], "Create")]

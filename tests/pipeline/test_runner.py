"""cfn_provider.pipeline.runner: calling a handler action with the event, an optional context, and a time limit."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
import structlog.testing

from cfn_provider.pipeline.request import Request, parse
from cfn_provider.pipeline.runner import Context, HandlerTimeout, call, deadline_for, handler_budget, response_margin

POOL_PREFIX = "handler-pool"


def make_request(kind: str = "Create") -> Request:
    doc = {
        "RequestType": kind,
        "ResponseURL": "https://bucket.s3.amazonaws.com/key",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/guid",
        "RequestId": "req-1",
        "LogicalResourceId": "Thing",
        "ResourceType": "Custom::Thing",
        "ResourceProperties": {"Colour": "blue"},
    }
    if kind != "Create":
        doc["PhysicalResourceId"] = "thing-1"
    return parse(json.dumps(doc))


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=POOL_PREFIX)
    yield pool
    pool.shutdown(wait=True)


@pytest.fixture(autouse=True)
def _clean_log_context():
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


def context_for(request: Request, budget: float = 30.0) -> Context:
    return Context(request, time.monotonic() + budget)


def handler_of(**actions: Any) -> SimpleNamespace:
    """A handler object; actions not given raise, so a wrong dispatch is visible."""

    def wrong(*_: Any) -> None:
        raise AssertionError("wrong action called")

    return SimpleNamespace(**{"create": wrong, "update": wrong, "delete": wrong, **actions})


# --- where actions run ------------------------------------------------------------------


async def test_sync_action_runs_in_the_executor_thread_with_the_callers_log_context(executor):
    seen: dict[str, Any] = {}

    def create(event):
        seen["thread"] = threading.current_thread().name
        seen["log_context"] = structlog.contextvars.get_contextvars()
        return "done"

    structlog.contextvars.bind_contextvars(request_id="req-1", stack="s")
    req = make_request()
    assert await call(handler_of(create=create), req, context_for(req), executor) == "done"
    assert seen["thread"].startswith(POOL_PREFIX)
    assert seen["thread"] != threading.current_thread().name
    assert seen["log_context"] == {"request_id": "req-1", "stack": "s"}


async def test_sync_action_does_not_leak_log_context_back_to_the_caller(executor):
    def create(event):
        structlog.contextvars.bind_contextvars(leaked="yes")

    req = make_request()
    await call(handler_of(create=create), req, context_for(req), executor)
    assert "leaked" not in structlog.contextvars.get_contextvars()


async def test_async_action_runs_on_the_loop(executor):
    seen: dict[str, Any] = {}

    async def create(event):
        seen["loop"] = asyncio.get_running_loop()
        seen["thread"] = threading.current_thread()
        seen["log_context"] = structlog.contextvars.get_contextvars()
        return {"Data": {"a": 1}}

    structlog.contextvars.bind_contextvars(request_id="req-1")
    req = make_request()
    assert await call(handler_of(create=create), req, context_for(req), executor) == {"Data": {"a": 1}}
    assert seen["loop"] is asyncio.get_running_loop()
    assert seen["thread"] is threading.current_thread()
    assert seen["log_context"] == {"request_id": "req-1"}


async def test_sync_action_returning_an_awaitable_is_awaited(executor):
    async def real():
        return "from-coroutine"

    def create(event):  # e.g. a plain decorator wrapping an async function
        return real()

    req = make_request()
    assert await call(handler_of(create=create), req, context_for(req), executor) == "from-coroutine"


@pytest.mark.parametrize("kind", ["Create", "Update", "Delete"])
async def test_the_action_named_by_the_request_type_is_called(executor, kind):
    action = kind.lower()
    req = make_request(kind)
    result = await call(handler_of(**{action: lambda event: action}), req, context_for(req), executor)
    assert result == action


# --- arguments --------------------------------------------------------------------------


async def test_one_argument_action_gets_the_read_only_event(executor):
    got = []
    req = make_request()
    await call(handler_of(create=lambda event: got.append(event)), req, context_for(req), executor)
    assert got == [req.wire]
    with pytest.raises(TypeError):
        got[0]["RequestType"] = "Delete"


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_two_argument_action_gets_event_and_context(executor, style):
    got = []

    def sync_create(event, context):
        got.append((event, context))

    async def async_create(event, context):
        got.append((event, context))

    req = make_request()
    ctx = context_for(req)
    await call(handler_of(create=sync_create if style == "sync" else async_create), req, ctx, executor)
    assert got == [(req.wire, ctx)]


async def test_methods_on_a_handler_object_work_with_and_without_context(executor):
    class Handler:
        def __init__(self):
            self.calls = []

        def create(self, event):
            self.calls.append(("create", event))

        async def update(self, event, context):
            self.calls.append(("update", context))

        def delete(self, event, *rest):
            self.calls.append(("delete", rest))

    h = Handler()
    for kind in ("Create", "Update", "Delete"):
        req = make_request(kind)
        await call(h, req, context_for(req), executor)
    assert h.calls[0] == ("create", make_request("Create").wire)
    assert isinstance(h.calls[1][1], Context)
    assert len(h.calls[2][1]) == 1 and isinstance(h.calls[2][1][0], Context)


async def test_context_carries_the_request_session_and_a_logger():
    session = object()
    req = make_request()
    ctx = Context(req, time.monotonic() + 10, session)
    assert ctx.request is req and ctx.session is session
    ctx.log.info("handler.log.works", colour="blue")  # a usable bound logger


# --- remaining time ---------------------------------------------------------------------


def test_remaining_counts_down_from_the_deadline():
    ctx = Context(make_request(), time.monotonic() + 100)
    assert 90 < ctx.remaining() <= 100
    assert 90_000 < ctx.get_remaining_time_in_millis() <= 100_000
    assert isinstance(ctx.get_remaining_time_in_millis(), int)


def test_remaining_is_never_negative():
    ctx = Context(make_request(), time.monotonic() - 5)
    assert ctx.remaining() == 0.0
    assert ctx.get_remaining_time_in_millis() == 0


async def test_handler_sees_its_remaining_time(executor):
    seen = []
    req = make_request()
    await call(
        handler_of(create=lambda event, context: seen.append(context.get_remaining_time_in_millis())),
        req,
        context_for(req, budget=50),
        executor,
    )
    assert 40_000 < seen[0] <= 50_000


# --- time limits ------------------------------------------------------------------------


async def test_async_action_over_budget_raises_handler_timeout(executor):
    cancelled = asyncio.Event()

    async def create(event):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    req = make_request()
    started = time.monotonic()
    with pytest.raises(HandlerTimeout, match=r"^timed out after 1 s$") as info:
        await call(handler_of(create=create), req, context_for(req, budget=1.2), executor)
    assert time.monotonic() - started < 10
    assert info.value.seconds == pytest.approx(1.2, abs=0.2)
    assert cancelled.is_set()  # the async handler is cancelled, not left running


async def test_sync_action_over_budget_raises_handler_timeout_without_waiting_for_it(executor):
    release = threading.Event()

    def create(event):
        release.wait(timeout=30)

    req = make_request()
    started = time.monotonic()
    try:
        with pytest.raises(HandlerTimeout, match=r"^timed out after 1 s$"):
            await call(handler_of(create=create), req, context_for(req, budget=1.0), executor)
        assert time.monotonic() - started < 10
    finally:
        release.set()


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_handlers_own_timeout_error_propagates_as_itself(executor, style):
    def sync_create(event):
        raise TimeoutError("database did not answer")

    async def async_create(event):
        raise TimeoutError("database did not answer")

    req = make_request()
    with pytest.raises(TimeoutError, match="database did not answer") as info:
        await call(handler_of(create=sync_create if style == "sync" else async_create), req, context_for(req), executor)
    assert not isinstance(info.value, HandlerTimeout)


async def test_handlers_inner_asyncio_timeout_is_its_own_failure(executor):
    async def create(event):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)

    req = make_request()
    with pytest.raises(TimeoutError) as info:
        await call(handler_of(create=create), req, context_for(req), executor)
    assert not isinstance(info.value, HandlerTimeout)


async def test_other_exceptions_propagate_unchanged(executor):
    def create(event):
        raise KeyError("Bucket")

    req = make_request()
    with pytest.raises(KeyError, match="Bucket"):
        await call(handler_of(create=create), req, context_for(req), executor)


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_zero_budget_times_out_without_calling_the_handler(executor, style):
    called = []

    def sync_create(event):
        called.append(1)

    async def async_create(event):
        called.append(1)

    req = make_request()
    for deadline in (time.monotonic(), time.monotonic() - 60):
        with pytest.raises(HandlerTimeout, match="timed out after 0 s"):
            await call(
                handler_of(create=sync_create if style == "sync" else async_create),
                req,
                Context(req, deadline),
                executor,
            )
    assert called == []


# --- the answer goes out at the deadline, whatever the handler does ------------------------


async def _stubborn(event):
    """Swallows every cancellation and runs on for a while."""
    end = time.monotonic() + 3
    while time.monotonic() < end:
        try:
            await asyncio.sleep(end - time.monotonic())
        except asyncio.CancelledError:
            pass


async def _slow_cleanup(event):
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(3)  # a cleanup that takes its time
        raise


@pytest.mark.parametrize("create", [_stubborn, _slow_cleanup], ids=["swallows-cancel", "slow-cleanup"])
async def test_async_action_that_will_not_stop_still_times_out_at_the_deadline(executor, create):
    req = make_request()
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(HandlerTimeout) as info:
            await call(handler_of(create=create), req, context_for(req, budget=0.5), executor)
        took = time.monotonic() - started
        assert took < 2.5, f"the answer waited {took:.1f} s for the handler"
        assert [e["event"] for e in logs] == ["handler.orphaned"]
        orphan = info.value.orphan
        assert orphan is not None and not orphan.done()
        await asyncio.wait({orphan}, timeout=10)  # the orphan is tracked until it really ends
        assert orphan.done()
        await asyncio.sleep(0)
    assert [e["event"] for e in logs] == ["handler.orphaned", "handler.orphan_ended"]


async def test_sync_action_returning_a_stubborn_awaitable_still_times_out(executor):
    req = make_request()
    started = time.monotonic()
    with pytest.raises(HandlerTimeout) as info:
        await call(handler_of(create=lambda event: _stubborn(event)), req, context_for(req, budget=0.5), executor)
    assert time.monotonic() - started < 2.5
    await asyncio.wait({info.value.orphan}, timeout=10)
    assert info.value.orphan.done()


async def test_sync_action_over_budget_is_tracked_until_its_thread_returns(executor):
    release = threading.Event()
    req = make_request()
    with pytest.raises(HandlerTimeout) as info:
        await call(handler_of(create=lambda event: release.wait(30)), req, context_for(req, budget=0.3), executor)
    orphan = info.value.orphan
    assert orphan is not None
    await asyncio.sleep(0.2)
    assert not orphan.done()  # the thread still runs
    release.set()
    await asyncio.wait({orphan}, timeout=10)
    assert orphan.done()


async def test_a_cancelled_caller_is_not_held_by_a_handler_that_swallows_cancel(executor):
    # shutdown cancels the worker's task: it must end at once, not when the handler decides to
    req = make_request()
    running = asyncio.ensure_future(call(handler_of(create=_stubborn), req, context_for(req, budget=30), executor))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert time.monotonic() - started < 1.0


async def test_handler_orphaned_says_what_becomes_of_the_request(executor):
    """At the deadline the answer goes out now; when the caller is cancelled (a stop), the caller
    says what becomes of the request: handed back, or answered FAILED, or neither."""
    release = threading.Event()
    req = make_request()
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(HandlerTimeout):
            await call(handler_of(create=lambda event: release.wait(30)), req, context_for(req, budget=0.3), executor)
        running = asyncio.ensure_future(
            call(
                handler_of(create=lambda event: release.wait(30)),
                req,
                context_for(req, budget=30),
                executor,
                on_cancel=lambda: "the request is handed back to the queue",
            )
        )
        await asyncio.sleep(0.2)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        release.set()
    timed_out, cancelled = [e for e in logs if e["event"] == "handler.orphaned"]
    assert timed_out["why"] == "timed out" and timed_out["detail"].startswith("the request is answered now (timed out)")
    assert cancelled["why"] == "cancelled"
    assert cancelled["detail"].startswith("the request is handed back to the queue;")
    assert "answer" not in cancelled["detail"]


# --- the response margin: a fair share of a short budget ----------------------------------


@pytest.mark.parametrize(
    "service_timeout, margin", [(1, 0.25), (2, 0.5), (5, 1.0), (60, 6.0), (300, 30.0), (3600, 30.0)]
)
def test_the_margin_is_a_tenth_at_least_1_s_never_over_a_quarter_at_most_30_s(service_timeout, margin):
    assert response_margin(service_timeout) == pytest.approx(margin)
    assert response_margin(service_timeout) <= service_timeout / 4


@pytest.mark.parametrize("service_timeout", [1, 5, 60, 3600])
def test_a_request_still_inside_its_deadline_gets_its_handler_called(service_timeout):
    """Whatever is left, the handler gets at least half of it; nothing only when the deadline passed."""
    for left in (service_timeout, service_timeout * 0.5, 0.2, 0.01):
        budget = handler_budget(left, service_timeout)
        assert left / 2 <= budget <= left and budget >= left - response_margin(service_timeout)
    assert handler_budget(0, service_timeout) == handler_budget(-3, service_timeout) == 0.0


def test_a_1_s_service_timeout_leaves_the_handler_three_quarters_of_a_second():
    assert handler_budget(1.0, 1) == pytest.approx(0.75)
    assert handler_budget(3600.0, 3600) == pytest.approx(3570.0)


@pytest.mark.parametrize("service_timeout", [1, 5, 60, 600, 3600])
@pytest.mark.parametrize("wanted", [0.1, 0.5, 3.0, 6.0, 40.0])
def test_deadline_for_gives_the_handler_what_was_asked(service_timeout, wanted):
    assert handler_budget(deadline_for(wanted, service_timeout), service_timeout) == pytest.approx(wanted)

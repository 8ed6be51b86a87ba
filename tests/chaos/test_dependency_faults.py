"""Chaos suite 2: the daemon's dependencies fail, and come back.

- S3 (the presigned ResponseURLs): every response goes to tests.support.stub_s3.StubS3, a
  real HTTP server on 127.0.0.1, scripted per request: 503 SlowDown, connection resets (TCP
  RST), a stall longer than the responder's read timeout, then normal service. Every request
  must be delivered exactly once (one 2xx PUT, every attempt carrying the same stored body)
  after exactly as many attempts as faults + 1. A 403 (expired URL) gets exactly one attempt
  and an error-level `response.undeliverable` line naming the stack and logical id.
- SQS: the daemon reaches SQS (only SQS: SNS and S3 stay direct) through
  tests.support.tcp_proxy.TcpProxy (AWS_ENDPOINT_URL_SQS). The proxy goes down (open
  connections reset, new ones reset on accept, so attempts can be counted) for a while,
  with requests published meanwhile and some being handled as it goes. The daemon must not
  exit, must back off (its CPU time over the outage is read from /proc; a hot loop would use
  a whole core), and must answer everything once SQS is back.

Real daemon subprocesses (`python -m cfn_provider run`, JSON logs), real moto SNS -> SQS.
`make test` runs it reduced, `make chaos` (CFN_CHAOS=full) at full size.

Reduced size and the stall: the responder's read timeout is 30 s and the CLI cannot change
it, so the reduced run stalls for less than that and shows the other half of the behaviour
(a slow S3 is waited out, with no second attempt in parallel, then retried on its 503); the
cut-off of a stall longer than the read timeout is shown by the full run (and, in-process,
by tests/pipeline/test_responder.py::test_read_timeout_is_retried).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from cfn_provider.local.emulator import Emulator, Provider, Stack
from tests.chaos.conftest import Figures, scale
from tests.support.aws import queue_counts
from tests.support.daemons import DaemonSpawner, SubprocessDaemon, wait_until
from tests.support.stub_s3 import StubS3
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

READ_TIMEOUT = 30.0  # cfn_provider.pipeline.responder.Responder's default sock_read timeout; not a CLI option
STALL_SECONDS = scale(3, 32)  # full: longer than READ_TIMEOUT, so the daemon must cut it off
S3_REQUESTS = scale(6, 24)  # requests with scripted 503s / resets (plus one stall, plus one 403)
SQS_DOWN_SECONDS = scale(6, 20)
SQS_PUBLISHED_WHILE_DOWN = scale(4, 16)
SQS_IN_FLIGHT = scale(2, 4)  # being handled when SQS goes away
SQS_VISIBILITY = 10  # so in-flight messages whose delete failed come back soon after the outage
HANDLER_SECONDS = 3.0  # the in-flight requests' handler time
MAX_CPU_PERCENT = 20.0  # of one core, over the outage; a hot loop is ~100
MAX_ATTEMPTS_PER_SECOND = 10.0  # connection attempts the proxy may see while down; a hot loop: thousands

# What S3 does to each request's PUTs in turn before serving it normally (cycled over requests).
FAULT_PLANS: tuple[tuple[str, ...], ...] = (
    ("503", "503"),
    ("reset",),
    ("503", "reset", "503"),
    ("reset", "503"),
    ("reset", "reset"),
    (),
)
ACTION = {"503": "fail", "reset": "reset", "stall": "stall"}


def responder_attempts(plan: tuple[str, ...]) -> int:
    """The attempts the daemon logs for `plan`: aiohttp re-sends an idempotent request (PUT) once,
    at once and on a new connection, when its connection is reset or closed under it
    (aiohttp.client, RFC 9112 9.3.1.1), so a reset costs one wire PUT that the responder never
    sees as an attempt of its own."""
    steps, i, attempts = [*plan, "pass"], 0, 0
    while True:
        attempts += 1
        step, i = steps[i], i + 1
        if step == "reset":
            step, i = steps[i], i + 1
        if step == "pass":
            return attempts


# ---------------------------------------------------------------------------- helpers


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def events_of(daemon: SubprocessDaemon, event: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]


def tail(daemon: SubprocessDaemon, chars: int = 3000) -> str:
    return daemon.log_path.read_text()[-chars:] if daemon.log_path.exists() else ""


def assert_alive(daemon: SubprocessDaemon, when: str) -> None:
    assert daemon.proc is not None
    code = daemon.proc.poll()
    assert code is None, f"the daemon exited ({code}) {when}; log tail:\n{tail(daemon)}"


def iso_to_epoch(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def start_daemon(spawn: DaemonSpawner) -> Callable[..., SubprocessDaemon]:
    """`start_daemon(*extra_args, env={...})`: a daemon from the shared `spawn` fixture (killed at
    teardown), named daemon-0, daemon-1 ..."""
    return lambda *extra_args, env=None: spawn(f"daemon-{len(spawn.started)}", *extra_args, env=env)


@pytest.fixture
def stub() -> Iterator[StubS3]:
    with StubS3() as server:
        yield server


# ---------------------------------------------------------------------------- S3 faults


def test_s3_faults_are_retried_until_delivered_and_403_is_final(
    start_daemon, stub: StubS3, stack: Stack, provider: Provider, calls_file: Path, figures: Figures
) -> None:
    started = time.monotonic()
    daemon = start_daemon("--allow-response-url", stub.base_url, "--visibility-timeout", "60")

    # ---- the script: per request key, its faults in order; then normal service
    plans: dict[str, tuple[str, ...]] = {}
    requests: dict[str, dict[str, Any]] = {}

    def add(logical_id: str, plan: tuple[str, ...]) -> str:
        request = stack.request("Create", logical_id, resource_type="Custom::Test", properties={"N": logical_id})
        key = f"{stack.name}/{logical_id}/{request['RequestId']}"
        request["ResponseURL"] = stub.url(key, expires_in=7200)
        plans[key], requests[key] = plan, request
        return key

    for i in range(S3_REQUESTS):
        add(f"Faulty{i}", FAULT_PLANS[i % len(FAULT_PLANS)])
    stall_key = add("Stalled", ("stall",))
    expired_key = add("Expired", ())
    for key, plan in plans.items():
        for fault in plan:
            if fault == "503":
                stub.fail_with(503, times=1, key=key, append=True)
            elif fault == "reset":
                stub.reset_connections(times=1, key=key, append=True)
            elif fault == "stall":  # then 503: a stalled write S3 never completed
                stub.stall(STALL_SECONDS, times=1, status=503, key=key, append=True)
    stub.fail_with(403, key=expired_key)  # every write: AccessDenied, as for an expired URL
    deliverable = [k for k in plans if k != expired_key]

    for request in requests.values():
        stack.publish(request)

    # ---- S3 recovers (each key's script runs out): everything is delivered, the 403 given up
    def settled() -> bool:
        return all(stub.bodies(k) for k in deliverable) and len(events_of(daemon, "request")) >= len(requests)

    try:
        wait_until(settled, STALL_SECONDS + 60, "every response to be delivered")
        wait_until(
            lambda: queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0),
            20,
            "the queue to drain",
        )
    finally:
        delivered = sum(1 for k in deliverable if stub.bodies(k))
        figures.set("s3_requests", len(requests))
        figures.set("s3_put_attempts", len(stub.requests))
        figures.set("s3_responder_attempts", sum(e.get("attempts", 0) for e in events_of(daemon, "request")))
        figures.set("s3_faults_injected", sum(1 for r in stub.requests if r.action in ("fail", "reset", "stall")))
        figures.set("s3_stall_seconds", STALL_SECONDS)
        figures.add("delivered", delivered)
        figures.add("lost", len(deliverable) - delivered)
        figures.set("attempts_for_403", stub.put_count(expired_key))
        figures.set("s3_seconds", round(time.monotonic() - started, 1))
    time.sleep(1.0)  # room for any stray extra attempt to show up
    assert_alive(daemon, "after the S3 faults")

    # ---- every deliverable request: faults + 1 attempts, exactly one 2xx, one body throughout
    for key in deliverable:
        request, plan = requests[key], plans[key]
        attempts = stub.requests_for(key, "PUT")
        assert [r.action for r in attempts] == [ACTION[f] for f in plan] + ["pass"], (key, plan)
        bodies = stub.bodies(key)
        assert len(bodies) == 1, f"{key}: {len(bodies)} successful PUTs"
        assert {r.body for r in attempts} == {bodies[0]}, f"{key}: a retry sent a different body"
        answer = json.loads(bodies[0])
        assert answer["Status"] == "SUCCESS", answer
        assert (answer["RequestId"], answer["StackId"], answer["LogicalResourceId"]) == (
            request["RequestId"],
            request["StackId"],
            request["LogicalResourceId"],
        )
        event = events_of(daemon, "request", request_id=request["RequestId"])
        assert len(event) == 1 and event[0]["delivered"] is True, event
        assert event[0]["attempts"] == responder_attempts(plan), (event, plan)

    # ---- the stall
    stalled, retried = stub.requests_for(stall_key, "PUT")[:2]
    gap = retried.received_at - stalled.received_at
    if STALL_SECONDS > READ_TIMEOUT:  # cut off at the read timeout, not waited out
        assert READ_TIMEOUT - 1 <= gap < STALL_SECONDS, f"retry {gap:.1f} s after the stalled attempt"
        details = [
            e.get("detail", "")
            for e in events_of(daemon, "response.retry", request_id=requests[stall_key]["RequestId"])
        ]
        assert any("Timeout" in d for d in details), details
    else:  # a slow S3 is waited out, with no second attempt meanwhile
        assert STALL_SECONDS <= gap < STALL_SECONDS + 5, f"retry {gap:.1f} s after the stalled attempt"

    # ---- the 403: one attempt, final, logged loudly with the stack and logical id
    expired = requests[expired_key]
    assert [(r.status, r.action) for r in stub.requests_for(expired_key)] == [(403, "fail")]
    [undeliverable] = events_of(daemon, "response.undeliverable", request_id=expired["RequestId"])
    assert undeliverable["level"] == "error", undeliverable
    assert undeliverable["stack"] == stack.name and undeliverable["logical_id"] == "Expired", undeliverable
    assert "403" in undeliverable["detail"], undeliverable
    [line] = events_of(daemon, "request", request_id=expired["RequestId"])
    assert line["delivered"] is False and line["attempts"] == 1, line
    assert line["stack"] == stack.name and line["logical_id"] == "Expired", line
    assert not events_of(daemon, "response.retry", request_id=expired["RequestId"])

    # ---- each handler ran once; nothing crashed
    assert sorted(calls(calls_file)) == sorted(f"{r['RequestId']} Create" for r in requests.values())
    assert not events_of(daemon, "message.crashed")


# ---------------------------------------------------------------------------- SQS outage


def test_sqs_outage_daemon_backs_off_and_recovers(
    start_daemon, emulator: Emulator, stack: Stack, provider: Provider, calls_file: Path, figures: Figures
) -> None:
    sqs = provider.emulator.client("sqs")
    moto = urlsplit(emulator.endpoint)
    with TcpProxy(moto.hostname or "127.0.0.1", moto.port or 80) as proxy:
        daemon = start_daemon(
            "--visibility-timeout",
            str(SQS_VISIBILITY),
            "--max-backoff",
            "20",  # the product's default: the backoff operators actually get
            env={"AWS_ENDPOINT_URL_SQS": proxy.url},
        )

        # ---- warm up: served through the proxy
        warm = stack.request("Create", "Warm", resource_type="Custom::Test")
        stack.publish(warm)
        assert stack.response(warm, timeout=30) is not None, tail(daemon)
        assert proxy.forwarded > 0, "SQS traffic did not go through the proxy"

        # ---- some requests in flight as SQS goes away (their delete will fail)
        in_flight = [
            stack.request(
                "Create",
                f"InFlight{i}",
                resource_type="Custom::Test",
                properties={"SleepSeconds": str(HANDLER_SECONDS)},
            )
            for i in range(SQS_IN_FLIGHT)
        ]
        for request in in_flight:
            stack.publish(request)
        wait_until(
            lambda: queue_counts(sqs, provider.queue_url) == (0, SQS_IN_FLIGHT),
            15,
            "the daemon to take the in-flight requests",
        )

        # ---- the outage
        published: list[dict[str, Any]] = []
        cpu_before = cpu_seconds(daemon.proc.pid)
        down_at, down_wall = time.monotonic(), time.time()
        proxy.down()
        interval = SQS_DOWN_SECONDS / (SQS_PUBLISHED_WHILE_DOWN + 1)
        for i in range(SQS_PUBLISHED_WHILE_DOWN):
            time.sleep(max(0.0, down_at + interval * (i + 1) - time.monotonic()))
            request = stack.request("Create", f"WhileDown{i}", resource_type="Custom::Test")
            stack.publish(request)
            published.append(request)
        time.sleep(max(0.0, down_at + SQS_DOWN_SECONDS - time.monotonic()))
        assert_alive(daemon, "during the SQS outage")
        cpu_after = cpu_seconds(daemon.proc.pid)
        up_at, up_wall = time.monotonic(), time.time()
        proxy.up()

        down_seconds = up_at - down_at
        cpu_percent = 100.0 * (cpu_after - cpu_before) / down_seconds
        attempts_down = proxy.attempts_between(down_at, up_at)
        receive_failures = [
            e
            for e in events_of(daemon, "queue.receive_failed")
            if down_wall <= iso_to_epoch(e["timestamp"]) <= up_wall + 0.5
        ]
        figures.set("sqs_down_seconds", round(down_seconds, 1))
        figures.set("cpu_percent_while_down", round(cpu_percent, 2))
        figures.set("receive_retries_while_down", len(receive_failures))
        figures.set("sqs_connection_attempts_while_down", attempts_down)
        figures.set("sqs_published_while_down", len(published))
        figures.set("sqs_in_flight_at_outage", len(in_flight))

        # ---- recovery: everything answered, once
        everything = in_flight + published
        answered: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 60
        for request in everything:
            answer = stack.response(request, timeout=max(0.1, deadline - time.monotonic()))
            if answer is not None:
                answered[request["RequestId"]] = answer
        figures.set("recovered_seconds", round(time.monotonic() - up_at, 1))  # SQS back -> last answer in S3
        figures.add("delivered", len(answered))
        figures.add("lost", len(everything) - len(answered))
        wait_until(
            lambda: queue_counts(sqs, provider.queue_url) == (0, 0),
            SQS_VISIBILITY + 30,
            "the queue to drain (in-flight messages come back and are deleted as duplicates)",
        )

        assert_alive(daemon, "after the SQS outage")
        assert len(answered) == len(everything), (
            f"{len(everything) - len(answered)} of {len(everything)} requests unanswered; log tail:\n{tail(daemon)}"
        )
        assert all(a["Status"] == "SUCCESS" for a in answered.values()), answered
        # each handler ran exactly once, including those whose messages came back after the outage
        expected = sorted(f"{r['RequestId']} Create" for r in [warm, *everything])
        assert sorted(calls(calls_file)) == expected

        # ---- it backed off rather than spinning
        assert attempts_down >= 1, "the daemon never tried SQS while it was down"
        assert cpu_percent < MAX_CPU_PERCENT, f"{cpu_percent:.1f}% of a core while SQS was down (hot loop?)"
        assert attempts_down <= MAX_ATTEMPTS_PER_SECOND * down_seconds, (
            f"{attempts_down} connection attempts in {down_seconds:.1f} s while SQS was down"
        )
        assert all(e.get("retry_in") is not None for e in receive_failures), receive_failures
        assert not events_of(daemon, "message.crashed")

        # ---- still serving
        after = stack.request("Create", "After", resource_type="Custom::Test")
        stack.publish(after)
        assert stack.response(after, timeout=30) is not None, tail(daemon)
        assert_alive(daemon, "at the end")

"""Metrics over real HTTP, and the minute summary line for operators without Prometheus."""
from __future__ import annotations

import asyncio
import socket
import urllib.request

from structlog.testing import capture_logs

from daemon.emulator import Stack
from tests.support.aws import response_of, wait_for_event


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def test_metrics_endpoint_counts_requests_outcomes_and_handler_time(run_daemon, stack: Stack) -> None:
    port = free_port()
    await run_daemon(metrics_port=port, metrics_address="127.0.0.1")
    ok = stack.request("Create", "Good", resource_type="Custom::Test")
    bad = stack.request("Create", "Bad", resource_type="Custom::Test", properties={"Raise": "no"})
    for req in (ok, bad):
        stack.publish(req)
        assert await response_of(stack, req) is not None
    await asyncio.sleep(0.2)  # the request line (and its count) follows the PUT
    samples = await asyncio.to_thread(scrape, port)
    assert samples['cfn_provider_requests_total{outcome="answered",request_type="Create",status="SUCCESS"}'] == 1
    assert samples['cfn_provider_requests_total{outcome="answered",request_type="Create",status="FAILED"}'] == 1
    assert samples['cfn_provider_handler_seconds_count{request_type="Create",resource_type="Custom::Test"}'] == 2
    assert samples["cfn_provider_in_flight"] == 0
    assert samples["cfn_provider_receive_errors_total"] == 0
    assert "cfn_provider_oldest_in_flight_seconds" in samples
    assert "cfn_provider_response_put_retries_total" in samples


async def test_summary_line_reports_counts_since_the_last_one(run_daemon, stack: Stack) -> None:
    with capture_logs() as logs:
        await run_daemon(summary_interval=1.0)
        req = stack.request("Create", "Counted", resource_type="Custom::Test")
        stack.publish(req)
        assert await response_of(stack, req) is not None
        entry = await wait_for_event(logs, "summary", answered=1)
    assert entry["failed"] == 0 and entry["rejected"] == 0 and "in_flight" in entry

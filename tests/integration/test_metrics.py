"""Metrics over real HTTP, and the minute summary line for operators without Prometheus."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

from structlog.testing import capture_logs

from cfn_provider.local.emulator import Stack
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


def _label_values(registry, label: str) -> set[str]:
    return {s.labels[label] for family in registry.collect() for s in family.samples if label in s.labels}


def _series(registry) -> int:
    return sum(len(family.samples) for family in registry.collect())


def test_hostile_label_values_are_bounded(provider, tmp_path) -> None:
    """ResourceType and RequestType come from the message: 1000 made-up ones add no series."""
    from cfn_provider.service import Service
    from tests.support.daemons import TEST_HANDLERS, settings_for

    service = Service(
        settings_for(provider, tmp_path, handlers=(*TEST_HANDLERS, ("Custom::Acme*", "tests.support.handlers")))
    )
    metrics = service.metrics
    metrics.handler_ran("Custom::Test", "Create", 0.1)
    metrics.request_done("Create", "answered", "SUCCESS")
    metrics.handler_ran("Custom::Evil0", "Evil0", 0.1)
    metrics.request_done("Evil0", "answered", "FAILED")
    metrics.handler_ran("Custom::Acme0", "Create", 0.1)
    baseline = _series(metrics.registry)
    for i in range(1000):
        metrics.handler_ran(f"Custom::Evil{i}-{'x' * 200}", f"Evil{i}", 0.1)
        metrics.request_done(f"Evil{i}", "answered", "FAILED")
        metrics.handler_ran(f"Custom::Acme{i}", "Create", 0.1)
    assert _series(metrics.registry) == baseline
    assert _label_values(metrics.registry, "resource_type") == {"Custom::Test", "other", "Custom::Acme*"}
    assert _label_values(metrics.registry, "request_type") == {"Create", "other"}


def test_the_metrics_endpoint_listens_on_loopback_unless_told_otherwise() -> None:
    from click.testing import CliRunner

    from cfn_provider.cli import main
    from cfn_provider.config import Settings

    assert Settings(queue_url="q").metrics_address == "127.0.0.1"
    result = CliRunner().invoke(main, ["run", "--help"])
    option = result.output[result.output.index("--metrics-address") :]
    assert "[default: 127.0.0.1]" in option[:400]

"""Custom::Wait (handlers/wait.py): waits for a URL to answer 2xx, or for a time, through the poll contract.

The URL is a small real HTTP server on 127.0.0.1 that answers 503 until the test lets it
answer 200 (and counts its GETs); the waits run through the real daemon path (SNS -> SQS ->
daemon -> S3) with Custom::Wait named as a built-in.
"""
from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from cfn_provider.handlers import wait
from cfn_provider.local.emulator import Stack
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS

NOW = 1_800_000_000.0
HANDLERS = TEST_HANDLERS + (("Custom::Wait", None),)


class Health:
    """127.0.0.1 server: GET /healthz answers `status` (503 until ready()); /moved redirects to /healthz."""

    def __init__(self) -> None:
        self.status, self.gets = 503, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.gets += 1
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "/healthz")
                else:
                    self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ready(self) -> None:
        self.status = 200


@pytest.fixture
def health() -> Iterator[Health]:
    server = Health()
    yield server
    server.server.shutdown()


# ---------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("props, rule", [
    ({}, "exactly one of Url, Until and Seconds"),
    ({"Seconds": "5", "Until": "2030-01-01T00:00:00Z"}, "exactly one"),
    ({"Seconds": "secret-ish-value"}, "Seconds must be a number"),
    ({"Seconds": "-1"}, "Seconds must be between"),
    ({"Seconds": "nan"}, "Seconds must be between"),
    ({"Seconds": "5", "IntervalSeconds": "0"}, "IntervalSeconds must be between 1 and 300"),
    ({"Until": "secret-ish-value"}, "Until must be an ISO 8601 time"),
    ({"Until": "2030-01-01T00:00:00"}, "Until must name its time zone"),
    ({"Url": "http://127.0.0.1:1/secret-ish-value"}, "Url is not under a prefix"),
    ({"Seconds": "5", "secret-ish-value": "x"}, "unknown properties"),
])
def test_bad_properties_are_refused_naming_the_rule_never_the_value(props, rule):
    with pytest.raises(wait.WaitError) as caught:
        wait.plan(props, NOW, env={wait.URLS_ENV: "http://127.0.0.1:9/ok/"})
    assert rule in str(caught.value)
    if "secret-ish-value" not in props:
        assert "secret-ish-value" not in str(caught.value)


def test_no_url_is_allowed_unless_the_operator_allows_it():
    with pytest.raises(wait.WaitError, match="allows no URLs"):
        wait.plan({"Url": "https://example.com/"}, NOW, env={})


@pytest.mark.parametrize("url, allowed", [
    ("https://app.example.com/healthz", True),
    ("https://APP.example.com/healthz/deep", True),
    ("https://app.example.com.evil.test/healthz", False),  # a host that merely starts the same
    ("https://app.example.com:8443/healthz", False),
    ("http://app.example.com/healthz", False),
    ("https://app.example.com/other", False),
    ("https://user:pw@app.example.com/healthz", False),
    ("file:///etc/passwd", False),
])
def test_the_allowlist_compares_scheme_host_port_and_path(url, allowed):
    assert wait.url_allowed(url, ["https://app.example.com/healthz"]) is allowed


def test_seconds_and_until_plan_a_time():
    assert wait.plan({"Seconds": "30"}, NOW)["until"] == NOW + 30
    assert wait.plan({"Until": "2030-01-01T01:00:00+01:00"}, NOW)["until"] == 1_893_456_000.0
    assert wait.plan({"Until": "2030-01-01T00:00:00Z"}, NOW, env={})["until"] == 1_893_456_000.0


# ---------------------------------------------------------------------------------- through the daemon
async def test_wait_for_a_url_is_done_when_it_answers_2xx(run_daemon, stack: Stack, health: Health,
                                                          monkeypatch) -> None:
    monkeypatch.setenv(wait.URLS_ENV, f"{health.base}/healthz")
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "AppIsUp", resource_type="Custom::Wait",
                            properties={"Url": f"{health.base}/healthz", "IntervalSeconds": "1"})
    stack.publish(request)
    deadline = time.monotonic() + 20
    while health.gets < 3:
        assert time.monotonic() < deadline, "the URL was not looked at again"
        await asyncio.sleep(0.1)
    assert stack.response(request, timeout=0) is None  # 503: still waiting
    health.ready()
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"].startswith(f"{stack.name}-AppIsUp-")


async def test_a_redirect_is_not_followed_out_of_the_allowlist(run_daemon, stack: Stack, health: Health,
                                                               monkeypatch) -> None:
    health.ready()
    monkeypatch.setenv(wait.URLS_ENV, f"{health.base}/moved")
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Moved", resource_type="Custom::Wait",
                            properties={"Url": f"{health.base}/moved", "IntervalSeconds": "1", "ServiceTimeout": "5"})
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "FAILED" and "timed out" in answer["Reason"]


async def test_wait_seconds_through_the_daemon(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Pause", resource_type="Custom::Wait", properties={"Seconds": "2"})
    started = time.monotonic()
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "SUCCESS" and time.monotonic() - started >= 2
    delete = stack.request("Delete", "Pause", resource_type="Custom::Wait", properties={"Seconds": "2"},
                           physical_id=answer["PhysicalResourceId"])
    stack.publish(delete)
    assert (await response_of(stack, delete))["Status"] == "SUCCESS"


async def test_a_bad_property_fails_the_create_without_quoting_it(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Bad", resource_type="Custom::Wait", properties={"Until": "tomorrow-ish"})
    stack.publish(request)
    answer = await response_of(stack, request)
    assert answer["Status"] == "FAILED" and "Until must be an ISO 8601 time" in answer["Reason"]
    assert "tomorrow-ish" not in answer["Reason"]

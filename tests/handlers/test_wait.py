"""Custom::Wait (handlers/wait.py): waits for a URL to answer 2xx, or for a time, through the poll contract.

The URL is a small real HTTP server on 127.0.0.1 that answers 503 until the test lets it
answer 200 (and counts its GETs); the waits run through the real daemon path (SNS -> SQS ->
daemon -> S3) with Custom::Wait named as a built-in.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cfn_provider.handlers import wait
from cfn_provider.local.emulator import Stack
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS

NOW = 1_800_000_000.0
HANDLERS = TEST_HANDLERS + (("Custom::Wait", None),)


class Health:
    """127.0.0.1 server: GET /healthz answers `status` (503 until ready()); /moved redirects to /healthz.
    Every path asked for is kept in `paths`, exactly as it arrived."""

    def __init__(self) -> None:
        self.status, self.gets, self.paths = 503, 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.gets += 1
                outer.paths.append(self.path)
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
@pytest.mark.parametrize(
    "props, rule",
    [
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
    ],
)
def test_bad_properties_are_refused_naming_the_rule_never_the_value(props, rule):
    with pytest.raises(wait.WaitError) as caught:
        wait.plan(props, NOW, env={wait.URLS_ENV: "http://127.0.0.1:9/ok/"})
    assert rule in str(caught.value)
    if "secret-ish-value" not in props:
        assert "secret-ish-value" not in str(caught.value)


def test_no_url_is_allowed_unless_the_operator_allows_it():
    with pytest.raises(wait.WaitError, match="allows no URLs"):
        wait.plan({"Url": "https://example.com/"}, NOW, env={})


@pytest.mark.parametrize(
    "url, allowed",
    [
        ("https://app.example.com/healthz", True),
        ("https://APP.example.com/healthz/deep", True),
        ("https://app.example.com.evil.test/healthz", False),  # a host that merely starts the same
        ("https://app.example.com:8443/healthz", False),
        ("http://app.example.com/healthz", False),
        ("https://app.example.com/other", False),
        ("https://user:pw@app.example.com/healthz", False),
        ("file:///etc/passwd", False),
    ],
)
def test_the_allowlist_compares_scheme_host_port_and_path(url, allowed):
    assert wait.url_allowed(url, ["https://app.example.com/healthz"]) is allowed


PREFIX = "https://app.example.com/healthz"


@pytest.mark.parametrize(
    "url",
    [
        f"{PREFIX}/../admin",
        f"{PREFIX}/%2e%2e/admin",
        f"{PREFIX}/%2E%2E/admin",  # issue 21 item 3
        "https://app.example.com/healthzz-internal",  # issue 21 item 3: a prefix is whole segments
        f"{PREFIX}/./x",
        f"{PREFIX}/..",
        f"{PREFIX}/%2e",
        f"{PREFIX}/.%2e/admin",
        f"{PREFIX}/%252e%252e/admin",  # double-encoded: .. to a proxy that decodes once more
        f"{PREFIX}/..;/admin",
        f"{PREFIX}/%2e%2e;x=1/admin",  # ;parameters some servers strip
        f"{PREFIX}/a%2Fb",
        f"{PREFIX}%2F..%2Fadmin",
        f"{PREFIX}/a%252fb",  # encoded slashes
        f"{PREFIX}/..\\admin",
        f"{PREFIX}/%5C..%5Cadmin",  # backslashes, raw or encoded
        f"{PREFIX} /../admin",
        f"{PREFIX}/\r\nHost: evil",  # whitespace and control characters
        "https://app.example.com:443@evil.example/healthz",  # userinfo
    ],
)
def test_a_url_that_could_leave_the_prefix_is_refused(url):
    assert wait.url_allowed(url, [PREFIX]) is False
    with pytest.raises(wait.WaitError, match="Url is not under a prefix"):
        wait.plan({"Url": url}, NOW, env={wait.URLS_ENV: PREFIX})


@pytest.mark.parametrize(
    "url",
    [
        PREFIX,
        f"{PREFIX}/",
        f"{PREFIX}/deep/er",
        f"{PREFIX}?next=../admin",  # a query is not the path
        f"{PREFIX}/..hidden",
        f"{PREFIX}/a%20b",
        "https://app.example.com:443/healthz",  # the scheme's own port
    ],
)
def test_a_url_under_the_prefix_is_allowed(url):
    assert wait.url_allowed(url, [PREFIX]) is True


def test_seconds_and_until_plan_a_time():
    assert wait.plan({"Seconds": "30"}, NOW)["until"] == NOW + 30
    assert wait.plan({"Until": "2030-01-01T01:00:00+01:00"}, NOW)["until"] == 1_893_456_000.0
    assert wait.plan({"Until": "2030-01-01T00:00:00Z"}, NOW, env={})["until"] == 1_893_456_000.0


# ---------------------------------------------------------------------------------- through the daemon
async def test_wait_for_a_url_is_done_when_it_answers_2xx(
    run_daemon, stack: Stack, health: Health, monkeypatch
) -> None:
    monkeypatch.setenv(wait.URLS_ENV, f"{health.base}/healthz")
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request(
        "Create",
        "AppIsUp",
        resource_type="Custom::Wait",
        properties={"Url": f"{health.base}/healthz", "IntervalSeconds": "1"},
    )
    stack.publish(request)
    deadline = time.monotonic() + 20
    while health.gets < 3:
        assert time.monotonic() < deadline, "the URL was not looked at again"
        await asyncio.sleep(0.1)
    assert stack.response(request, timeout=0) is None  # 503: still waiting
    health.ready()
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"].startswith(f"{stack.name}-AppIsUp-")


async def test_a_redirect_is_not_followed_out_of_the_allowlist(
    run_daemon, stack: Stack, health: Health, monkeypatch
) -> None:
    health.ready()
    monkeypatch.setenv(wait.URLS_ENV, f"{health.base}/moved")
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request(
        "Create",
        "Moved",
        resource_type="Custom::Wait",
        properties={"Url": f"{health.base}/moved", "IntervalSeconds": "1", "ServiceTimeout": "5"},
    )
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "FAILED" and "timed out" in answer["Reason"]


async def test_a_url_that_leaves_the_prefix_is_never_fetched(
    run_daemon, stack: Stack, health: Health, monkeypatch
) -> None:
    """Issue 21 item 3, through the daemon: each URL fails its Create naming the rule, and the
    server sees no request at all (before: /admin was fetched, the check passed on the raw text and
    the client normalised the URL afterwards). An allowed URL arrives exactly as written."""
    health.ready()
    monkeypatch.setenv(wait.URLS_ENV, f"{health.base}/healthz")
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    escapes = [
        f"{health.base}/healthz/../admin",
        f"{health.base}/healthz/%2e%2e/admin",
        f"{health.base}/healthzz-internal",
        f"{health.base}/healthz/..;/admin",
        f"{health.base}/healthz%2F..%2Fadmin",
    ]
    requests = []
    for i, url in enumerate(escapes):
        requests.append(stack.request("Create", f"Escape{i}", resource_type="Custom::Wait", properties={"Url": url}))
        stack.publish(requests[-1])
    for request in requests:
        answer = await response_of(stack, request)
        assert answer["Status"] == "FAILED" and "Url is not under a prefix" in answer["Reason"], answer
        assert "admin" not in answer["Reason"] and "healthzz" not in answer["Reason"]
    assert health.paths == []
    exact = stack.request(
        "Create", "Exact", resource_type="Custom::Wait", properties={"Url": f"{health.base}/healthz/%7Eme/a%20b"}
    )
    stack.publish(exact)
    assert (await response_of(stack, exact, timeout=20))["Status"] == "SUCCESS"
    assert health.paths == ["/healthz/%7Eme/a%20b"]  # as written: not re-quoted (~), not normalised


async def test_wait_seconds_through_the_daemon(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Pause", resource_type="Custom::Wait", properties={"Seconds": "2"})
    started = time.monotonic()
    stack.publish(request)
    answer = await response_of(stack, request, timeout=20)
    assert answer["Status"] == "SUCCESS" and time.monotonic() - started >= 2
    delete = stack.request(
        "Delete",
        "Pause",
        resource_type="Custom::Wait",
        properties={"Seconds": "2"},
        physical_id=answer["PhysicalResourceId"],
    )
    stack.publish(delete)
    assert (await response_of(stack, delete))["Status"] == "SUCCESS"


async def test_a_bad_property_fails_the_create_without_quoting_it(run_daemon, stack: Stack) -> None:
    await run_daemon(handlers=HANDLERS, poll_interval=0.5)
    request = stack.request("Create", "Bad", resource_type="Custom::Wait", properties={"Until": "tomorrow-ish"})
    stack.publish(request)
    answer = await response_of(stack, request)
    assert answer["Status"] == "FAILED" and "Until must be an ISO 8601 time" in answer["Reason"]
    assert "tomorrow-ish" not in answer["Reason"]

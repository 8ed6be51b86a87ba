"""A daemon killed outright (SIGKILL, power loss) loses nothing a user relies on.

- Killed after the response was stored but before CloudFormation got it: the next daemon
  re-sends the very same stored body and does NOT run the handler again.
- Killed while the handler runs: the next daemon takes the request over once the lease and
  the message's visibility lapse, runs the handler, and answers exactly once.

Real daemon subprocesses, real moto SNS -> SQS, real presigned S3 URLs. The "S3 that is
down" is a real HTTP server on 127.0.0.1 (below) that answers 503 until told to pass PUTs
through to moto's S3.
"""
from __future__ import annotations

import http.server
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import pytest

from daemon.emulator import Emulator, Provider, Stack, key_of
from tests.support.aws import queue_counts
from tests.support.daemons import SubprocessDaemon, recorded_calls, wait_for_event

pytestmark = pytest.mark.slow

VISIBILITY = "5"  # seconds; so a killed daemon's message comes back quickly


# ---------------------------------------------------------------------------------- stub S3
class FlakyS3:
    """A real HTTP server standing in for S3 behind presigned URLs.

    While failing, every PUT is answered `status` (503 SlowDown) and its body recorded in
    `attempts[path]`. After `pass_through()`, PUTs are forwarded unchanged (path and
    presigned query) to `upstream` (moto's S3), recorded in `accepted[path]`, and
    answered with upstream's status.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.failing, self.status = True, 503
        self.attempts: dict[str, list[bytes]] = defaultdict(list)
        self.accepted: dict[str, list[bytes]] = defaultdict(list)
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def pass_through(self) -> None:
        with self._lock:
            self.failing = False

    def url_for(self, presigned_url: str) -> str:
        """The same presigned URL (path and query), served by this stub."""
        parts = urlsplit(presigned_url)
        return f"{self.base_url}{parts.path.lstrip('/')}?{parts.query}"

    def attempted(self, url: str) -> list[bytes]:
        with self._lock:
            return list(self.attempts[urlsplit(url).path])

    def delivered(self, url: str) -> list[bytes]:
        with self._lock:
            return list(self.accepted[urlsplit(url).path])

    def start(self) -> "FlakyS3":
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = urlsplit(self.path).path
                with owner._lock:
                    failing = owner.failing
                    (owner.attempts if failing else owner.accepted)[path].append(body)
                if failing:
                    self._reply(owner.status, b"<Error><Code>SlowDown</Code><Message>Please reduce your "
                                              b"request rate.</Message></Error>")
                    return
                forward = urllib.request.Request(owner.upstream + self.path, data=body, method="PUT",
                                                 headers={"Content-Type": self.headers.get("Content-Type", "")})
                try:
                    with urllib.request.urlopen(forward, timeout=10) as resp:
                        self._reply(resp.status, resp.read())
                except urllib.error.HTTPError as exc:
                    self._reply(exc.code, exc.read())

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None


@pytest.fixture
def flaky_s3(emulator: Emulator) -> Iterator[FlakyS3]:
    stub = FlakyS3(emulator.endpoint).start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.txt"


@pytest.fixture
def spawn(emulator: Emulator, provider: Provider, tmp_path: Path,
          calls_file: Path) -> Iterator[Callable[..., SubprocessDaemon]]:
    """Start subprocess daemons that share one state file; every one is killed at teardown."""
    started: list[SubprocessDaemon] = []

    def start(name: str, *extra_args: str) -> SubprocessDaemon:
        daemon = SubprocessDaemon.for_provider(
            emulator, provider, tmp_path, tmp_path / f"{name}.log",
            extra_args=["--visibility-timeout", VISIBILITY, *extra_args],
            env={"CFN_TEST_CALLS_FILE": str(calls_file)},
        )
        started.append(daemon)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in started:
            daemon.stop()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def stop_gracefully(daemon: SubprocessDaemon) -> int:
    daemon.signal(signal.SIGTERM)
    return daemon.wait(30)


# ---------------------------------------------------------------------------------- tests
def test_crash_after_response_stored_is_resent_without_rerunning_handler(
        spawn, stack: Stack, provider: Provider, flaky_s3: FlakyS3, calls_file: Path) -> None:
    first = spawn("first", "--allow-response-url", flaky_s3.base_url)
    request = stack.request("Create", "Crashy", resource_type="Custom::Test", properties={
        "ReturnJson": json.dumps({"PhysicalResourceId": "crashy-1", "Data": {"Token": "t-123"}}),
    })
    s3_url = request["ResponseURL"]  # the real presigned URL (SigV2, Expires in 2 h)
    request["ResponseURL"] = flaky_s3.url_for(s3_url)
    stack.publish(request)

    # The first PUT attempt means the handler ran and its answer is stored (stored before any PUT).
    attempted = wait_until(lambda: flaky_s3.attempted(request["ResponseURL"]), 30, "a first PUT attempt")
    first.kill()  # SIGKILL, mid-retry
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]
    before_crash = attempted[0]
    assert all(body == before_crash for body in flaky_s3.attempted(request["ResponseURL"]))

    flaky_s3.pass_through()
    second = spawn("second", "--allow-response-url", flaky_s3.base_url)
    wait_until(lambda: flaky_s3.delivered(request["ResponseURL"]), 30, "the response to be re-sent")
    event = wait_for_event(second, event="request", request_id=request["RequestId"], timeout=15)
    assert stop_gracefully(second) == 0

    delivered = flaky_s3.delivered(request["ResponseURL"])
    assert delivered == [before_crash]  # byte for byte what was attempted before the crash, once
    answer = json.loads(delivered[0])
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == "crashy-1" and answer["Data"] == {"Token": "t-123"}
    assert answer["RequestId"] == request["RequestId"] and answer["StackId"] == request["StackId"]
    # the handler was not run again
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]
    assert event["outcome"] == "replayed" and event["delivered"] is True
    # CloudFormation reads it from S3
    assert stack.response({**request, "ResponseURL": s3_url}, timeout=5) == answer
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)


def test_crash_during_handler_reruns_it_once_lease_lapses(
        spawn, stack: Stack, provider: Provider, calls_file: Path) -> None:
    s3 = provider.emulator.client("s3")
    s3.put_bucket_versioning(Bucket=provider.bucket, VersioningConfiguration={"Status": "Enabled"})
    sqs = provider.emulator.client("sqs")
    first = spawn("first")
    first_owner = wait_for_event(first, event="started")["owner"]

    request = stack.request("Create", "Slow", resource_type="Custom::Test",
                            properties={"SleepSeconds": "6", "ReturnJson": json.dumps({"PhysicalResourceId": "slow-1"})})
    stack.publish(request)
    wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, 1), 30, "the first daemon to take the message")
    time.sleep(2)  # the claim is written right after receipt; the handler is now sleeping
    first.kill()
    assert recorded_calls(calls_file) == [], "the handler finished before the kill; the test proves nothing"

    second = spawn("second")
    answer = stack.response(request, timeout=35)
    assert answer is not None, "no response after the crash"
    event = wait_for_event(second, event="request", request_id=request["RequestId"], outcome="answered", timeout=15)
    assert stop_gracefully(second) == 0

    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "slow-1"
    assert event["took_over_from"] == first_owner  # a lapsed lease was taken over
    assert recorded_calls(calls_file) == [f"{request['RequestId']} Create"]  # re-run, completed once
    bucket, key = key_of(request["ResponseURL"])
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    assert len(versions.get("Versions", [])) == 1  # exactly one PUT reached S3
    assert queue_counts(sqs, provider.queue_url) == (0, 0)

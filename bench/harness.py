"""Processes and plumbing the scenarios share: the emulator process, consumer processes with
their own CPU accounting, request building, and a steady-rate SNS publisher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from cfn_provider.local.emulator import ACCOUNT, REGION, TEST_CREDENTIALS, Provider

REPO = Path(__file__).resolve().parents[1]
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
RESOURCE_TYPE = "Custom::Bench"


# ---------------------------------------------------------------------------- /proc accounting
def cpu_seconds(pid: int) -> float:
    """user + sys CPU seconds of a live process, all its threads."""
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, sys) CPU seconds of a live process, all its threads (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICK, int(fields[12]) / CLOCK_TICK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_pressure_s() -> float | None:
    """Seconds during which some task on this machine waited for a CPU (Linux PSI), or None."""
    try:
        with open("/proc/pressure/cpu") as fh:
            for line in fh:
                if line.startswith("some "):
                    return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def pressure_share(start: float | None, end: float | None, seconds: float) -> float | None:
    return None if start is None or end is None or seconds <= 0 else min(1.0, (end - start) / seconds)


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), model)
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    python = sys.version.split()[0]
    return f"{os.cpu_count()} vCPU {model}, {mem_gib:.0f} GiB RAM, Linux {os.uname().release}, Python {python}"


# ---------------------------------------------------------------------------- the emulator
class EmulatorProcess:
    """moto's server (bench.moto_server) in its own process; duck-types cfn_provider.local.emulator.Emulator."""

    def __init__(self, log_dir: Path):
        self.log = open(log_dir / "moto.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.moto_server"],
            cwd=REPO,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the emulator did not start; see {log_dir / 'moto.log'}")
        self.endpoint = json.loads(line)["endpoint"]
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        self.pid = self.proc.pid

    def env(self, **endpoints: str) -> dict[str, str]:
        return {**TEST_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION, **endpoints}

    def client(self, service: str, endpoint: str | None = None) -> Any:
        return boto3.client(
            service,
            endpoint_url=endpoint or self.endpoint,
            region_name=REGION,
            aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(retries={"max_attempts": 2}, s3={"addressing_style": "path"}, max_pool_connections=4),
        )

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def calls(self) -> Counter:
        """Calls served so far, by operation (bench.moto_server counts them)."""
        with urllib.request.urlopen(f"{self.endpoint}/_bench/calls", timeout=30) as resp:
            return Counter(json.loads(resp.read()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_"))}
    return {**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}


# ---------------------------------------------------------------------------- consumers
def has(line: str, key: str, value: str) -> bool:
    """Whether a JSON log line holds `"key": "value"`, without parsing it: compact (this tree's
    lines) or spaced (a --baseline checkout from before the lines were compact)."""
    return f'"{key}":"{value}"' in line or f'"{key}": "{value}"' in line


def daemon_line(line: str) -> int:
    """Requests a daemon log line answers: a `request` event whose outcome is `answered` or
    `replayed` (a duplicate delivery, or a request another daemon holds, answers nothing new)."""
    if not has(line, "event", "request"):
        return 0
    return 1 if has(line, "outcome", "answered") or has(line, "outcome", "replayed") else 0


def loop_line(line: str) -> int:
    return int(line.split()[1]) if line.startswith("answered ") else 0


@dataclass
class Consumer:
    """A consumer process whose stdout is read line by line: `answered` counts finished requests."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    counts: Callable[[str], int]
    ready_when: Callable[[str], bool]
    on_line: Callable[[str, float], None] | None = None
    answered: int = 0
    last_answer_at: float = 0.0  # time.monotonic()
    errors: list[str] = field(default_factory=list)
    cwd: Path = REPO
    proc: subprocess.Popen | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def daemon(
        cls,
        emulator: EmulatorProcess,
        provider: Provider,
        state: str,
        handler: str,
        log_path: Path,
        concurrency: int = 32,
        extra: list[str] = (),
        env: dict[str, str] | None = None,
        response_endpoint: str | None = None,
        name: str = "daemon",
        trace: Path | None = None,
        checkout: Path | None = None,
        ablate: str | None = None,
    ) -> Consumer:
        """`python -m cfn_provider run` (or, with `trace`, the same under bench.trace_daemon's stopwatch,
        its stage timings written to `trace`). `checkout`: another clone of this repository, whose
        daemon is run instead (its own `.venv`, as `make venv` builds it there). `ablate`: the daemon
        without those parts (bench.ablate_daemon's names, comma-separated)."""
        module = ["-m", "bench.trace_daemon" if trace else "bench.ablate_daemon" if ablate else "cfn_provider"]
        env = {**(env or {}), **({"BENCH_TRACE_OUT": str(trace)} if trace else {})}
        if ablate:  # bench.ablate_daemon: the daemon without these parts (a diagnostic)
            env["BENCH_ABLATE"] = ablate
        python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
        args = [
            python,
            *module,
            "run",
            "--queue-url",
            provider.queue_url,
            "--topic-arn",
            provider.topic_arn,
            "--state",
            state,
            "--no-verify-signatures",
            "--allow-response-url",
            (response_endpoint or emulator.endpoint) + "/",
            "--handler",
            f"{RESOURCE_TYPE}=bench.handlers:{handler}",
            "--concurrency",
            str(concurrency),
            "--log-format",
            "json",
            *extra,
        ]
        consumer = cls(
            name,
            args,
            child_env(**emulator.env(**env)),
            log_path,
            daemon_line,
            lambda line: has(line, "event", "started"),
        )
        if checkout:
            consumer.env["PYTHONPATH"], consumer.cwd = str(checkout), checkout
        return consumer

    @classmethod
    def script(
        cls,
        module: str,
        emulator: EmulatorProcess,
        provider: Provider,
        log_path: Path,
        extra: list[str] = (),
        name: str | None = None,
    ) -> Consumer:
        args = [sys.executable, "-m", module, "--queue-url", provider.queue_url, *extra]
        return cls(
            name or module.rsplit(".", 1)[-1],
            args,
            child_env(**emulator.env()),
            log_path,
            loop_line,
            lambda line: line.strip() == "ready",
        )

    def start(self, timeout: float = 60.0, settle: float = 1.0) -> Consumer:
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True).start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"{self.name} did not start; see {self.log_path}")
        time.sleep(settle)  # past start-up: the first long poll is in flight
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "a") as log:
            for line in self.proc.stdout:
                now = time.monotonic()
                log.write(line)
                if not self._ready.is_set() and self.ready_when(line):
                    self._ready.set()
                if line.startswith("error") or has(line, "level", "error") or "Traceback" in line:
                    self.errors.append(line.strip()[:300])
                n = self.counts(line)
                if self.on_line is not None:
                    self.on_line(line, time.time())
                if n:
                    with self._changed:
                        self.answered += n
                        self.last_answer_at = now
                        self._changed.notify_all()
        self._ready.set()

    def wait_answered(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.answered < n:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc is not None and self.proc.poll() is not None):
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def cpu(self) -> float:
        assert self.proc is not None
        return cpu_seconds(self.proc.pid)

    def cpu_sys(self) -> float:
        """The kernel's share of cpu() (system calls: fsync, sockets, thread wake-ups)."""
        assert self.proc is not None
        return cpu_split(self.proc.pid)[1]

    def memory(self) -> dict[str, int]:
        assert self.proc is not None
        return memory_kib(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM; a second one after 0.5 s (the daemon's "stop now": its figures are taken already
        and a graceful stop would wait out the 20 s long poll); SIGKILL as a last resort."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 0.5), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is not None:
                return
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue


# ---------------------------------------------------------------------------- requests and publishing
@dataclass
class Request:
    body: dict[str, Any]
    key: str  # S3 key of its response
    published_at: float = 0.0  # time.time() just before the publish call
    sns_message_id: str = ""


def build_requests(
    presigner: Any, provider: Provider, n: int, properties: dict[str, Any] | None = None, stacks: int = 1
) -> list[Request]:
    """n Create requests for RESOURCE_TYPE, spread over `stacks` stacks, each with its presigned ResponseURL."""
    stack_ids = [f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/bench-{i}/{uuid.uuid4()}" for i in range(stacks)]
    out = []
    for i in range(n):
        stack_id, request_id = stack_ids[i % stacks], str(uuid.uuid4())
        key = f"bench/{i}/{request_id}"
        url = presigner.generate_presigned_url(
            "put_object", Params={"Bucket": provider.bucket, "Key": key}, ExpiresIn=7200
        )
        out.append(
            Request(
                {
                    "RequestType": "Create",
                    "ServiceToken": provider.topic_arn,
                    "ResponseURL": url,
                    "StackId": stack_id,
                    "RequestId": request_id,
                    "LogicalResourceId": f"Resource{i}",
                    "ResourceType": RESOURCE_TYPE,
                    "ResourceProperties": {"ServiceToken": provider.topic_arn, "Index": str(i), **(properties or {})},
                },
                key,
            )
        )
    return out


@dataclass
class FeedResult:
    first_at: float  # time.monotonic() of the first publish
    last_at: float
    published: int
    paused_s: float  # summed over publishers: time spent waiting because `backlog` requests were outstanding


def feed(
    sns: Any,
    topic_arn: str,
    requests: list[Request],
    rate: float,
    answered: Callable[[], int],
    backlog: int,
    batch: int = 10,
    publishers: int = 3,
    deadline: float = 300.0,
) -> FeedResult:
    """Publish `requests` through SNS PublishBatch, at most `rate` per second, never more than
    `backlog` ahead of the answers (so the queue stays shallow when the consumer is slower).
    `publishers` threads publish at once, so one slow call to the emulator does not stall the feed."""
    chunks = [requests[i : i + batch] for i in range(0, len(requests), batch)]
    lock = threading.Lock()
    state = {
        "next_chunk": 0,
        "reserved": 0,
        "published": 0,
        "paused": 0.0,
        "first_at": 0.0,
        "next_at": time.monotonic(),
    }
    give_up = time.monotonic() + deadline
    errors: list[BaseException] = []

    def publisher() -> None:
        while time.monotonic() < give_up and not errors:
            with lock:
                if state["next_chunk"] >= len(chunks):
                    return
                chunk = chunks[state["next_chunk"]]
                state["next_chunk"] += 1
            t0 = time.monotonic()
            while time.monotonic() < give_up:
                with lock:
                    if state["reserved"] + len(chunk) - answered() <= backlog:
                        state["reserved"] += len(chunk)
                        now = time.monotonic()
                        at = state["next_at"] = max(state["next_at"] + len(chunk) / rate, now)
                        break
                time.sleep(0.002)
            else:
                return
            with lock:
                state["paused"] += max(0.0, now - t0)
            if at > now:
                time.sleep(at - now)
            stamp = time.time()
            for r in chunk:
                r.published_at = stamp
            with lock:
                state["first_at"] = state["first_at"] or time.monotonic()
            try:
                resp = sns.publish_batch(
                    TopicArn=topic_arn,
                    PublishBatchRequestEntries=[
                        {"Id": str(j), "Message": json.dumps(r.body)} for j, r in enumerate(chunk)
                    ],
                )
                if resp.get("Failed"):
                    raise RuntimeError(f"publish failed: {resp['Failed'][:2]}")
            except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
                errors.append(exc)
                return
            with lock:
                state["published"] += len(chunk)

    threads = [threading.Thread(target=publisher, name=f"publish-{i}", daemon=True) for i in range(publishers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, give_up - time.monotonic() + 30))
    if errors:
        raise RuntimeError(f"publishing failed: {errors[0]!r}")
    return FeedResult(state["first_at"], time.monotonic(), state["published"], state["paused"])


def responses_in_bucket(s3: Any, bucket: str) -> int:
    total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        total += page.get("KeyCount", 0)
    return total


def queue_depth(sqs: Any, queue_url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


class InFlightSampler:
    """Samples the queue's in-flight count (ApproximateNumberOfMessagesNotVisible) every `every`
    seconds on a thread of its own, for the mean over a run (received, not yet deleted)."""

    def __init__(self, sqs: Any, queue_url: str, every: float = 0.25):
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sqs, queue_url, every), daemon=True)
        self._thread.start()

    def _run(self, sqs: Any, queue_url: str, every: float) -> None:
        while not self._stop.wait(every):
            try:
                attrs = sqs.get_queue_attributes(
                    QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
                )
                self.samples.append(int(attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"]))
            except Exception:  # noqa: BLE001 - a missed sample is only a missed sample
                pass

    def stop(self) -> float:
        """Stop; the mean in-flight count (nan without samples)."""
        self._stop.set()
        self._thread.join(5)
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")

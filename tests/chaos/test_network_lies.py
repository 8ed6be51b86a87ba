"""Chaos suite: exactly once when the network lies (issue 11, section 5).

Every call a fleet member makes goes through tests.support.fault_proxy.FaultProxy, a real HTTP
proxy on 127.0.0.1 that, per a seeded schedule, applies a call and drops its answer (the write
took effect, the client sees a reset), holds an applied call's answer past the client's read
timeout, delays, resets before forwarding, and answers throttling errors and 5xx itself:

- DynamoDB (the fleet's store): dynalite, an independent implementation whose conditional
  writes are atomic (moto's are not), reached through AWS_ENDPOINT_URL_DYNAMODB;
- SQS (moto) through AWS_ENDPOINT_URL_SQS; the queue and its dead-letter queue are made by
  `bootstrap`'s own code, so the redrive policy's maxReceiveCount is whatever bootstrap sets;
- S3 (moto) through the presigned ResponseURLs, which are presigned for the proxy's address
  (allowed with --allow-response-url);
- MNS (tests/support/mns_server.py) and the ROS response endpoint (tests/support/stub_s3.py)
  in a smaller leg of its own (`test_mns_leg_...`).

Three members serve one queue and one table; one of them runs with its clock ahead (faketime,
from Debian's packages). Each request is published twice. Members are SIGKILLed at seeded
moments and restarted at once. The handler (tests.support.handlers:stamped) puts a fresh nonce
in every answer, so a handler that ran twice and had both answers reach S3 shows as two bodies
in the versioned bucket.

Figures (`make chaos` prints them): lost, dead-lettered, conflicting bodies, duplicate PUTs,
handler re-runs, answers after the deadline, receive count per request (max, p99), the faults
injected per service, and the log evidence (outcomes, store.lost_claim, defers against the
member's own claim, and of those the orphaned ones: a claim written by a retried call whose
first attempt was applied). Targets asserted: 0 lost, 0 dead-lettered, 0 conflicting, 0 late, and
every answer SUCCESS (the handler never fails).

Sizes: `scale(reduced, full)`; CFN_CHAOS_SEED overrides the seed of faults, kills and handler times;
CFN_CHAOS_HONEST_NETWORK=1 turns every fault off (the baseline). dynalite and faketime are installed
by the project's own files (Makefile, .ci/run): a missing one fails the suite saying how to install
it.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cfn_provider.local.emulator import REGION, TEST_CREDENTIALS, Emulator, Provider, Stack, key_of
from cfn_provider.ops.bootstrap import Bootstrap
from tests.chaos.conftest import Figures, scale
from tests.dialects.conftest import QUEUE as ROS_QUEUE
from tests.dialects.conftest import ros_request
from tests.support.aws import bodies_by_key, publish_all, queue_counts
from tests.support.daemons import REPO, SubprocessDaemon, fleet_member, recorded_calls, wait_until
from tests.support.dynalite import Dynalite
from tests.support.fault_proxy import Exchange, FaultProxy, Schedule
from tests.support.mns_server import MnsServer
from tests.support.stub_s3 import StubS3

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("CFN_CHAOS_SEED", "20261123"))
REQUESTS = scale(40, 300)
KILLS = scale(2, 10)
FLEET = 3
SKEW_SECONDS = scale(5, 20)  # the last member's clock, ahead of the others
# The store's lease is the visibility timeout, renewed every third of it; a member whose clock is
# ahead sees every lease SKEW seconds short, so 2/3 of it must outlast the skew with room to spare.
VISIBILITY = scale(20, 60)
CONCURRENCY = "8"
SERVICE_TIMEOUT = 300  # seconds: each request's deadline is its SNS Timestamp + this
KILL_GAP = (3, scale(8, 10))  # seconds between SIGKILLs (uniform, seeded)
SETTLE = scale(100, 420)  # seconds allowed after the last kill for every answer and an empty queue
RESOURCE_TYPE = "Custom::Chaos"
HANDLER = f"{RESOURCE_TYPE}=tests.support.handlers:stamped"

# What the network does, per service and operation (the rest of each call's chance is "pass").
# CFN_CHAOS_HONEST_NETWORK=1 turns every fault off (kills and the clock skew stay): a baseline that
# tells a failure of the harness from a failure under the lies.
HONEST = os.environ.get("CFN_CHAOS_HONEST_NETWORK") == "1"
WRITE = {"drop": 0.10, "stall": 0.01, "delay": 0.05, "reset": 0.03, "throttle": 0.05, "error": 0.02}
READ = {"drop": 0.02, "delay": 0.05, "reset": 0.02, "throttle": 0.05, "error": 0.02}
DYNAMODB_FAULTS = {"UpdateItem": WRITE, "DeleteItem": WRITE, "PutItem": WRITE, "*": READ}
SQS_FAULTS = {
    "ReceiveMessage": {"drop": 0.01, "delay": 0.03, "reset": 0.03, "throttle": 0.03, "error": 0.02},
    "*": {"drop": 0.05, "delay": 0.03, "reset": 0.03, "throttle": 0.03, "error": 0.02},  # deletes, visibility
}
S3_FAULTS = {
    "PUT": {"drop": 0.05, "delay": 0.05, "reset": 0.03, "throttle": 0.05, "error": 0.02},
    "POST": {"drop": 0.05, "delay": 0.05, "reset": 0.03, "throttle": 0.05, "error": 0.02},
}
MNS_FAULTS = {
    "ReceiveMessage": {"delay": 0.03, "reset": 0.03, "throttle": 0.03, "error": 0.02, "drop": 0.01},
    "*": {"drop": 0.05, "delay": 0.03, "reset": 0.03, "throttle": 0.03, "error": 0.02},
}


# ------------------------------------------------------------------------------ tools
def schedule(name: str, faults: dict[str, dict[str, float]]) -> Schedule:
    return Schedule(f"{SEED}:{name}", {} if HONEST else faults)


def faketime_env(offset_seconds: int) -> dict[str, str]:
    """Environment that runs a process with its wall clock `offset_seconds` ahead (libfaketime,
    preloaded into the daemon itself, not through the `faketime` wrapper, which forks: a SIGKILL
    meant for the daemon would kill only the wrapper). CLOCK_MONOTONIC is shifted by the same
    constant, which changes no interval; FAKETIME_DONT_FAKE_MONOTONIC would break Python's
    time.sleep (clock_nanosleep answers EINVAL)."""
    import sysconfig

    lib = Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "") / "faketime" / "libfaketimeMT.so.1"
    if not lib.is_file():
        pytest.fail(
            f"faketime is not installed (no {lib}): `apt-get install faketime` (Debian's package; .ci/run "
            "installs it), needed to run one fleet member with its clock off",
            pytrace=False,
        )
    return {"LD_PRELOAD": str(lib), "FAKETIME": f"+{offset_seconds}s"}


class ReceiveCounts:
    """An observer for the SQS proxy: the highest ApproximateReceiveCount SQS reported per
    message, and which request each message carries (from the SNS envelope)."""

    def __init__(self) -> None:
        self.by_message: dict[str, int] = {}
        self.request_of: dict[str, str] = {}
        self.dropped_nonempty = 0  # receive answers with messages that the proxy dropped or stalled

    def __call__(self, exchange: Exchange, request: bytes, response: bytes) -> None:
        if exchange.operation != "ReceiveMessage" or exchange.status != 200:
            return
        messages = json.loads(response).get("Messages", [])
        if messages and exchange.fault in ("drop", "stall"):
            self.dropped_nonempty += 1
        for m in messages:
            count = int(m.get("Attributes", {}).get("ApproximateReceiveCount", 0))
            self.by_message[m["MessageId"]] = max(count, self.by_message.get(m["MessageId"], 0))
            try:
                self.request_of[m["MessageId"]] = json.loads(json.loads(m["Body"])["Message"])["RequestId"]
            except (ValueError, KeyError, TypeError):
                pass

    def per_request(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for mid, count in self.by_message.items():
            rid = self.request_of.get(mid)
            if rid:
                out[rid] = max(count, out.get(rid, 0))
        return out


def percentile(values: list[int], p: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


class ProxiedStack(Stack):
    """A stack whose ResponseURLs are presigned for the S3 proxy's address, so the daemon's PUTs
    go through it (the signature covers the Host the proxy passes on unchanged)."""

    def __init__(self, provider: Provider, s3_endpoint: str):
        super().__init__(provider)
        self._presigner = boto3.client(
            "s3",
            endpoint_url=s3_endpoint,
            region_name=REGION,
            aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}),
        )

    def response_url(self, key: str, bucket: str | None = None) -> str:
        return self._presigner.generate_presigned_url(
            "put_object", Params={"Bucket": bucket or self.provider.bucket, "Key": key}, ExpiresIn=self.url_expires_in
        )


HOLDING = ("answered", "lost-claim", "replayed", "released", "interrupted")  # outcomes of a message that held the claim


def log_evidence(daemons: list[SubprocessDaemon]) -> tuple[Counter, Counter, dict[str, int]]:
    """(request outcomes, warning/error events, defers against the member's own claim).

    A member defers against its own claim (`in-progress-elsewhere` naming its own owner id) in
    two cases: both copies of a request reached it and the second met the first's live claim
    (right), or its claim was applied but the answer lost, and botocore's retry of it failed
    against the first attempt, so nothing of this member holds the claim it wrote ("orphaned":
    no message of this member for that request ever held it)."""
    outcomes: Counter = Counter()
    events: Counter = Counter()
    own = {"all": 0, "orphaned": 0}
    for daemon in daemons:
        owner = None
        held: set[str] = set()
        own_defers: list[str] = []
        for e in daemon.events():
            name = e.get("event")
            if name == "started":
                owner = e.get("owner")
            if name == "request":
                outcomes[e.get("outcome", "?")] += 1
                if e.get("outcome") in HOLDING:
                    held.add(e.get("request_id"))
                if e.get("outcome") == "in-progress-elsewhere" and owner and e.get("owner") == owner:
                    own_defers.append(e.get("request_id"))
            if e.get("level") in ("warning", "error", "critical"):
                events[name] += 1
        own["all"] += len(own_defers)
        own["orphaned"] += sum(1 for rid in own_defers if rid not in held)
    return outcomes, events, own


def first_answer_times(s3: Any, bucket: str, prefix: str) -> dict[str, float]:
    """key -> epoch seconds of its first version (when the first answer reached S3)."""
    out: dict[str, float] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            t = v["LastModified"].timestamp()
            out[v["Key"]] = min(t, out.get(v["Key"], t))
    return out


def drain_dead_letters(sqs: Any, dlq_url: str) -> list[str]:
    """The RequestIds of every message in the dead-letter queue (read after the members stopped)."""
    found: list[str] = []
    for _ in range(100):
        resp = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=600, WaitTimeSeconds=0)
        messages = resp.get("Messages", [])
        if not messages:
            break
        for m in messages:
            try:
                found.append(json.loads(json.loads(m["Body"])["Message"])["RequestId"])
            except (ValueError, KeyError, TypeError):
                found.append(f"unparsed:{m['MessageId']}")
    return found


def redrive_budget(sqs: Any, queue_url: str) -> int:
    policy = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
    return int(json.loads(policy["RedrivePolicy"])["maxReceiveCount"])


# ------------------------------------------------------------------------------ the proxy itself
def test_fault_proxy_lies_as_scheduled(dynalite: Dynalite, emulator: Emulator) -> None:
    """Each fault does what the suite relies on: a dropped write is applied though the client saw a
    reset; a reset or throttled one is not; throttles parse as each service's throttling code."""
    dynalite.create_table("proxy-check")
    table = "proxy-check"
    with FaultProxy("dynamodb", dynalite.port, Schedule(SEED)) as proxy:
        ddb = boto3.client(
            "dynamodb",
            endpoint_url=proxy.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}, read_timeout=2),
        )
        direct = dynalite.client()

        def put(fault: str, pk: str) -> Exception | None:
            proxy.schedule = Schedule(SEED, {"PutItem": {fault: 1.0}}, delay_range=(0.5, 0.5), stall_seconds=8)
            try:
                ddb.put_item(TableName=table, Item={"pk": {"S": pk}})
            except Exception as exc:  # noqa: BLE001 - what the client sees is the point
                return exc
            return None

        def stored(pk: str) -> bool:
            return "Item" in direct.get_item(TableName=table, Key={"pk": {"S": pk}}, ConsistentRead=True)

        assert put("drop", "dropped") is not None and stored("dropped"), "a dropped answer's write must be applied"
        began = time.monotonic()
        assert put("stall", "stalled") is not None and stored("stalled")  # the client's 2 s read timeout fired
        assert time.monotonic() - began < 7, "the client's own read timeout, not the proxy's reset, ended a stall"
        assert put("reset", "reset") is not None and not stored("reset")
        error = put("throttle", "throttled")
        assert (
            isinstance(error, ClientError)
            and error.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
            and not stored("throttled")
        )
        error = put("error", "failed")
        assert isinstance(error, ClientError) and error.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        began = time.monotonic()
        assert put("delay", "delayed") is None and stored("delayed") and time.monotonic() - began >= 0.5
        assert proxy.faults() == Counter({"drop": 1, "stall": 1, "reset": 1, "throttle": 1, "error": 1, "delay": 1})

    queue = emulator.client("sqs").create_queue(QueueName=f"proxy-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    with FaultProxy("sqs", int(emulator.endpoint.rsplit(":", 1)[1]), Schedule(SEED, {"*": {"throttle": 1.0}})) as proxy:
        sqs = boto3.client(
            "sqs",
            endpoint_url=proxy.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )
        codes = set()
        for _ in range(2):
            with pytest.raises(ClientError) as caught:
                sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)
            codes.add(caught.value.response["Error"]["Code"])
        assert codes == {"ThrottlingException", "RequestThrottled"}  # both names SQS uses, both retryable


# ------------------------------------------------------------------------------ the SQS fleet
@pytest.fixture
def lying_fleet(emulator: Emulator, dynalite: Dynalite, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Queue + DLQ from bootstrap (its maxReceiveCount), a versioned bucket, the table on dynalite,
    and a fault proxy in front of each of DynamoDB, SQS and S3."""
    name = f"lies-{uuid.uuid4().hex[:8]}"
    outcome = Bootstrap(boto3.Session(region_name=REGION), name=name, visibility_timeout=VISIBILITY).run()
    table = f"{name}-state"
    dynalite.create_table(table)
    s3 = emulator.client("s3")
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    provider = Provider(emulator, name, outcome.topic_arn, outcome.queue_url, name, outcome.dlq_url)
    moto_port = int(emulator.endpoint.rsplit(":", 1)[1])
    receives = ReceiveCounts()
    proxies = {
        "dynamodb": FaultProxy("dynamodb", dynalite.port, schedule("dynamodb", DYNAMODB_FAULTS)),
        "sqs": FaultProxy("sqs", moto_port, schedule("sqs", SQS_FAULTS), observe=receives),
        "s3": FaultProxy("s3", moto_port, schedule("s3", S3_FAULTS)),
    }
    for proxy in proxies.values():
        proxy.start()
    try:
        yield {"provider": provider, "table": table, "proxies": proxies, "receives": receives}
    finally:
        for proxy in proxies.values():
            proxy.stop()


def test_fleet_answers_every_request_once_while_the_network_lies(
    lying_fleet: dict[str, Any], emulator: Emulator, tmp_path: Path, calls_file: Path, figures: Figures
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    provider: Provider = lying_fleet["provider"]
    proxies: dict[str, FaultProxy] = lying_fleet["proxies"]
    receives: ReceiveCounts = lying_fleet["receives"]
    skew_env = faketime_env(SKEW_SECONDS)
    s3, sqs = emulator.client("s3"), emulator.client("sqs")
    budget = redrive_budget(sqs, provider.queue_url)
    stack = ProxiedStack(provider, proxies["s3"].url)
    prefix = f"{stack.name}/"

    env = {
        "AWS_ENDPOINT_URL_SQS": proxies["sqs"].url,
        "AWS_ENDPOINT_URL_DYNAMODB": proxies["dynamodb"].url,
        "CFN_TEST_CALLS_FILE": str(calls_file),
    }
    members: list[SubprocessDaemon] = []
    generation: Counter = Counter()

    ahead: list[float] = []

    def start(slot: int) -> SubprocessDaemon:
        generation[slot] += 1
        before = time.time()
        daemon = fleet_member(
            emulator,
            provider,
            lying_fleet["table"],
            tmp_path / f"m{slot}-g{generation[slot]}.log",
            extra_args=[
                "--handler",
                HANDLER,
                "--allow-response-url",
                proxies["s3"].url + "/",
                "--visibility-timeout",
                str(VISIBILITY),
                "--concurrency",
                CONCURRENCY,
            ],
            env={**env, **(skew_env if slot == FLEET - 1 else {})},
        )
        members.append(daemon)
        daemon.start()
        if slot == FLEET - 1:
            ahead.append(clock_ahead(daemon, before))
        return daemon

    requests = [
        stack.request(
            "Create",
            f"R{i:04d}",
            resource_type=RESOURCE_TYPE,
            properties={"SleepSeconds": f"{rng.uniform(0.05, 0.5):.3f}", "ServiceTimeout": str(SERVICE_TIMEOUT)},
            request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        )
        for i in range(REQUESTS)
    ]
    by_key = {key_of(r["ResponseURL"])[1]: r for r in requests}
    by_rid = {r["RequestId"]: r for r in requests}
    published_at = time.time()  # no earlier than any SNS Timestamp: deadlines measured from it are never late
    publish_all(stack, [r for r in requests for _ in range(2)])  # every request twice, back to back

    running = {slot: start(slot) for slot in range(FLEET)}
    assert ahead[0] >= SKEW_SECONDS - 1, f"faketime did not put the member's clock ahead ({ahead[0]:.1f} s)"
    try:
        # ---- the kills: a seeded member, at a seeded moment; it is restarted at once
        kills = 0
        for _ in range(KILLS):
            time.sleep(rng.uniform(*KILL_GAP))
            slot = rng.randrange(FLEET)
            running[slot].kill()
            kills += 1
            running[slot] = start(slot)

        def settled() -> bool:
            return len(first_answer_times(s3, provider.bucket, prefix)) >= REQUESTS and queue_counts(
                sqs, provider.queue_url
            ) == (0, 0)

        try:
            wait_until(settled, SETTLE, "every request answered and the queue empty")
        except AssertionError:
            pass  # measured below: lost requests are a figure, and the assertion names them
        for daemon in running.values():
            daemon.signal(signal.SIGTERM)
        exits = [daemon.wait(60) for daemon in running.values()]
    finally:
        for daemon in members:
            daemon.stop()

    # ---- what reached S3
    bodies = bodies_by_key(s3, provider.bucket, prefix)
    answered = {by_key[k]["RequestId"] for k in bodies if k in by_key}
    lost = sorted(set(by_rid) - answered)
    conflicting = sorted(by_key[k]["RequestId"] for k, bs in bodies.items() if len(set(bs)) > 1)
    duplicate_puts = sum(len(bs) - 1 for bs in bodies.values())
    finals = {by_key[k]["RequestId"]: json.loads(bs[-1]) for k, bs in bodies.items() if k in by_key}
    not_success = sorted(rid for rid, doc in finals.items() if doc.get("Status") != "SUCCESS")
    answered_at = first_answer_times(s3, provider.bucket, prefix)
    late = sorted(
        by_key[k]["RequestId"] for k, t in answered_at.items() if k in by_key and t > published_at + SERVICE_TIMEOUT
    )

    # ---- the dead-letter queue (members stopped: nothing else reads it now)
    dlq_counts = queue_counts(sqs, provider.dlq_url)
    dead = drain_dead_letters(sqs, provider.dlq_url)
    failed_from_dlq = {
        rid
        for rid, doc in finals.items()
        if doc.get("Status") == "FAILED" and re.search(r"dead.?letter", doc.get("Reason", ""), re.I)
    }
    dead_lettered = sorted(set(dead) | failed_from_dlq)

    # ---- handler runs, receives, log evidence
    completions = Counter(line.split(" ", 1)[0] for line in recorded_calls(calls_file))
    reruns = sum(n - 1 for n in completions.values() if n > 1)
    per_request = receives.per_request()
    counts = [per_request.get(rid, 0) for rid in by_rid]
    outcomes, warnings, own_defers = log_evidence(members)

    figures.set("seed", SEED)
    figures.set("network", "honest (CFN_CHAOS_HONEST_NETWORK=1)" if HONEST else "lying")
    figures.set("requests", REQUESTS)
    figures.set("published_copies", 2 * REQUESTS)
    figures.set("members", FLEET)
    figures.set("clock_skew_s", SKEW_SECONDS)
    figures.set("skewed_member_clock_ahead_s", round(min(ahead), 1))
    figures.set("visibility_timeout_s", VISIBILITY)
    figures.set("max_receive_count", budget)
    figures.set("kills", kills)
    figures.set("lost", len(lost))
    figures.set("dead_lettered", len(dead_lettered))
    figures.set("dead_lettered_unanswered", len(set(dead_lettered) - answered))
    figures.set("dlq_messages", dlq_counts[0] + dlq_counts[1])
    figures.set("conflicting_bodies", len(conflicting))
    figures.set("duplicate_puts", duplicate_puts)
    figures.set("handler_reruns", reruns)
    figures.set("late_answers", len(late))
    figures.set("answered_not_success", len(not_success))
    figures.set("receive_count_max", max(counts, default=0))
    figures.set("receive_count_p99", percentile(counts, 99))
    figures.set("receive_answers_dropped_with_messages", receives.dropped_nonempty)
    for service, proxy in proxies.items():
        figures.set(f"faults_{service}", dict(sorted((f, n) for f, n in proxy.faults().items() if f != "pass")))
        figures.set(f"calls_{service}", len(proxy.snapshot()))
    figures.set("outcomes", dict(sorted(outcomes.items())))
    figures.set("defers_against_own_claim", own_defers["all"])
    figures.set("defers_against_own_orphaned_claim", own_defers["orphaned"])
    figures.set("log_warnings_errors", dict(warnings.most_common(12)))
    figures.set("seconds", round(time.monotonic() - began, 1))

    print(
        f"\nnetwork lies: {REQUESTS} requests x2, {FLEET} members, {kills} kills: lost {len(lost)}, "
        f"dead-lettered {len(dead_lettered)}, conflicting {len(conflicting)}, late {len(late)}, "
        f"duplicate PUTs {duplicate_puts}, re-runs {reruns}, receives max {max(counts, default=0)} "
        f"(budget {budget}); outcomes {dict(outcomes)}; events {dict(warnings.most_common(8))}"
    )
    problems = []
    if lost:
        problems.append(f"{len(lost)} request(s) never answered: {lost[:5]}")
    if dead_lettered:
        problems.append(
            f"{len(dead_lettered)} request(s) dead-lettered (maxReceiveCount {budget}): {dead_lettered[:5]}"
        )
    if conflicting:
        problems.append(f"{len(conflicting)} request(s) answered with two different bodies: {conflicting[:5]}")
    if late:
        problems.append(f"{len(late)} request(s) answered after their deadline: {late[:5]}")
    if not_success:
        problems.append(
            f"{len(not_success)} request(s) answered other than SUCCESS: "
            + "; ".join(f"{rid}: {finals[rid].get('Reason', '')[:120]}" for rid in not_success[:3])
        )
    if any(code != 0 for code in exits):
        problems.append(f"members exited {exits} after SIGTERM")
    assert not problems, "\n".join(problems) + (
        f"\noutcomes {dict(outcomes)}; defers against own claim {own_defers}; "
        f"warnings/errors {dict(warnings.most_common(8))}"
    )


def clock_ahead(daemon: SubprocessDaemon, started_before: float) -> float:
    """At least how far ahead `daemon`'s clock runs: its `started` line's timestamp against this
    process's clock just before it was started."""
    import datetime as dt

    started = next(e for e in daemon.events() if e.get("event") == "started")
    when = dt.datetime.fromisoformat(str(started["timestamp"]).replace("Z", "+00:00"))
    return when.timestamp() - started_before


# ------------------------------------------------------------------------------ the MNS leg
MNS_REQUESTS = scale(12, 60)
MNS_MEMBERS = 2
MNS_KILLS = scale(0, 2)
MNS_VISIBILITY = scale(20, 30)
MNS_SETTLE = scale(60, 180)


def test_mns_leg_answers_every_ros_request_once_while_the_network_lies(
    dynalite: Dynalite, tmp_path: Path, calls_file: Path, figures: Figures
) -> None:
    """The same lies on the ROS path: MNS (tests/support/mns_server.py) and the ROS response
    endpoint (tests/support/stub_s3.py, which ROS answers are POSTed to) behind fault proxies, the
    fleet's table on dynalite behind one too; two members, every request sent twice. The local MNS
    server has no dead-letter queue: the receive counts say how close a request came to one."""
    began = time.monotonic()
    rng = random.Random(f"{SEED}:mns")
    table = f"mns-lies-{uuid.uuid4().hex[:8]}"
    dynalite.create_table(table)
    with MnsServer() as mns, StubS3() as ros:
        mns.create_queue(ROS_QUEUE, visibility_timeout=MNS_VISIBILITY)
        proxies = {
            "mns": FaultProxy("mns", mns.port, schedule("mns", MNS_FAULTS)),
            "dynamodb": FaultProxy("dynamodb", dynalite.port, schedule("mns-ddb", DYNAMODB_FAULTS)),
            "ros": FaultProxy("s3", ros.port, schedule("ros", S3_FAULTS)),
        }
        for proxy in proxies.values():
            proxy.start()
        members: list[SubprocessDaemon] = []
        try:
            env = {
                **os.environ,
                **mns.env(),
                **TEST_CREDENTIALS,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL_DYNAMODB": proxies["dynamodb"].url,
                "PYTHONPATH": str(REPO),
                "CFN_TEST_CALLS_FILE": str(calls_file),
            }
            args = [
                sys.executable,
                "-m",
                "cfn_provider",
                "run",
                "--transport",
                "mns",
                "--mns-endpoint",
                proxies["mns"].url,
                "--mns-queue",
                ROS_QUEUE,
                "--mns-allow-http",
                "--handler",
                HANDLER,
                "--allow-response-url",
                proxies["ros"].url + "/",
                "--state",
                f"dynamodb://{table}",
                "--visibility-timeout",
                str(MNS_VISIBILITY),
                "--concurrency",
                CONCURRENCY,
                "--wait-seconds",
                "1",
                "--max-backoff",
                "1",
                "--log-format",
                "json",
            ]
            generation: Counter = Counter()

            def start(slot: int) -> SubprocessDaemon:
                generation[slot] += 1
                daemon = SubprocessDaemon(args, env, tmp_path / f"mns{slot}-g{generation[slot]}.log")
                members.append(daemon)
                return daemon.start()

            requests = []
            for i in range(MNS_REQUESTS):
                url = ros.url(f"mns/R{i:03d}").replace(ros.base_url, proxies["ros"].url + "/", 1)
                requests.append(
                    ros_request(
                        "Create",
                        url,
                        logical=f"R{i:03d}",
                        rtype=RESOURCE_TYPE,
                        props={"SleepSeconds": f"{rng.uniform(0.05, 0.5):.3f}", "Timeout": "300"},
                        request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper(),
                    )
                )
            sent_at = time.time()
            for request in requests:
                mns.send(ROS_QUEUE, json.dumps(request))
                mns.send(ROS_QUEUE, json.dumps(request))
            running = {slot: start(slot) for slot in range(MNS_MEMBERS)}
            kills = 0
            for _ in range(MNS_KILLS):
                time.sleep(rng.uniform(*KILL_GAP))
                slot = rng.randrange(MNS_MEMBERS)
                running[slot].kill()
                kills += 1
                running[slot] = start(slot)
            keys = {f"mns/R{i:03d}": r for i, r in enumerate(requests)}
            try:
                wait_until(
                    lambda: all(ros.bodies(k, "POST") for k in keys) and not mns.queue(ROS_QUEUE).live,
                    MNS_SETTLE,
                    "every ROS request answered and the MNS queue empty",
                )
            except AssertionError:
                pass  # measured below
            for daemon in running.values():
                daemon.signal(signal.SIGTERM)
            exits = [daemon.wait(60) for daemon in running.values()]
        finally:
            for daemon in members:
                daemon.stop()
            for proxy in proxies.values():
                proxy.stop()

        answers = {k: ros.bodies(k, "POST") for k in keys}
        lost = sorted(keys[k]["RequestId"] for k, bs in answers.items() if not bs)
        conflicting = sorted(keys[k]["RequestId"] for k, bs in answers.items() if len(set(bs)) > 1)
        duplicate_posts = sum(max(0, len(bs) - 1) for bs in answers.values())
        not_success = sorted(
            keys[k]["RequestId"] for k, bs in answers.items() if bs and json.loads(bs[-1]).get("Status") != "SUCCESS"
        )
        late = sorted(
            keys[k]["RequestId"]
            for k in keys
            if any(r.ok and r.received_at > sent_at + 300 for r in ros.requests_for(k, "POST")[:1])
        )
        dequeues: dict[str, int] = defaultdict(int)
        for m in mns.queue(ROS_QUEUE).messages:
            rid = json.loads(m.body)["RequestId"]
            dequeues[rid] = max(dequeues[rid], m.dequeue_count)
        left_on_queue = len(mns.queue(ROS_QUEUE).live)
    completions = Counter(line.split(" ", 1)[0] for line in recorded_calls(calls_file))
    reruns = sum(n - 1 for n in completions.values() if n > 1)
    counts = [dequeues.get(r["RequestId"], 0) for r in requests]
    outcomes, warnings, own_defers = log_evidence(members)

    figures.set("mns.requests", MNS_REQUESTS)
    figures.set("mns.members", MNS_MEMBERS)
    figures.set("mns.kills", kills)
    figures.set("mns.lost", len(lost))
    figures.set("mns.left_on_queue", left_on_queue)
    figures.set("mns.conflicting_bodies", len(conflicting))
    figures.set("mns.duplicate_posts", duplicate_posts)
    figures.set("mns.handler_reruns", reruns)
    figures.set("mns.late_answers", len(late))
    figures.set("mns.answered_not_success", len(not_success))
    figures.set("mns.receive_count_max", max(counts, default=0))
    figures.set("mns.receive_count_p99", percentile(counts, 99))
    for service, proxy in proxies.items():
        figures.set(f"mns.faults_{service}", dict(sorted((f, n) for f, n in proxy.faults().items() if f != "pass")))
    figures.set("mns.outcomes", dict(sorted(outcomes.items())))
    figures.set("mns.defers_against_own_claim", own_defers["all"])
    figures.set("mns.defers_against_own_orphaned_claim", own_defers["orphaned"])
    figures.set("mns.log_warnings_errors", dict(warnings.most_common(12)))
    figures.set("mns.seconds", round(time.monotonic() - began, 1))

    problems = []
    if lost:
        problems.append(f"{len(lost)} ROS request(s) never answered: {lost[:5]}")
    if conflicting:
        problems.append(f"{len(conflicting)} ROS request(s) answered with two different bodies: {conflicting[:5]}")
    if late:
        problems.append(f"{len(late)} ROS request(s) answered after their deadline: {late[:5]}")
    if not_success:
        problems.append(f"{len(not_success)} ROS request(s) answered other than SUCCESS: {not_success[:5]}")
    if any(code != 0 for code in exits):
        problems.append(f"members exited {exits} after SIGTERM")
    assert not problems, "\n".join(problems) + (
        f"\noutcomes {dict(outcomes)}; defers against own claim {own_defers}; "
        f"warnings/errors {dict(warnings.most_common(8))}"
    )

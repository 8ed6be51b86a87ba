"""Crash chaos: a daemon SIGKILLed again and again in the middle of a burst loses nothing.

One subprocess daemon at a time (`python -m cfn_provider run`, SQLite store shared by all of them)
serves a burst of requests whose handler sleeps 50-500 ms and appends one line per completed
call to a file. The daemon is SIGKILLed at random moments and restarted each time; a last one
is left to finish and is stopped with SIGTERM. Afterwards:

- every request has a response object in the bucket (none lost);
- no request has two different bodies (the bucket is versioned, and the handler puts a fresh
  nonce in Data on every run, so a re-run whose answer reached S3 next to an earlier one shows);
- each request's handler completed once, except where a kill landed between the handler's
  return and the store's write of its answer (the design's one re-run window). A duplicate is
  counted as that window only when, at the kill, the store still held that daemon's CLAIMED
  record for the request (no body stored) and the killed daemon's log has no `request` line
  answering it; any other duplicate is unexplained and fails the suite.

Real moto SNS -> SQS, real presigned S3 URLs, real SIGKILL. Sizes: `scale(reduced, full)`;
the kill schedule and handler durations come from a seeded RNG (CFN_CHAOS_SEED overrides it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.local.emulator import Provider, Stack, key_of
from tests.chaos.conftest import scale
from tests.support.aws import answered_keys, bodies_by_key, publish_all, queue_counts
from tests.support.daemons import SubprocessDaemon, recorded_calls

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("CFN_CHAOS_SEED", "20240611"))
REQUESTS = scale(40, 300)
KILLS = scale(3, 10)
CONCURRENCY = str(scale(4, 8))  # few enough that the burst outlasts the kills, so every kill lands mid-burst
VISIBILITY = "5"  # seconds (the minimum): a killed daemon's messages and leases come back quickly
LIFETIME = (0.4, 2.0)  # seconds a daemon serves before its SIGKILL (uniform, seeded)
RESOURCE_TYPE = "Custom::Chaos"
HANDLER = f"{RESOURCE_TYPE}=tests.support.handlers:stamped"


# ------------------------------------------------------------------------- fixtures
@pytest.fixture
def daemon_args() -> tuple[str, ...]:
    """Every daemon the shared `spawn` fixture starts here: the stamped handler, a short visibility timeout."""
    return ("--handler", HANDLER, "--visibility-timeout", VISIBILITY, "--concurrency", CONCURRENCY)


# ------------------------------------------------------------------------- helpers
@dataclass
class Generation:
    """One daemon's life: from its start to its SIGKILL (or, for the last, its SIGTERM)."""

    name: str
    daemon: SubprocessDaemon
    owner: str
    killed: bool = False
    calls_end: int = 0  # lines in the calls file when it was gone (later lines are not its)
    store_at_end: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # key -> (state, owner)
    answered_before_end: int = 0


def store_snapshot(db_path: Path) -> dict[str, tuple[str, str | None]]:
    """key -> (state, owner) of the idempotency store, read while no daemon is running."""
    if not db_path.exists():
        return {}
    db = sqlite3.connect(db_path, timeout=30)
    try:
        return {key: (state, owner) for key, state, owner in db.execute("SELECT key, state, owner FROM records")}
    except sqlite3.OperationalError:  # the first daemon died before creating the table
        return {}
    finally:
        db.close()


def wait_until(predicate: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.2)


# ------------------------------------------------------------------------- the suite
def test_sigkill_chaos_loses_nothing_and_reruns_only_in_the_window(
    spawn, stack: Stack, provider: Provider, calls_file: Path, tmp_path: Path, figures
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    figures.set("seed", SEED)
    s3, sqs = provider.emulator.client("s3"), provider.emulator.client("sqs")
    s3.put_bucket_versioning(Bucket=provider.bucket, VersioningConfiguration={"Status": "Enabled"})
    prefix = f"{stack.name}/"
    db_path = tmp_path / "state.db"

    requests = [
        stack.request(
            "Create",
            f"R{i:04d}",
            resource_type=RESOURCE_TYPE,
            properties={"SleepSeconds": f"{rng.uniform(0.05, 0.5):.3f}"},
            request_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        )
        for i in range(REQUESTS)
    ]
    by_key = {key_of(r["ResponseURL"])[1]: r for r in requests}
    by_rid = {r["RequestId"]: r for r in requests}
    publish_all(stack, requests)

    # ---- the kills: each daemon serves for a random moment, then SIGKILL; the next starts at once
    generations: list[Generation] = []
    for k in range(KILLS):
        daemon = spawn(f"gen{k:02d}")
        owner = next(e["owner"] for e in daemon.events() if e.get("event") == "started")
        gen = Generation(f"gen{k:02d}", daemon, owner)
        generations.append(gen)
        time.sleep(rng.uniform(*LIFETIME))
        gen.answered_before_end = len(answered_keys(s3, provider.bucket, prefix))
        daemon.kill()
        gen.killed = True
        gen.calls_end = len(recorded_calls(calls_file))
        gen.store_at_end = store_snapshot(db_path)

    # ---- the last daemon finishes the burst and stops gracefully
    last = spawn("last")
    final = Generation("last", last, next(e["owner"] for e in last.events() if e.get("event") == "started"))
    generations.append(final)
    wait_until(lambda: len(answered_keys(s3, provider.bucket, prefix)) >= REQUESTS, scale(60, 120))
    drained = wait_until(lambda: queue_counts(sqs, provider.queue_url) == (0, 0), 30)
    last.signal(signal.SIGTERM)
    try:
        last_exit = last.wait(40)
    except Exception:  # subprocess.TimeoutExpired
        last_exit = None
    final.calls_end = len(recorded_calls(calls_file))

    # ---- what reached S3
    bodies = bodies_by_key(s3, provider.bucket, prefix)
    answered = {by_key[k]["RequestId"] for k in bodies if k in by_key}
    lost = sorted(set(by_rid) - answered)
    conflicting = sorted(by_key[k]["RequestId"] for k, bs in bodies.items() if len(set(bs)) > 1)
    resent_same = sum(1 for bs in bodies.values() if len(bs) > 1 and len(set(bs)) == 1)
    not_success = sorted(
        by_key[k]["RequestId"] for k, bs in bodies.items() if json.loads(bs[-1]).get("Status") != "SUCCESS"
    )

    # ---- who completed the handler, when
    lines = recorded_calls(calls_file)
    completions: dict[str, list[int]] = defaultdict(list)  # request id -> generation index per completion
    start = 0
    for index, gen in enumerate(generations):
        for line in lines[start : gen.calls_end]:
            rid = line.split(" ", 1)[0]
            completions[rid].append(index)
        start = gen.calls_end
    never_completed = sorted(rid for rid in answered if not completions.get(rid))

    def answered_in_log(gen: Generation, rid: str) -> bool:
        return any(
            e.get("event") == "request"
            and e.get("request_id") == rid
            and e.get("outcome") in ("answered", "replayed", "duplicate")
            for e in gen.daemon.events()
        )

    def in_kill_window(index: int, rid: str) -> bool:
        """The kill of generation `index` landed after its handler returned and before the store
        write: its claim was still CLAIMED (no body) and it never logged an answer."""
        gen = generations[index]
        key = by_rid[rid]["StackId"], rid
        record = gen.store_at_end.get(json.dumps(list(key)))
        return gen.killed and record == ("CLAIMED", gen.owner) and not answered_in_log(gen, rid)

    window_hits = sum(1 for rid, gens in completions.items() for g in gens if in_kill_window(g, rid))
    duplicates = {rid: gens for rid, gens in completions.items() if len(gens) > 1}
    explained: dict[str, list[int]] = {}
    unexplained: dict[str, list[int]] = {}
    for rid, gens in duplicates.items():
        earlier = gens[:-1]
        ok = len(set(gens)) == len(gens) and all(in_kill_window(g, rid) for g in earlier)
        (explained if ok else unexplained)[rid] = gens
    extra_completions = sum(len(g) - 1 for g in duplicates.values())

    figures.set("requests", REQUESTS)
    figures.set("kills", sum(1 for g in generations if g.killed))
    figures.set("kills_mid_burst", sum(1 for g in generations if g.killed and g.answered_before_end < REQUESTS))
    figures.set("lost", len(lost))
    figures.set("conflicting_bodies", len(conflicting))
    figures.set("duplicate_completions", extra_completions)
    figures.set("duplicates_in_kill_window", sum(len(g) - 1 for g in explained.values()))
    figures.set("duplicates_unexplained", sum(len(g) - 1 for g in unexplained.values()))
    figures.set("kills_in_window", window_hits)
    figures.set("resent_same_body", resent_same)
    figures.set("seconds", round(time.monotonic() - began, 1))

    def who(gens: list[int]) -> str:
        return ",".join(generations[g].name for g in gens)

    assert not lost, f"{len(lost)} request(s) never answered: {lost[:10]}"
    assert not conflicting, f"{len(conflicting)} request(s) answered with two different bodies: {conflicting[:10]}"
    assert not unexplained, (
        "handler completed more than once outside the kill window (request id: completing daemons): "
        + "; ".join(f"{rid}: {who(g)}" for rid, g in list(unexplained.items())[:10])
    )
    assert not not_success, f"answered other than SUCCESS: {not_success[:10]}"
    assert not never_completed, f"answered without a completed handler call: {never_completed[:10]}"
    assert drained, f"messages left on the queue: {queue_counts(sqs, provider.queue_url)}"
    assert last_exit == 0, f"the last daemon exited {last_exit} after SIGTERM"

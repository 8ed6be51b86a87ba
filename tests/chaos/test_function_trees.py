"""Functions that leave processes behind, under load: a function that forks and crashes, and one
that hangs with children, among many quick calls, through the real path (SNS -> SQS -> daemon ->
function processes -> presigned S3 PUT).

Figures: late answers (after the request's deadline, or a crash answered as a timeout: seen only
at the deadline), unanswered requests, processes of the functions' trees left after their calls
and after the daemon's stop, the stop's duration. Every one of them but the last must be 0.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from cfn_provider.functions.settings import parse_options
from cfn_provider.local.emulator import Stack, key_of
from tests.chaos.conftest import scale
from tests.support.daemons import TEST_HANDLERS
from tests.support.functions import write_function

TREES = """
import os, subprocess, sys, time
import cfnresponse

def children(mark):
    # both hold the function's stderr (Popen's default; a bare fork holds every descriptor)
    sleeper = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \\
              "'import time; time.sleep(600)', sys.argv[1]]); time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", sleeper, mark])
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", mark])

def handler(event, context):
    props = event["ResourceProperties"]
    if props.get("How") == "crash":
        children(props["Mark"])
        time.sleep(0.2)
        os._exit(5)
    if props.get("How") == "hang":
        children(props["Mark"])
        while True:
            time.sleep(0.1)
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "quick-" + event["RequestId"][:8])
"""
pytestmark = pytest.mark.slow

KINDS = {"Custom::Quick": "quick", "Custom::ForkCrash": "crash", "Custom::HangKids": "hang"}
TIMEOUTS = {"quick": 60, "crash": 60, "hang": 10}  # ServiceTimeout, seconds


def marked(mark: str) -> set[int]:
    """Running processes whose command line carries `mark` (the functions' children)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if mark.encode() in (entry / "cmdline").read_bytes() and "State:\tZ" not in (entry / "status").read_text():
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def answered(stack: Stack, keys: dict[str, dict]) -> dict[str, float]:
    """The response keys the bucket holds now (one listing per call)."""
    s3 = stack.provider.emulator.client("s3")
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.provider.bucket):
        for item in page.get("Contents", []):
            if item["Key"] in keys:
                found[item["Key"]] = time.monotonic()
    return found


async def test_forking_crashes_and_hangs_with_children_under_load(run_daemon, stack: Stack, tmp_path, figures):
    mark = f"cfn-chaos-tree-{uuid.uuid4().hex}"
    folder = write_function(tmp_path / "trees", TREES)
    settings = [f"{t}=code={folder}" for t in KINDS] + ["Custom::Quick=concurrency=4", "Custom::HangKids=concurrency=2"]
    handlers = (*TEST_HANDLERS, *((t, "lambda:index.handler") for t in KINDS))
    daemon = await run_daemon(
        handlers=handlers,
        functions=parse_options(settings),
        concurrency=16,
        state=f"sqlite://{tmp_path}/state/state.db",
    )
    counts = {"quick": scale(24, 150), "crash": scale(4, 20), "hang": scale(2, 6)}
    requests = []
    for rtype, kind in KINDS.items():
        for i in range(counts[kind]):
            props = {"How": kind, "Mark": mark, "ServiceTimeout": str(TIMEOUTS[kind])}
            requests.append((kind, stack.request("Create", f"{kind}{i}", resource_type=rtype, properties=props)))
    requests.sort(key=lambda r: r[1]["RequestId"])  # interleaved
    keys = {key_of(req["ResponseURL"])[1]: {"kind": kind, "request": req} for kind, req in requests}
    for doc in keys.values():
        doc["published"] = time.monotonic()
        await asyncio.to_thread(stack.publish, doc["request"])
    arrived: dict[str, float] = {}
    limit = time.monotonic() + max(TIMEOUTS.values()) + 30
    while len(arrived) < len(keys) and time.monotonic() < limit:
        for key, at in (await asyncio.to_thread(answered, stack, keys)).items():
            arrived.setdefault(key, at)
        await asyncio.sleep(0.3)
    await asyncio.sleep(1.0)  # the last killed groups are reaped
    after_calls = marked(mark)

    late = crashes_at_deadline = 0
    for key, doc in keys.items():
        if key not in arrived:
            continue
        deadline = doc["published"] + TIMEOUTS[doc["kind"]]
        late += arrived[key] > deadline + 1.0  # the listing's granularity
        if doc["kind"] == "crash":
            body = await asyncio.to_thread(stack.response, doc["request"], 5)
            crashes_at_deadline += body is None or "timed out" in str(body.get("Reason"))
    started = time.monotonic()
    assert await daemon.stop(timeout=60) == 0
    stop_seconds = time.monotonic() - started
    deadline = time.monotonic() + 5
    while marked(mark) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    left = marked(mark)

    figures.set("requests", len(keys))
    figures.set("forking_crashes", counts["crash"])
    figures.set("hangs_with_children", counts["hang"])
    figures.set("unanswered", len(keys) - len(arrived))
    figures.set("late_answers", late)
    figures.set("crashes_answered_at_deadline", crashes_at_deadline)
    figures.set("leftover_processes_after_calls", len(after_calls))
    figures.set("leftover_processes_after_stop", len(left))
    figures.set("stop_seconds", round(stop_seconds, 2))
    assert (len(keys) - len(arrived), late, crashes_at_deadline) == (0, 0, 0)
    assert (after_calls, left) == (set(), set())
    assert stop_seconds < 15

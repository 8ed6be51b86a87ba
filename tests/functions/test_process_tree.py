"""A function's process tree lives and dies with its call, through the real path
(SNS -> SQS -> daemon -> function process -> presigned S3 PUT).

Its children inherit its stderr (as subprocess.Popen's do by default): its crash is still seen at
once (by the process, not its pipes), and a crash, a deadline kill or the daemon's stop kills its
whole process group.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cfn_provider.functions.settings import parse_options
from cfn_provider.local.emulator import Stack
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS
from tests.support.functions import load_folder, write_function

TREE = """
import os, subprocess, sys, time
import cfnresponse

SLEEPER = "import os, subprocess, sys, time\\n" \\
          "if sys.argv[1:] == ['parent']:\\n" \\
          "    c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\\n" \\
          "    print('grandchild', c.pid, file=sys.stderr, flush=True)\\n" \\
          "time.sleep(300)\\n"

def children():
    # both inherit the function's stderr (Popen's default), as a tool run by a function does
    child = subprocess.Popen([sys.executable, "-c", SLEEPER, "parent"])
    print("child", child.pid, flush=True)
    forked = os.fork()
    if forked == 0:   # a fork without exec holds every descriptor of the function
        time.sleep(300)
        os._exit(0)
    print("child", forked, flush=True)

def handler(event, context):
    how = event["ResourceProperties"].get("How")
    if how in ("crash", "hang", "linger"):
        children()
    if how == "crash":
        time.sleep(0.3)
        os._exit(3)
    if how == "hang":
        while True:
            time.sleep(0.1)
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Pid": os.getpid()}, "tree-" + str(how))
"""


@pytest.fixture(autouse=True)
def _region(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")


@pytest.fixture
def serve(run_daemon, tmp_path):
    async def start(**overrides):
        folder = write_function(tmp_path / "tree", TREE)
        functions = parse_options([f"Custom::Tree=code={folder}", "Custom::Tree=concurrency=1"])
        handlers = (*TEST_HANDLERS, ("Custom::Tree", "lambda:index.handler"))
        return await run_daemon(handlers=handlers, functions=functions, poll_interval=0.5, **overrides)

    return start


def pids_in(logs: list[dict]) -> set[int]:
    found = set()
    for entry in logs:
        match = re.fullmatch(r"(?:grand)?child (\d+)", str(entry.get("message", "")))
        if entry.get("event") == "function.output" and match:
            found.add(int(match.group(1)))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to read it has ended)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_crash_with_children_holding_its_stderr_fails_at_once_and_frees_its_slot(serve, stack: Stack):
    with capture_logs() as logs:
        await serve()
        crash = stack.request("Create", "Crash", resource_type="Custom::Tree", properties={"How": "crash"})
        started = time.monotonic()
        stack.publish(crash)
        resp = await response_of(stack, crash, timeout=60)
        took = time.monotonic() - started
        assert resp is not None and resp["Status"] == "FAILED", resp
        assert "its process exited with status 3" in resp["Reason"] and took < 15, (took, resp["Reason"])
        after = stack.request("Create", "After", resource_type="Custom::Tree")  # concurrency 1: the slot is free
        stack.publish(after)
        fine = await response_of(stack, after, timeout=15)
        assert fine is not None and fine["PhysicalResourceId"] == "tree-None"
        await until(lambda: len(pids_in(logs)) == 3, 5, "the function's children never said their pids")
    await until(lambda: not any(alive(p) for p in pids_in(logs)), 5, "the crashed function's children live on")


def group(pgid: int) -> set[int]:
    """The running processes of process group `pgid` (/proc/PID/stat's fifth field)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.add(int(entry.name))
    return found


def function_processes() -> set[int]:
    """The daemon's (this process's) function processes."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            status, cmdline = (entry / "status").read_text(), (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"\nPPid:\t{os.getpid()}\n" in status and b"runtime.py" in cmdline:
            found.add(int(entry.name))
    return found


@pytest.mark.slow
async def test_the_deadline_kills_the_whole_group_of_a_hung_function(serve, stack: Stack):
    await serve()
    before = function_processes()
    hung = stack.request(
        "Create", "Hung", resource_type="Custom::Tree", properties={"How": "hang", "ServiceTimeout": "12"}
    )
    stack.publish(hung)
    (leader,) = before  # concurrency 1: the warm process serves the call
    await until(
        lambda: len(group(leader)) == 4, 20, "the function never started its children"
    )  # it, 2 children, 1 grandchild
    tree = group(leader)
    resp = await response_of(stack, hung, timeout=30)
    assert resp is not None and resp["Status"] == "FAILED" and "timed out" in resp["Reason"], resp
    await until(lambda: not any(alive(p) for p in tree), 5, "children of the killed function live on")


async def test_the_daemons_stop_never_waits_on_a_functions_leftover_child(serve, stack: Stack):
    with capture_logs() as logs:
        daemon = await serve(grace_period=1.0)
        linger = stack.request("Create", "Linger", resource_type="Custom::Tree", properties={"How": "linger"})
        stack.publish(linger)
        resp = await response_of(stack, linger, timeout=30)
        assert resp is not None and resp["Status"] == "SUCCESS", resp
        await until(lambda: len(pids_in(logs)) == 3, 5, "the function's children never said their pids")
    tree = pids_in(logs)
    assert all(alive(p) for p in tree)  # still holding the function's stderr
    started = time.monotonic()
    assert await daemon.stop(timeout=30) == 0
    assert time.monotonic() - started < 10
    await until(lambda: not any(alive(p) for p in tree), 5, "the function's children outlive the daemon")
    assert os.getpgid(os.getpid())  # the test's own group was never signalled


async def test_a_function_starting_a_process_at_import_is_checked_at_once_and_leaves_nothing(tmp_path):
    """The start-up check imports the function in an interpreter of its own: a process the module
    starts at import (a sidecar holding its stderr) neither holds the check up nor outlives it."""
    mark = f"cfn-import-child-{uuid.uuid4().hex}"
    folder = write_function(
        tmp_path / "fn",
        f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{mark}"])
        def handler(event, context):
            pass
        """,
    )

    def running() -> set[int]:
        found = set()
        for entry in Path("/proc").iterdir():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.add(int(entry.name))
            except (OSError, ValueError):
                continue
        return found

    started = time.monotonic()
    await asyncio.to_thread(load_folder, folder)  # the router's check (a typo would stop the start here)
    assert time.monotonic() - started < 30
    await until(lambda: not running(), 5, "the process the function started at import outlives the check")

"""Sample a consumer process with py-spy (only samples holding the GIL: where its CPU goes).

`python -m bench --profile` attaches one to each daemon / limit-loop process of the burst
scenario; the raw stacks land next to the logs and the top frames are printed.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


class Spy:
    # 1000 samples a second: a 2,000-request round gives a daemon ~3,000 GIL samples, a stage's share
    # to within a few per cent (at 250 a second, ~160: each stage's figure was +- a quarter)
    def __init__(self, pid: int, out: Path, rate: int = 1000):
        self.out = out
        exe = py_spy()
        if exe is None:
            raise RuntimeError("py-spy is not installed: pip install -c constraints.txt -e '.[bench]'")
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--gil",
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> Path:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.out


LIBRARIES = {  # where CPU goes, by what the frame belongs to
    "aiobotocore/botocore (SQS calls)": ("aiobotocore/", "botocore/"),
    "aiohttp (HTTP client)": ("aiohttp/", "aiohappyeyeballs/", "yarl/", "multidict/"),
    "logging (structlog, logging)": ("structlog/", "logging/__init__", "cfn_provider/logs.py"),
    "retries (tenacity)": ("tenacity/",),
    "thread hand-offs (executor)": ("concurrent/futures/",),
    "idempotency store (sqlite)": ("cfn_provider/stores/sqlite.py",),
    "asyncio event loop": ("asyncio/",),
}


# Stages of a request, for setting the daemon's profile beside the durable floor's: a sample goes to the
# first stage any of whose markers is on its stack (so the log line a worker writes is the log line's,
# and the SQLite calls a store write makes are the store's). Markers match the daemon and bench loops alike.
STAGES = (
    ("store thread (fsynced bodies)", ("OwnerThread.",)),  # the loop's tick group is in sqlite_group.py too
    ("handler thread (sync handler)", ("concurrent/futures/thread.py",)),
    ("log line", ("structlog/", "cfn_provider/logs.py", "logging/__init__")),
    ("SQS receive", ("SqsQueue.receive ", "Poller._receive ", "Batches.receive ")),
    ("SQS delete", ("SqsQueue.delete_batch ", "Batches.delete ")),
    ("PUT", ("Responder.", "serve.<locals>.put ", "serve.<locals>.answer ")),
    (
        "SQLite on the loop (claim, SENT)",
        ("cfn_provider/stores/", "claim (bench/", "store_bodies (bench/", "mark_sent (bench/"),
    ),
    # admission parses the request inside its own frames; pipeline/request.py as a marker also caught every
    # read of a Request field anywhere in the pipeline (3x what admission costs alone)
    ("admission (unwrap, parse, URL checks)", ("pipeline/admission.py", "pipeline/envelope.py")),
    ("store calls (retry wrapper, settle)", ("pipeline/store_calls.py", "pipeline/retries.py")),
    ("handler call (runner, response)", ("pipeline/runner.py", "pipeline/response.py", "bench/handlers.py")),
    ("heartbeat", ("pipeline/heartbeat.py",)),
    ("worker (the rest)", ("pipeline/worker.py", "pipeline/outlets.py", "cfn_provider/metrics.py")),
    ("poller (task per message, dispose)", ("intake/poller.py", "pipeline/deletes.py")),
)
LOOP = "event loop and the rest"


def stages(raw: Path) -> dict[str, Any]:
    """From a py-spy raw file: the share of samples per stage (STAGES, then LOOP for the rest)."""
    counts: Counter = Counter()
    if raw.exists():
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            stage = next((name for name, markers in STAGES if any(m in stack for m in markers)), LOOP)
            counts[stage] += int(count)
    total = sum(counts.values())
    return {
        "samples": total,
        "shares": {name: counts[name] / total for name, _ in (*STAGES, (LOOP, ()))} if total else {},
    }


def _frame(frame: str) -> str:
    """'Worker.process (daemon/pipeline/worker.py:92)' -> 'Worker.process (daemon/pipeline/worker.py)'."""
    return re.sub(r":\d+\)$", ")", frame)


def top_frames(
    raw: Path, project: tuple[str, ...] = ("cfn_provider/", "daemon/", "bench/"), limit: int = 12
) -> dict[str, Any]:
    """From a py-spy raw (collapsed) file: the busiest functions of the project (inclusive), the
    busiest functions anywhere (self), and the share per library (inclusive)."""
    own: Counter = Counter()
    inclusive: Counter = Counter()
    libraries: Counter = Counter()
    total = 0
    if raw.exists():
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [_frame(f) for f in stack.split(";")]
            own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
            for name, parts in LIBRARIES.items():
                if any(p in f for f in frames for p in parts):
                    libraries[name] += n
    if not total:
        return {"samples": 0, "project": [], "self": [], "libraries": [], "stages": {}}
    entry = (
        "cfn_provider/cli.py",
        "cfn_provider/loops.py",
        "cfn_provider/__main__.py",
        "daemon/cli.py",
        "daemon/__main__.py",
        "<module>",
        "serve (bench/limit_loop.py)",
        "main (bench/",
    )
    picked = [
        (f, c) for f, c in inclusive.most_common() if any(p in f for p in project) and not any(e in f for e in entry)
    ]
    share = lambda c: round(100 * c / total, 1)  # noqa: E731
    return {
        "samples": total,
        "project": [(f, share(c)) for f, c in picked[:limit]],
        "self": [(f, share(c)) for f, c in own.most_common(limit)],
        "libraries": [(name, share(c)) for name, c in libraries.most_common()],
        "stages": stages(raw)["shares"],
    }

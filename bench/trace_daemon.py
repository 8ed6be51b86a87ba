"""`python -m bench.trace_daemon run ...`: the daemon, with a stopwatch around each stage of a message.

A diagnostic for `python -m bench --profile` (never used for the measured figures): it wraps
the daemon's own coroutines from outside (no daemon code changes) and writes, every second and
at exit, the wall-time distribution of each stage to $BENCH_TRACE_OUT as JSON:

    receive, claim / save_response / mark_sent (and, inside them, waiting for the store's thread
    vs the write itself), handler, PUT, delete, and the whole of Worker.process.

Stages it cannot find (the daemon changed) are skipped, not fatal.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from collections import defaultdict
from typing import Any

_samples: dict[str, list[float]] = defaultdict(list)
_lock = threading.Lock()


def _note(stage: str, started: float) -> None:
    with _lock:
        _samples[stage].append(1000 * (time.monotonic() - started))


def _wrap(owner: Any, name: str, stage: str) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    @functools.wraps(original)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return await original(*args, **kwargs)
        finally:
            _note(stage, started)

    setattr(owner, name, timed)


def _install() -> None:
    from cfn_provider.pipeline import responder, worker
    from cfn_provider.stores import sqlite as store
    from cfn_provider.transports import queue

    for name in ("claim", "save_response", "mark_sent"):
        _wrap(store.SQLiteStore, name, f"store.{name}")
    _wrap(queue.SqsQueue, "receive", "sqs.receive")
    _wrap(queue.SqsQueue, "delete", "sqs.delete")
    _wrap(responder.Responder, "send" if hasattr(responder.Responder, "send") else "put", "response PUT")
    _wrap(worker.Worker, "process", "Worker.process (receive to PUT done)")
    call = getattr(worker, "call", None)
    if call is not None:

        async def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return await call(*args, **kwargs)
            finally:
                _note("handler", started)

        worker.call = timed_call  # type: ignore[attr-defined]
    run = getattr(store.SQLiteStore, "_run", None)
    if run is not None:  # split each store call into waiting for its thread and the write itself

        async def timed_run(self: Any, fn: Any, *args: Any) -> Any:
            submitted, box = time.monotonic(), {}

            def inner(*a: Any) -> Any:
                box["start"] = time.monotonic()
                try:
                    return fn(*a)
                finally:
                    box["end"] = time.monotonic()

            try:
                return await run(self, inner, *args)
            finally:
                if "start" in box:
                    with _lock:
                        _samples["store: queued for its thread"].append(1000 * (box["start"] - submitted))
                        _samples["store: the write (fsync)"].append(1000 * (box["end"] - box["start"]))
                        _samples["store: back on the loop"].append(1000 * (time.monotonic() - box["end"]))

        store.SQLiteStore._run = timed_run  # type: ignore[method-assign]


def summary() -> dict[str, dict[str, float]]:
    out = {}
    with _lock:
        items = {k: sorted(v) for k, v in _samples.items()}
    for stage, values in items.items():
        if values:
            out[stage] = {
                "n": len(values),
                "p50_ms": round(values[len(values) // 2], 1),
                "p90_ms": round(values[int(len(values) * 0.9)], 1),
                "mean_ms": round(sum(values) / len(values), 1),
            }
    return out


def _dump() -> None:
    path = os.environ.get("BENCH_TRACE_OUT")
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            json.dump(summary(), fh, indent=1)
        os.replace(tmp, path)


def _keep_dumping() -> None:
    while True:
        time.sleep(1.0)
        _dump()


def main() -> None:
    _install()
    atexit.register(_dump)
    threading.Thread(target=_keep_dumping, name="trace-dump", daemon=True).start()
    from cfn_provider.cli import main as cli

    sys.argv = ["cfn-provider", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()

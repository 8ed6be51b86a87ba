"""What many long-running requests cost a daemon while they wait (issue 15: 10,000 waiting polls).

A real daemon process (`cfn-provider run`, SQLite store, moto's server on 127.0.0.1) serves
`Custom::Bench` with `waiting` below: `create` returns InProgress(after=AfterSeconds, 1800 s by
default), so each request becomes POLLING and none comes due during the bench. The requests go
through SNS (PublishBatch) -> SQS -> the daemon, as CloudFormation's would; the bench waits until
the store holds them all as POLLING, then reads the daemon's CPU and RSS from /proc for `seconds`
while they wait. `direct` of them may instead be written to the store before the daemon starts
(claim + save_progress, as bench.polling_scan does): the output says how many.

    python -m bench.polls_waiting --waiting 10000 --seconds 60 [--direct 0] [--after 1800]

Also reported: time to get them all waiting, the daemon's RSS before vs while they wait (and its
peak), its CPU before any were waiting, and the scheduler's look cost: `due_polls` (the one store
query a look makes) timed against the daemon's own state file while they wait.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfn_provider import InProgress

TARGET_CPU_PERCENT, TARGET_RSS_MB = 2.0, 200.0
POLL_INTERVAL = 5.0  # the daemon's --poll-interval (its default): one look every 5 s


# ---------------------------------------------------------------------------- the handler the daemon serves
class Waiting:
    """`create`/`update`: InProgress, first poll after ResourceProperties AfterSeconds; `is_complete`: done."""

    @staticmethod
    def create(event: Mapping[str, Any]) -> InProgress:
        after = float(event["ResourceProperties"].get("AfterSeconds", 1800))
        return InProgress(
            progress={"op": event["RequestId"][:8]}, physical_id=f"op-{event['RequestId'][:8]}", after=after
        )

    update = create

    @staticmethod
    def is_complete(event: Mapping[str, Any], context: Any, progress: Any) -> dict[str, Any]:
        return {"Data": {"Op": progress["op"]}}

    @staticmethod
    def delete(event: Mapping[str, Any]) -> None:
        return None


waiting_handler = Waiting()


# ---------------------------------------------------------------------------- the store, read beside the daemon
def polling_count(db_path: Path) -> int:
    """POLLING records in the daemon's SQLite file (a read-only connection of the bench's own)."""
    if not db_path.exists():
        return 0
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
    try:
        return db.execute("SELECT count(*) FROM records WHERE state = 'POLLING'").fetchone()[0]
    except sqlite3.OperationalError:  # the daemon has not made the table yet
        return 0
    finally:
        db.close()


async def _fill_direct(db_path: Path, requests: list[Any], after: float) -> None:
    """Write `requests` as POLLING straight into the store, as the daemon's Polls.wait does."""
    from cfn_provider.pipeline.poll_steps import PollState
    from cfn_provider.pipeline.request import idempotency_key
    from cfn_provider.stores.sqlite import SQLiteStore

    store = SQLiteStore(db_path)
    try:
        now = time.time()
        for i, r in enumerate(requests):
            body = r.body
            key, token = idempotency_key(body["StackId"], body["RequestId"]), f"direct-{i}"
            assert (await store.claim(key, "bench-direct", "digest", 60, token=token)).acquired
            state = PollState({"op": body["RequestId"][:8]}, f"op-{body['RequestId'][:8]}", now + 3600, 0, now)
            assert await store.save_progress(key, token, state.dumps(), now + after, json.dumps(body))
    finally:
        await store.close()


async def _time_looks(db_path: Path, looks: int, limit: int = 32) -> dict[str, Any]:
    """`due_polls` (the scheduler's store query) timed `looks` times on the daemon's file, from here."""
    from cfn_provider.stores.sqlite import SQLiteStore

    store = SQLiteStore(db_path)
    try:
        times, found = [], 0
        for _ in range(looks):
            started = time.perf_counter()
            found = len(await store.due_polls(time.time(), limit))
            times.append((time.perf_counter() - started) * 1000)
    finally:
        await store.close()
    ordered = sorted(times)
    return {
        "looks": looks,
        "median_ms": statistics.median(times),
        "p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)],
        "due_found": found,
    }


def _rss_mb(kib: int) -> float:
    return kib * 1024 / 1e6


# ---------------------------------------------------------------------------- the scenario
def run(
    waiting: int = 10_000,
    seconds: float = 60,
    *,
    direct: int = 0,
    after: float = 1800.0,
    baseline_seconds: float = 15.0,
    backlog: int = 100,
    fill_timeout: float = 900.0,
    concurrency: int = 32,
    logdir: Path | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """`waiting` requests POLLING in a daemon (`direct` of them written to its store, the rest
    published through SNS -> SQS); its CPU % and RSS over `seconds` while they wait."""
    import asyncio

    from cfn_provider.local.emulator import Provider

    from .harness import (
        RESOURCE_TYPE,
        Consumer,
        EmulatorProcess,
        build_requests,
        cpu_pressure_s,
        feed,
        has,
        pressure_share,
        queue_depth,
    )

    direct = max(0, min(direct, waiting))
    rundir = logdir or Path(tempfile.mkdtemp(prefix="cfn-bench-polls-"))
    rundir.mkdir(parents=True, exist_ok=True)
    db_path = rundir / "state.db"
    out: dict[str, Any] = {
        "waiting": waiting,
        "through_queue": waiting - direct,
        "direct_to_store": direct,
        "after_s": after,
        "seconds": seconds,
        "poll_interval_s": POLL_INTERVAL,
        "concurrency": concurrency,
        "logs": str(rundir),
    }
    with EmulatorProcess(rundir) as em:
        provider = Provider.create(em)
        started = time.monotonic()
        requests = build_requests(em.client("s3"), provider, waiting, properties={"AfterSeconds": str(after)})
        say(f"  {waiting} requests built ({time.monotonic() - started:.1f} s); logs in {rundir}")
        if direct:
            started = time.monotonic()
            asyncio.run(_fill_direct(db_path, requests[:direct], after))
            out["direct_fill_s"] = round(time.monotonic() - started, 1)
            say(f"  {direct} written to the store directly as POLLING in {out['direct_fill_s']} s")
        daemon = Consumer.daemon(
            em,
            provider,
            f"sqlite://{db_path}",
            "trivial",
            rundir / "daemon.log",
            concurrency=concurrency,
            env={"STATE_DIRECTORY": str(rundir / "state")},
            extra=["--poll-interval", str(POLL_INTERVAL)],
        )
        daemon.args = [
            f"{RESOURCE_TYPE}=bench.polls_waiting:waiting_handler"
            if a == f"{RESOURCE_TYPE}=bench.handlers:trivial"
            else a
            for a in daemon.args
        ]  # this module's handler, not bench.handlers'
        daemon.counts = lambda line: int(has(line, "event", "request") and has(line, "outcome", "polling"))
        steps: list[str] = []  # poll steps the daemon ran: none is due, so none should
        daemon.on_line = lambda line, _at: steps.append(line) if has(line, "event", "poll") else None
        try:
            daemon.start(settle=2.0)
            # before: the daemon started, nothing published (the `direct` ones, if any, already stored)
            cpu0, t0 = daemon.cpu(), time.monotonic()
            time.sleep(baseline_seconds)
            cpu1, t1 = daemon.cpu(), time.monotonic()
            before = daemon.memory()
            out["before"] = {
                "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                "rss_mb": _rss_mb(before["VmRSS"]),
                "seconds": round(t1 - t0, 1),
                "polling": polling_count(db_path),
            }
            say(
                f"  before: {out['before']['cpu_percent']:.3f} % CPU, RSS {out['before']['rss_mb']:.1f} MB, "
                f"{out['before']['polling']} POLLING"
            )

            # fill: publish through SNS -> SQS, at most `backlog` ahead of the daemon's POLLING answers
            rest = requests[direct:]
            fill_cpu0, fill_t0 = daemon.cpu(), time.monotonic()
            if rest:
                fed = feed(
                    em.client("sns"),
                    provider.topic_arn,
                    rest,
                    1000.0,
                    lambda: daemon.answered,
                    backlog=backlog,
                    deadline=fill_timeout,
                )
                bound = time.monotonic() + 120
                while daemon.answered < len(rest) and time.monotonic() < bound and daemon.proc.poll() is None:  # type: ignore[union-attr]
                    time.sleep(0.2)
                fill_s = max(daemon.last_answer_at - fed.first_at, 1e-6)
                out["fill"] = {
                    "published": fed.published,
                    "polling_answers": daemon.answered,
                    "seconds": round(fill_s, 1),
                    "per_s": daemon.answered / fill_s,
                    "daemon_cpu_ms_per_request": 1000 * (daemon.cpu() - fill_cpu0) / max(daemon.answered, 1),
                }
            else:
                out["fill"] = {"published": 0, "polling_answers": 0, "seconds": 0.0, "per_s": 0.0}
            count = polling_count(db_path)
            out["polling"] = count
            say(
                f"  fill: {out['fill']['polling_answers']}/{len(rest)} through SNS -> SQS in "
                f"{out['fill']['seconds']} s ({out['fill']['per_s']:.1f}/s); store: {count} POLLING "
                f"(filled in {time.monotonic() - fill_t0:.0f} s wall)"
            )

            # while they wait: CPU and RSS over `seconds`, RSS sampled every second
            time.sleep(2.0)  # the last saves settle
            steps_before, rss = len(steps), []
            cpu0, psi0, t0 = daemon.cpu(), cpu_pressure_s(), time.monotonic()
            while time.monotonic() - t0 < seconds:
                time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - t0))))
                rss.append(daemon.memory()["VmRSS"])
            cpu1, psi1, t1 = daemon.cpu(), cpu_pressure_s(), time.monotonic()
            peak = daemon.memory()["VmHWM"]
            out["while_waiting"] = {
                "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                "cpu_s": round(cpu1 - cpu0, 3),
                "seconds": round(t1 - t0, 1),
                "rss_mb": _rss_mb(rss[-1]),
                "rss_max_mb": _rss_mb(max(rss)),
                "peak_rss_mb": _rss_mb(peak),
                "poll_steps": len(steps) - steps_before,
                "cpu_pressure": pressure_share(psi0, psi1, t1 - t0),
            }
            out["look"] = asyncio.run(_time_looks(db_path, 50))
            out["polling_after"] = polling_count(db_path)
            out["queue_left"] = queue_depth(em.client("sqs"), provider.queue_url)  # every message deleted
        finally:
            daemon.stop()
    w = out["while_waiting"]
    out["targets"] = {"cpu_percent": TARGET_CPU_PERCENT, "rss_mb": TARGET_RSS_MB}
    out["met"] = {"cpu": w["cpu_percent"] <= TARGET_CPU_PERCENT, "rss": w["rss_max_mb"] <= TARGET_RSS_MB}
    out["verified"] = (
        out["polling"] == waiting
        and out["polling_after"] == waiting
        and w["poll_steps"] == 0
        and out["queue_left"] == 0
    )
    out["errors"] = daemon.errors[:5]
    return out


def report(out: dict[str, Any]) -> str:
    """The figures beside their targets."""
    w, b, f, look = out["while_waiting"], out["before"], out["fill"], out["look"]
    ok = {True: "ok", False: "MISSED"}
    fill = (
        f"{f['polling_answers']} through SNS -> SQS in {f['seconds']} s ({f['per_s']:.1f}/s, "
        f"daemon {f.get('daemon_cpu_ms_per_request', 0):.2f} ms CPU each)"
    )
    if out["direct_to_store"]:
        fill += f"; {out['direct_to_store']} written to the store directly (claim + save_progress), not queued"
    pressure = "" if w["cpu_pressure"] is None else f"; some task waited for a CPU {w['cpu_pressure']:.0%} of it"
    rows = [
        (
            "waiting polls",
            f"{out['polling']} POLLING in the store ({out['polling_after']} after the window), "
            f"first poll due in {out['after_s']:.0f} s; {out['queue_left']} messages left in the queue",
            "",
        ),
        ("time to get them waiting", fill, ""),
        (
            "daemon CPU while they wait",
            f"{w['cpu_percent']:.3f} % ({w['cpu_s']} s CPU in {w['seconds']} s{pressure})",
            f"<= {TARGET_CPU_PERCENT} %   {ok[out['met']['cpu']]}",
        ),
        (
            "daemon RSS while they wait",
            f"{w['rss_mb']:.1f} MB (max {w['rss_max_mb']:.1f}, peak incl. fill {w['peak_rss_mb']:.1f})",
            f"<= {TARGET_RSS_MB:.0f} MB  {ok[out['met']['rss']]}",
        ),
        ("before any waited", f"{b['cpu_percent']:.3f} % CPU, RSS {b['rss_mb']:.1f} MB ({b['seconds']} s)", ""),
        (
            "scheduler's look (due_polls)",
            f"{look['median_ms']:.2f} ms median, {look['p95_ms']:.2f} ms p95 over "
            f"{look['looks']} looks, {look['due_found']} due; one look every "
            f"{out['poll_interval_s']:.0f} s",
            "",
        ),
        ("poll steps run in the window", f"{w['poll_steps']} (none is due)", ""),
    ]
    lines = [f"{name:<30} {value:<100} {target}".rstrip() for name, value, target in rows]
    if not out["verified"]:
        lines.append(f"UNVERIFIED: not every request was POLLING through the window; errors {out['errors'][:2]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--direct", type=int, default=0, help="of them, written to the store directly, not queued")
    parser.add_argument("--after", type=float, default=1800.0, help="seconds to each request's first poll")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--logs", type=Path)
    args = parser.parse_args()
    out = run(args.waiting, args.seconds, direct=args.direct, after=args.after, logdir=args.logs)
    print(report(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0 if out["verified"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

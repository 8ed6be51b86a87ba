"""`python -m bench` (`make bench`): every scenario in one run, one table, the same figures as JSON.

    python -m bench                         # every scenario (about 15 minutes on 2 vCPUs)
    python -m bench --only burst,idle       # some of them: burst slow latency idle scale scale_dynalite
                                            #   inflight polls lambda web promises cost
    python -m bench --only burst --rounds 3 --requests 200   # the CPU and throughput ratios, quicker
    python -m bench --event-loop asyncio    # the daemon on asyncio's own loop (default: auto, uvloop if installed)
    python -m bench --quick                 # small sizes, for trying the bench itself
    python -m bench --profile               # also py-spy the consumers of the burst scenario

Absolute figures on a shared machine are noise; the ratios are taken between runs made in the
same session, with consumers taking turns, so they are what to read: each ratio is shown as the
median (min - max) of its rounds, a target is met when the median meets it, and the header says
how noisy the machine was (equal CPU spins timed at the start and the end).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from . import (
    ablate_daemon,
    fleet_cost,
    functions,
    noise,
    promises,
    report,
    scale,
    scenarios,
    scenarios_more,
    web_listener,
)
from .harness import REPO, cpu_pressure_s, machine, pressure_share

SCENARIOS = (
    "burst",
    "slow",
    "latency",
    "idle",
    "scale",
    "scale_dynalite",
    "inflight",
    "polls",
    "lambda",
    "web",
    "promises",
    "cost",
)
DEFAULT_JSON = REPO / "bench" / "results.json"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + " ".join(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="small sizes (not comparable with a full run)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="diagnose: py-spy the daemon, the durable floor and the limit loop in the burst, time each stage "
        "of a message in the slow and latency runs (the figures are then not the reference ones)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the figures (default {DEFAULT_JSON} for a full run, results-partial.json otherwise)",
    )
    parser.add_argument("--logs", type=Path, default=None, help="directory for logs (default: a new temp dir)")
    parser.add_argument("--concurrency", type=int, default=32, help="daemon --concurrency (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="burst: rounds the consumers take turns (default 3)")
    parser.add_argument(
        "--requests", type=int, default=None, help="burst: requests per consumer per round (default 333; --quick 100)"
    )
    parser.add_argument("--inflight", type=int, default=None, help="inflight: handlers at once (default 1000)")
    parser.add_argument(
        "--inflight-sleep",
        type=float,
        default=None,
        help="inflight: seconds each handler sleeps (default 15; longer lets more be in flight at once)",
    )
    parser.add_argument(
        "--event-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the daemon's --event-loop (default auto); a daemon-on-asyncio row is always run too",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="CHECKOUT",
        help="burst: also run the daemon of another clone of this repository (with its own "
        "`make venv`) in every round, for a before/after in one session",
    )
    parser.add_argument(
        "--consumers",
        default="",
        help="burst: only these consumers besides the daemon, the durable floor and the limit loop "
        "(comma-separated: " + " ".join(scenarios.KINDS) + "; default all)",
    )
    parser.add_argument(
        "--ablate",
        default=scenarios.Options.ablate,
        help="burst: what the daemon_ablated consumer runs without (comma-separated: "
        + " ".join(ablate_daemon.NAMES)
        + f"; default {scenarios.Options.ablate}): what those parts cost in the whole request",
    )
    args = parser.parse_args(argv)
    try:
        ablate_daemon.parse(args.ablate)
    except ValueError as exc:
        parser.error(f"--ablate: {exc}")
    if args.baseline and not (args.baseline / ".venv" / "bin" / "python").exists():
        parser.error(f"--baseline {args.baseline}: no .venv/bin/python there (run `make venv` in it first)")

    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    logdir = args.logs or Path(tempfile.mkdtemp(prefix="cfn-bench-"))
    logdir.mkdir(parents=True, exist_ok=True)
    opts = scenarios.Options(
        logdir=logdir,
        concurrency=args.concurrency,
        profile=args.profile,
        event_loop=args.event_loop,
        rounds=max(1, args.rounds),
        baseline=args.baseline,
        consumers=tuple(c.strip() for c in args.consumers.split(",") if c.strip()),
        ablate=args.ablate,
        say=lambda line: print(line, flush=True),
    )
    opts.burst_n = 333 * opts.rounds
    if args.quick:
        opts.burst_n, opts.slow_m, opts.latency_count = 100 * opts.rounds, 100, 25
        opts.idle_seconds, opts.scale_n, opts.inflight_n, opts.inflight_sleep = 15.0, 200, 300, 10.0
        opts.cost_n, opts.cost_idle_s = 30, 50.0
    if args.requests:
        opts.burst_n = args.requests * opts.rounds
    if args.inflight:
        opts.inflight_n = args.inflight
    if args.inflight_sleep:
        opts.inflight_sleep = args.inflight_sleep
    full = not args.quick and chosen == list(SCENARIOS)
    out_path = args.json or (DEFAULT_JSON if full else REPO / "bench" / "results-partial.json")

    print(
        f"cfn-sns-provider benchmarks: {', '.join(chosen)}{' (quick)' if args.quick else ''}; logs in {logdir}",
        flush=True,
    )
    noise_start = noise.calibrate()
    started, load_start, psi_start = time.monotonic(), os.getloadavg()[0], cpu_pressure_s()
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    runners = {
        "burst": scenarios.burst,
        "slow": scenarios.slow,
        "latency": scenarios.latency,
        "idle": scenarios.idle,
        "scale": scale.scale_out,
        "scale_dynalite": scale.scale_out_dynalite,
        "inflight": scenarios_more.inflight,
        "polls": scenarios_more.waiting_polls,
        "lambda": functions.isolation,
        "web": web_listener.run_web,
        "promises": lambda _opts: {"rows": promises.run(quick=args.quick)},
        "cost": fleet_cost.cost,
    }
    for name in chosen:
        t0 = time.monotonic()
        print(f"  {name} ...", flush=True)
        results[name] = runners[name](opts)
        timings[name] = round(time.monotonic() - t0, 1)
    total = time.monotonic() - started
    load_end, pressure = os.getloadavg()[0], pressure_share(psi_start, cpu_pressure_s(), total)
    noise_end = noise.calibrate()
    from cfn_provider import loops

    try:
        loop = loops.choose(args.event_loop)
    except loops.EventLoopError as exc:
        loop = f"unavailable: {exc}"

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "",
        f"cfn-sns-provider benchmarks, {when}, {int(total // 60)} min {int(total % 60)} s"
        + (" (quick sizes)" if args.quick else ""),
        f"machine:  {machine()}",
        f"load:     1-min load average {load_start:.1f} at start, {load_end:.1f} at end"
        + (
            f"; some task waited for a CPU {pressure:.0%} of the time (PSI; the bench's own processes included)"
            if pressure is not None
            else ""
        ),
        noise.describe("noise:   ", noise_start) + " (start)",
        noise.describe("         ", noise_end) + " (end)",
        f"emulator: moto {version('moto')} server in its own process on 127.0.0.1, a fresh one per run; "
        f"daemon --concurrency {opts.concurrency} --event-loop {args.event_loop} ({loop})",
        "ratios: median (min - max) over the rounds; a target is met when the median meets it",
        "read the ratios: every figure is from this one session, and consumers took turns",
        "",
    ]
    print(report.table(results, header), flush=True)
    notes = _notes(results, pressure)
    for note in notes:
        print(f"note: {note}")
    if args.profile and "burst" in results:
        _print_profiles(results["burst"])
    if args.profile:
        _print_stages(results)

    document = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "moto": version("moto"),
        "quick": args.quick,
        "scenarios_run": chosen,
        "duration_s": round(total, 1),
        "load_average_1min": {"start": load_start, "end": load_end},
        "cpu_pressure": pressure,
        "noise": {"start": noise_start, "end": noise_end},
        "event_loop": loop,
        "scenario_seconds": timings,
        "targets": report.targets(results),
        "notes": notes,
        "options": {k: v for k, v in vars(opts).items() if k not in ("say", "logdir")},
        "logs": str(logdir),
        "results": results,
    }
    out_path.write_text(json.dumps(_jsonable(document), indent=2, default=str) + "\n")
    print(f"figures written to {out_path.relative_to(REPO) if out_path.is_relative_to(REPO) else out_path}")
    return 0


def _notes(results: dict[str, Any], pressure: float | None) -> list[str]:
    notes = []
    if pressure is not None and pressure >= 0.3:
        notes.append(
            f"the CPUs were contended: some task (the bench's three processes or other work) waited for "
            f"one {pressure:.0%} of the time; wall-clock figures (1, 3, 4, 6) suffer most, CPU per request "
            "(2) and idle cost (5) least"
        )
    b = results.get("burst")
    if b:
        d, lim = b["daemon"], b["floor"]
        cost = (
            f"each request costs moto {d['emulator_cpu_ms_per_request']:.1f} ms of CPU with the daemon against "
            f"{lim['emulator_cpu_ms_per_request']:.1f} ms with the durable floor ({d['sqs_calls_per_request']:.2f} "
            f"against {lim['sqs_calls_per_request']:.2f} SQS calls per request)"
        )
        starved = d.get("cpu_pressure") or 0.0
        if max(d["emulator_busy"], lim["emulator_busy"]) >= 0.8:
            notes.append(
                f"burst throughput is emulator-bound here: one moto process (one GIL) serves every SNS, SQS "
                f"and S3 call and closes every connection ({d['emulator_busy']:.2f} / "
                f"{lim['emulator_busy']:.2f} cores busy in the daemon / floor runs); {cost}"
            )
        elif starved >= 0.5:
            notes.append(
                f"burst: the emulator was not saturated ({d['emulator_busy']:.2f} cores busy) but the CPUs "
                f"were (some task waited for one {starved:.0%} of the time in the daemon runs); {cost}"
            )
        else:
            notes.append(
                f"burst: the emulator was not saturated in the daemon runs ({d['emulator_busy']:.2f} cores): "
                f"the daemon's own time per message (x --concurrency) set its throughput; {cost}"
            )
    sc = results.get("scale")
    if sc and not sc.get("fleet_mode"):
        notes.append(
            f"scale-out: fleet mode not available yet ({sc.get('fleet_note', '')}); "
            "2 and 3 processes run once `--state dynamodb://` works"
        )
    elif sc:
        notes.append(f"scale-out: the bottleneck is {report.scale_bottleneck(sc)}")
    unverified = [
        f"{k}/{kind}"
        for k in ("burst",)
        if k in results
        for kind in scenarios.KINDS
        if kind in results[k] and not results[k][kind]["verified"]
    ]
    if unverified:
        notes.append("some runs did not end with every response in S3 and an empty queue: " + ", ".join(unverified))
    return notes


def _print_profiles(burst: dict[str, Any]) -> None:
    for kind in ("daemon", "floor", "limit"):
        for run in burst[kind]["runs"]:
            for name, prof in (run.get("profile") or {}).items():
                cpu = run["cpu_ms_per_request"]
                print(
                    f"\nprofile {run['logs']}/{name}: {prof['samples']} samples holding the GIL, "
                    f"{cpu:.2f} ms CPU per request"
                )
                print("  by library (inclusive):")
                for frame, share in prof["libraries"]:
                    print(f"    {share:5.1f}%  {frame}")
                print("  project functions (inclusive):")
                for frame, share in prof["project"][:10]:
                    print(f"    {share:5.1f}%  {frame}")
                print("  self:")
                for frame, share in prof["self"][:8]:
                    print(f"    {share:5.1f}%  {frame}")
    _print_stage_costs(burst)


def _print_stage_costs(burst: dict[str, Any]) -> None:
    """CPU per request by stage (bench.profile.STAGES): each run's share of GIL samples times its CPU per
    request, averaged over the rounds; the daemon beside the durable floor and the limit loop."""
    kinds = [k for k in ("daemon", "daemon_asyncio", "floor", "limit") if k in burst]
    cost: dict[str, dict[str, float]] = {}
    for kind in kinds:
        runs = [
            (r["cpu_ms_per_request"], p["stages"])
            for r in burst[kind]["runs"]
            for p in (r.get("profile") or {}).values()
        ]
        runs = [(cpu, shares) for cpu, shares in runs if shares]
        for cpu, shares in runs:
            for stage, share in shares.items():
                cost.setdefault(stage, {}).setdefault(kind, 0.0)
                cost[stage][kind] += 1000 * cpu * share / len(runs)
    if not cost:
        return
    print("\nCPU per request by stage (us; GIL samples x CPU per request, mean over rounds; bench.profile.STAGES):")
    print(f"    {'stage':<40}" + "".join(f"{k:>16}" for k in kinds) + f"{'daemon - floor':>16}")
    for stage, by_kind in cost.items():
        gap = by_kind.get("daemon", 0.0) - by_kind.get("floor", 0.0)
        print(f"    {stage:<40}" + "".join(f"{by_kind.get(k, 0.0):16.0f}" for k in kinds) + f"{gap:+16.0f}")


def _print_stages(results: dict[str, Any]) -> None:
    runs = [("latency", results.get("latency", {}).get("stages"))]
    runs += [(f"slow {k}", results.get("slow", {}).get(k, {}).get("stages")) for k in ("async_sleep", "sync_sleep")]
    for label, stages in runs:
        if not stages:
            continue
        print(f"\nstages of a message, {label} (wall time; bench.trace_daemon):")
        for stage, q in stages.items():
            print(
                f"    {stage:<40} n={q['n']:<5} p50 {q['p50_ms']:8.1f} ms  p90 {q['p90_ms']:8.1f} ms  "
                f"mean {q['mean_ms']:8.1f} ms"
            )


if __name__ == "__main__":
    sys.exit(main())

"""Scenarios 1-5 (scale-out: bench.scale; in-flight and waiting polls: bench.scenarios_more).
Each returns a dict of figures; `bench.report` lays them out beside the targets.

Every run gets a fresh emulator process and a fresh topic/queue/bucket, so no run inherits
another's queue, objects or memory. Consumers are processes of their own, and their CPU is
read from /proc, so nothing the bench does (publishing, reading logs) is counted against them.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from cfn_provider.local.emulator import Provider

from . import ablate_daemon
from .harness import (
    Consumer,
    EmulatorProcess,
    InFlightSampler,
    build_requests,
    cpu_pressure_s,
    feed,
    has,
    pressure_share,
    queue_depth,
    responses_in_bucket,
)
from .noise import spread
from .profile import Spy, top_frames
from .proxy import RecordingProxy

KINDS = ("daemon", "daemon_asyncio", "daemon_async_handler", "daemon_ablated", "floor", "limit", "naive")
# the daemon on the loop --event-loop picks, on asyncio's own, and with the trivial handler written
# `async def` (run on the loop: what the thread pool's hand-off costs a sync handler)
# and without the parts --ablate names (bench.ablate_daemon: what they cost in the whole request)
DAEMONS = ("daemon", "daemon_asyncio", "daemon_async_handler", "daemon_ablated")
SQS_OPERATIONS = (
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "GetQueueAttributes",
)
LABELS = {
    "daemon": "daemon (cfn-provider run)",
    "daemon_asyncio": "daemon on asyncio's loop (--event-loop asyncio)",
    "daemon_async_handler": "daemon, the trivial handler async (no thread hand-off)",
    "daemon_ablated": "daemon without the parts --ablate names (bench.ablate_daemon; a diagnostic)",
    "baseline": "the daemon of another checkout (--baseline)",
    "floor": "durable floor (bench.durable_floor: the limit loop plus a claim, a stored body, a SENT mark)",
    "limit": "limit loop (minimal asyncio)",
    "naive": "naive loop (sync boto3)",
}
REFERENCES = ("floor", "limit")  # what the daemons' ratios are taken against: the targets' (floor), and the bare loop
REQUIRED = ("daemon", *REFERENCES)  # the burst always runs these, whatever --consumers says


@dataclass
class Options:
    logdir: Path
    burst_n: int = 1000  # per consumer, over all rounds
    rounds: int = 3  # consumers take turns this many times (order reversed every other round); ratios per round
    slow_m: int = 500
    concurrency: int = 32
    latency_count: int = 100
    latency_interval: float = 0.2
    idle_seconds: float = 60.0
    scale_n: int = 500  # per process count
    rate: float = 1000.0  # publish ceiling per second; far above what moto accepts: it sets the pace
    backlog: int = 60  # never more than this many published-but-unanswered requests (moto slows as a queue deepens)
    limit_pollers: int = 3  # receive->PUT->delete loops in the limit process (30 messages in hand, like 32)
    profile: bool = False
    event_loop: str = "auto"  # the daemon's --event-loop
    baseline: Path | None = None  # another checkout whose daemon takes its turn in the burst too (before/after)
    consumers: tuple[str, ...] = ()  # burst: only these of KINDS (and REQUIRED); empty: all
    ablate: str = "handler,log,metrics,urls,durable,shields"  # the daemon_ablated consumer's (bench.ablate_daemon)
    daemon_env: dict[str, str] = field(
        default_factory=dict
    )  # more environment for the daemons (e.g. a DynamoDB endpoint)
    inflight_n: int = 1000  # bench.scenarios_more.inflight: handlers in flight at once
    inflight_sleep: float = 15.0  # seconds each of them sleeps
    cost_n: int = 200  # bench.fleet_cost: requests per round
    cost_idle_s: float = 60.0  # and the idle window after them (> 2 long polls of 20 s: at least 2 start in it)
    say: Callable[[str], None] = print


# ---------------------------------------------------------------------------- one throughput run
def _consumer(
    kind: str,
    opts: Options,
    em: EmulatorProcess,
    provider: Provider,
    rundir: Path,
    index: int = 0,
    handler: str = "trivial",
    state: str | None = None,
    trace: bool = False,
) -> Consumer:
    log = rundir / f"{kind}-{index}.log"
    if kind in DAEMONS or kind == "baseline":
        ablate = opts.ablate if kind == "daemon_ablated" else None
        if handler == "trivial" and (kind == "daemon_async_handler" or "handler" in ablate_daemon.parse(ablate or "")):
            handler = "async_trivial"
        return Consumer.daemon(
            em,
            provider,
            state or f"sqlite://{rundir}/state.db",
            handler,
            log,
            concurrency=opts.concurrency,
            name=f"daemon-{index}",
            extra=["--event-loop", "asyncio" if kind == "daemon_asyncio" else opts.event_loop],
            env={"STATE_DIRECTORY": str(rundir / f"state-{index}"), **opts.daemon_env},  # its health file
            trace=rundir / f"stages-{index}.json" if trace else None,
            checkout=opts.baseline if kind == "baseline" else None,
            ablate=ablate,
        )
    loop = ["--event-loop", opts.event_loop]  # the daemon's: the references run on the loop it runs on
    if kind == "floor":
        args = ["--pollers", str(opts.limit_pollers), "--state", str(rundir / f"floor-{index}.db"), *loop]
        return Consumer.script("bench.durable_floor", em, provider, log, args)
    if kind == "limit":
        return Consumer.script("bench.limit_loop", em, provider, log, ["--pollers", str(opts.limit_pollers), *loop])
    return Consumer.script("bench.naive_loop", em, provider, log)


def throughput_run(
    opts: Options,
    kind: str,
    n: int,
    tag: str,
    handler: str = "trivial",
    processes: int = 1,
    state: str | Callable[[EmulatorProcess], str] | None = None,
    backlog: int | None = None,
    profile: bool = False,
    trace: bool = False,
    properties: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """n requests through one emulator to `processes` consumers of one kind; figures of the run.
    `state`: the daemons' --state (or a function making it in the emulator); default SQLite."""
    rundir = opts.logdir / tag
    rundir.mkdir(parents=True, exist_ok=True)
    with EmulatorProcess(rundir) as em:
        provider = Provider.create(em)
        requests = build_requests(em.client("s3"), provider, n, properties)
        state_url = state(em) if callable(state) else state
        consumers = [
            _consumer(kind, opts, em, provider, rundir, i, handler, state_url, trace and kind == "daemon")
            for i in range(processes)
        ]
        try:
            for c in consumers:
                c.start()
            spies = [Spy(c.proc.pid, rundir / f"{c.name}.pyspy.txt") for c in consumers] if profile else []  # type: ignore[union-attr]
            time.sleep(0.5 if spies else 0)

            def answered() -> int:
                return sum(c.answered for c in consumers)

            calls0 = em.calls()
            cpu0, emu0, psi0, t0 = sum(c.cpu() for c in consumers), em.cpu(), cpu_pressure_s(), time.monotonic()
            sys0 = sum(c.cpu_sys() for c in consumers)
            sampler = InFlightSampler(em.client("sqs"), provider.queue_url)
            fed = feed(
                em.client("sns"),
                provider.topic_arn,
                requests,
                opts.rate,
                answered,
                backlog=backlog or opts.backlog,
                deadline=max(120.0, n / 2),
            )
            bound = time.monotonic() + max(60.0, n / 5) + float((properties or {}).get("SleepSeconds", 0))
            while answered() < n and time.monotonic() < bound and all(c.proc.poll() is None for c in consumers):  # type: ignore[union-attr]
                time.sleep(0.05)  # the reader threads note when each answer came
            end = max(c.last_answer_at for c in consumers) if answered() else time.monotonic()
            cpu1, emu1, psi1, t1 = sum(c.cpu() for c in consumers), em.cpu(), cpu_pressure_s(), time.monotonic()
            sys1 = sum(c.cpu_sys() for c in consumers)
            in_flight = sampler.stop()
            calls = em.calls() - calls0
            memory = consumers[0].memory()
            for spy in spies:
                spy.stop()
            elapsed = max(end - fed.first_at, 1e-6)
            done = answered()
            s3 = em.client("s3")
            in_bucket = responses_in_bucket(s3, provider.bucket)
            depth = -1
            for _ in range(25):  # the last deletes may still be on their way
                depth = queue_depth(em.client("sqs"), provider.queue_url)
                if depth == 0:
                    break
                time.sleep(0.2)
        finally:
            for c in consumers:
                c.stop()
    errors = [e for c in consumers for e in c.errors][:5]
    result = {
        "kind": kind,
        "processes": processes,
        "requests": n,
        "answered": done,
        "seconds": round(elapsed, 3),
        "rps": done / elapsed,
        "cpu_s": cpu1 - cpu0,
        "cpu_ms_per_request": 1000 * (cpu1 - cpu0) / max(done, 1),
        "cpu_sys_s": sys1 - sys0,
        "emulator_cpu_ms_per_request": 1000 * (emu1 - emu0) / max(done, 1),
        "emulator_busy": (emu1 - emu0) / elapsed,  # cores; its GIL keeps it near one at most
        "cpu_pressure": pressure_share(psi0, psi1, t1 - t0),
        "emulator_calls": dict(calls),
        "sqs_calls_per_request": sum(calls[op] for op in SQS_OPERATIONS) / max(done, 1),
        "in_flight_mean": in_flight,  # messages received and not yet deleted, sampled every 0.25 s
        "in_flight_peak": max(sampler.samples, default=0),
        "peak_rss_mb": memory.get("VmHWM", 0) * 1024 / 1e6,
        "published_per_s": fed.published / max(fed.last_at - fed.first_at, 1e-6),
        "publisher_paused_s": round(fed.paused_s, 2),
        "state": (state_url or "sqlite").split(":")[0],
        "responses_in_bucket": in_bucket,
        "queue_left": depth,
        "rss_mb": memory.get("VmRSS", 0) * 1024 / 1e6,
        "verified": done >= n and in_bucket == n and depth == 0,
        "errors": errors,
        "logs": str(rundir),
        "event_loop": started_loop(consumers[0].log_path) if kind in DAEMONS else None,
    }
    if spies:
        result["profile"] = {s.out.name: top_frames(s.out) for s in spies}
    if trace and kind == "daemon":
        result["stages"] = _stages(rundir / "stages-0.json")
    opts.say(
        f"    {tag:<28} {done:>5}/{n} in {elapsed:6.1f} s  {result['rps']:6.1f} req/s  "
        f"cpu {result['cpu_ms_per_request']:5.2f} ms/req  emulator {result['emulator_busy']:.2f} cores"
        + (f"  cpu pressure {result['cpu_pressure']:.0%}" if result["cpu_pressure"] is not None else "")
        + ("" if result["verified"] else f"  UNVERIFIED (bucket {in_bucket}, queue {depth}) {errors[:1]}")
    )
    return result


def started_loop(log: Path) -> str | None:
    """The event loop a daemon's `started` line names."""
    try:
        for line in log.read_text().splitlines():
            if has(line, "event", "started"):
                return json.loads(line).get("event_loop")
    except (OSError, ValueError):
        pass
    return None


def _stages(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    n = sum(r["answered"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    return {
        "requests": n,
        "seconds": round(seconds, 2),
        "rps": n / seconds,
        "cpu_ms_per_request": 1000 * sum(r["cpu_s"] for r in runs) / max(n, 1),
        "cpu_sys_ms_per_request": 1000 * sum(r.get("cpu_sys_s", 0.0) for r in runs) / max(n, 1),
        "emulator_cpu_ms_per_request": sum(r["emulator_cpu_ms_per_request"] * r["answered"] for r in runs) / max(n, 1),
        "emulator_busy": sum(r["emulator_busy"] * r["seconds"] for r in runs) / seconds,
        "sqs_calls_per_request": sum(r["sqs_calls_per_request"] * r["answered"] for r in runs) / max(n, 1),
        "in_flight_mean": sum(r["in_flight_mean"] * r["seconds"] for r in runs) / seconds,
        "cpu_pressure": (
            sum(r["cpu_pressure"] * r["seconds"] for r in runs) / seconds
            if all(r["cpu_pressure"] is not None for r in runs)
            else None
        ),
        "emulator_calls": dict(sum((Counter(r["emulator_calls"]) for r in runs), Counter())),
        "verified": all(r["verified"] for r in runs),
        "runs": runs,
    }


# ---------------------------------------------------------------------------- 1 + 2: burst throughput and CPU
def burst(opts: Options) -> dict[str, Any]:
    per_round = opts.burst_n // opts.rounds
    kinds = tuple(k for k in KINDS if k in REQUIRED or not opts.consumers or k in opts.consumers)
    kinds += ("baseline",) if opts.baseline else ()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(opts.rounds):
        order = kinds if r % 2 == 0 else tuple(reversed(kinds))  # no consumer always goes first
        for kind in order:
            runs[kind].append(
                throughput_run(opts, kind, per_round, f"burst-{r + 1}-{kind}", profile=opts.profile and kind != "naive")
            )
    out: dict[str, Any] = {k: _combine(v) for k, v in runs.items()}
    out["rounds"] = opts.rounds
    out["event_loop"] = out["daemon"]["runs"][0].get("event_loop")
    if opts.baseline:
        out["baseline_checkout"] = str(opts.baseline)
    if "daemon_ablated" in runs:
        out["ablate"] = opts.ablate
    ratios = [
        (kind, ref) for kind in DAEMONS + (("baseline",) if opts.baseline else ()) if kind in runs for ref in REFERENCES
    ]
    for kind, ref in [*ratios, ("floor", "limit")]:  # per round (the runs that took turns), then min / median / max
        pairs = list(zip(runs[kind], runs[ref], strict=True))
        out[f"{kind}_over_{ref}_spread"] = spread([d["rps"] / r["rps"] for d, r in pairs])
        out[f"cpu_{kind}_over_{ref}_spread"] = spread(
            [d["cpu_ms_per_request"] / r["cpu_ms_per_request"] for d, r in pairs]
        )
        out[f"{kind}_over_{ref}"] = out[f"{kind}_over_{ref}_spread"]["median"]  # targets: the median
        out[f"cpu_{kind}_over_{ref}"] = out[f"cpu_{kind}_over_{ref}_spread"]["median"]
    if "naive" in out:
        out["daemon_over_naive"] = out["daemon"]["rps"] / out["naive"]["rps"]
    out["publish"] = f"SNS PublishBatch, as fast as moto accepts, <= {opts.backlog} unanswered"
    return out


# ---------------------------------------------------------------------------- 3: slow handlers
def slow(opts: Options) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requests": opts.slow_m,
        "concurrency": opts.concurrency,
        "ideal_s": opts.slow_m * 1.0 / opts.concurrency,
    }
    for handler in ("async_sleep", "sync_sleep"):
        run = throughput_run(
            opts,
            "daemon",
            opts.slow_m,
            f"slow-{handler}",
            handler=handler,
            backlog=opts.concurrency + 30,
            trace=opts.profile,
        )
        run["efficiency"] = out["ideal_s"] / run["seconds"]
        out[handler] = run
    return out


# ---------------------------------------------------------------------------- 4: latency
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _summary(latencies_s: list[float]) -> dict[str, Any]:
    ms = [1000 * x for x in latencies_s]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms) if ms else float("nan"),
    }


def latency(opts: Options) -> dict[str, Any]:
    """One request every `latency_interval` s through SNS (Publish, as CloudFormation does) to a
    topic with two queues: the daemon's, and a bare long-poller's that only notes when each
    message arrives (the emulator's own SNS -> SQS delivery time). The poller's queue is
    subscribed first, so moto delivers to it first: the comparison leans against the daemon."""
    rundir = opts.logdir / "latency"
    rundir.mkdir(parents=True, exist_ok=True)
    with EmulatorProcess(rundir) as em, RecordingProxy(em.port) as s3_proxy:
        provider = Provider.create(em)
        sns, sqs = em.client("sns"), em.client("sqs")
        probe_url = sqs.create_queue(QueueName=f"{provider.name}-probe")["QueueUrl"]
        probe_arn = sqs.get_queue_attributes(QueueUrl=probe_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        daemon_sub = sns.list_subscriptions_by_topic(TopicArn=provider.topic_arn)["Subscriptions"][0]
        sns.unsubscribe(SubscriptionArn=daemon_sub["SubscriptionArn"])
        for endpoint in (probe_arn, daemon_sub["Endpoint"]):
            sns.subscribe(
                TopicArn=provider.topic_arn,
                Protocol="sqs",
                Endpoint=endpoint,
                Attributes={"RawMessageDelivery": "false"},
            )
        probe_provider = Provider(em, provider.name, provider.topic_arn, probe_url, provider.bucket)  # type: ignore[arg-type]
        requests = build_requests(em.client("s3", endpoint=s3_proxy.endpoint), provider, opts.latency_count)
        received: dict[str, float] = {}

        def on_probe_line(line: str, _now: float) -> None:
            if line.startswith("received "):
                _, message_id, at = line.split()
                received[message_id] = float(at)

        daemon = Consumer.daemon(
            em,
            provider,
            f"sqlite://{rundir}/state.db",
            "trivial",
            rundir / "daemon.log",
            concurrency=opts.concurrency,
            response_endpoint=s3_proxy.endpoint,
            trace=rundir / "stages-0.json" if opts.profile else None,
        )
        probe = Consumer.script(
            "bench.limit_loop", em, probe_provider, rundir / "probe.log", ["--receive-only"], name="probe"
        )
        probe.on_line = on_probe_line
        try:
            daemon.start(settle=2.0)
            probe.start(settle=1.0)
            start = time.monotonic()
            for i, request in enumerate(requests):
                pause = start + i * opts.latency_interval - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                request.published_at = time.time()
                request.sns_message_id = sns.publish(TopicArn=provider.topic_arn, Message=json.dumps(request.body))[
                    "MessageId"
                ]
            daemon.wait_answered(len(requests), 30)
            deadline = time.monotonic() + 10
            while len(received) < len(requests) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            daemon.stop()
            probe.stop()
        puts = {}
        for exchange in s3_proxy.snapshot():
            if exchange.method == "PUT" and exchange.status == 200 and exchange.answered_at:
                key = unquote(urlsplit(exchange.path).path).lstrip("/").partition("/")[2]
                puts.setdefault(key, exchange.answered_at)
    end_to_end = [puts[r.key] - r.published_at for r in requests if r.key in puts]
    delivery = [received[r.sns_message_id] - r.published_at for r in requests if r.sns_message_id in received]
    out = {
        "requests": len(requests),
        "interval_s": opts.latency_interval,
        "daemon": _summary(end_to_end),
        "delivery": _summary(delivery),
        "logs": str(rundir),
    }
    out["p50_over_delivery_ms"] = out["daemon"]["p50_ms"] - out["delivery"]["p50_ms"]
    if opts.profile:
        out["stages"] = _stages(rundir / "stages-0.json")
    opts.say(
        f"    latency: daemon p50 {out['daemon']['p50_ms']:.1f} ms ({len(end_to_end)} answers), "
        f"delivery p50 {out['delivery']['p50_ms']:.1f} ms ({len(delivery)} arrivals)"
    )
    return out


# ---------------------------------------------------------------------------- 5: idle cost
def idle(opts: Options) -> dict[str, Any]:
    """The daemon as deployed (20 s long polls), with nothing to do; its SQS calls go through a
    counting proxy."""
    rundir = opts.logdir / "idle"
    rundir.mkdir(parents=True, exist_ok=True)
    settle = 5.0
    with EmulatorProcess(rundir) as em, RecordingProxy(em.port) as sqs_proxy:
        provider = Provider.create(em)
        daemon = Consumer.daemon(
            em,
            provider,
            f"sqlite://{rundir}/state.db",
            "trivial",
            rundir / "daemon.log",
            concurrency=opts.concurrency,
            env={"AWS_ENDPOINT_URL_SQS": sqs_proxy.endpoint},
        )
        try:
            daemon.start(settle=settle)
            t0, cpu0 = time.time(), daemon.cpu()
            time.sleep(opts.idle_seconds)
            t1, cpu1 = time.time(), daemon.cpu()
            memory = daemon.memory()
        finally:
            daemon.stop()
        calls = sqs_proxy.count(since=t0, until=t1)
        all_calls = sqs_proxy.count()
    window = t1 - t0
    out = {
        "seconds": round(window, 1),
        "cpu_percent": 100 * (cpu1 - cpu0) / window,
        "rss_mb": memory.get("VmRSS", 0) * 1024 / 1e6,
        "peak_rss_mb": memory.get("VmHWM", 0) * 1024 / 1e6,
        "sqs_requests": sum(calls.values()),
        "sqs_requests_per_minute": 60 * sum(calls.values()) / window,
        "sqs_by_operation": dict(calls),
        "sqs_requests_including_startup": dict(all_calls),
        "proxied": sum(all_calls.values()) > 0,
        "logs": str(rundir),
    }
    opts.say(
        f"    idle: {out['cpu_percent']:.3f} % CPU, RSS {out['rss_mb']:.1f} MB, "
        f"{out['sqs_requests']} SQS requests in {window:.0f} s {dict(calls)}"
    )
    return out

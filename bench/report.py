"""The one table `make bench` prints, and the targets each figure is held against."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from . import promises
from .cost_report import cost_rows


@dataclass
class Row:
    scenario: str
    figure: str
    value: str
    target: str = ""
    met: bool | None = None  # None: no target

    @property
    def verdict(self) -> str:
        return "" if self.met is None else ("ok" if self.met else "MISSED")


def _f(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _spread(results: dict[str, Any], key: str) -> str:
    """ "median (min - max)" of a ratio over its rounds; the pooled ratio when no spread was kept."""
    sp = results.get(f"{key}_spread")
    if not sp or not sp.get("rounds"):
        return _f(results[key], 3)
    return f"{_f(sp['median'], 3)} ({_f(sp['min'], 3)} - {_f(sp['max'], 3)})"


def _check(value: float, ok: bool) -> bool | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else ok


_KINDS = ("daemon", "daemon_asyncio", "daemon_async_handler", "daemon_ablated", "baseline", "floor", "limit", "naive")
_SHORT = {  # kind: (its name in the CPU rows, in the "same order" rows)
    "daemon": ("daemon", "daemon"),
    "daemon_asyncio": ("daemon on asyncio", "on asyncio"),
    "daemon_async_handler": ("daemon, async handler", "async handler"),
    "daemon_ablated": ("daemon, ablated", "ablated"),
    "baseline": ("baseline daemon", "baseline"),
    "floor": ("durable floor", "floor"),
    "limit": ("limit loop", "limit"),
    "naive": ("naive loop", "naive"),
}
_OTHER_RATIOS = (  # the burst's informational ratios: (kind, reference, label, what it tells)
    ("daemon_asyncio", "floor", "daemon (asyncio) / floor", "(the loop's share)"),
    ("daemon_async_handler", "floor", "daemon, async handler / floor", "(the hand-off's share)"),
    ("daemon_ablated", "floor", "daemon, ablated / floor", "(without --ablate's parts)"),
    ("baseline", "floor", "baseline daemon / floor", "(before / after)"),
    ("floor", "limit", "durable floor / limit", "(what the promise costs)"),
    ("daemon", "limit", "daemon / limit", "(the bare loop, for reference)"),
)


def _other_ratios(b: dict[str, Any], scenario: str, prefix: str) -> list[Row]:
    """The ratios beside the target's (prefix "" for throughput, "cpu_" for CPU), for the kinds that ran."""
    return [
        Row(scenario, f"{label}, median (min - max)", _spread(b, f"{prefix}{kind}_over_{ref}"), note)
        for kind, ref, label, note in _OTHER_RATIOS
        if f"{prefix}{kind}_over_{ref}" in b
    ]


def _target_row(b: dict[str, Any], scenario: str, prefix: str, loop: str) -> Row:
    """The daemon against the durable floor: throughput >= 0.95 x (prefix ""), CPU <= 1.3 x ("cpu_")."""
    ratio = b[f"{prefix}daemon_over_floor"]
    ok = ratio <= 1.3 if prefix else ratio >= 0.95
    return Row(
        scenario,
        f"daemon ({loop}) / durable floor, median (min - max)",
        _spread(b, f"{prefix}daemon_over_floor"),
        "<= 1.3" if prefix else ">= 0.95",
        _check(ratio, ok),
    )


def _burst_rows(b: dict[str, Any]) -> list[Row]:
    """Scenarios 1 and 2: every consumer's throughput and CPU, the daemon against the durable floor."""
    out: list[Row] = []
    s = f"1 burst: {b['daemon']['requests']} Creates each, {b.get('rounds', 1)} rounds"
    loop = b.get("event_loop") or "?"
    kinds = [k for k in _KINDS if k in b]
    labels = {
        "daemon": f"daemon (cfn-provider run, {loop})",
        "daemon_asyncio": "daemon on asyncio (--event-loop asyncio)",
        "daemon_async_handler": "daemon, async handler (no thread hand-off)",
        "daemon_ablated": f"daemon without {b.get('ablate', '?')} (bench.ablate_daemon)",
        "baseline": f"baseline daemon ({b.get('baseline_checkout', '--baseline')})",
        "floor": f"durable floor (claim, fsynced body, SENT per batch; {loop})",
        "limit": f"limit loop (receive, PUT, delete; {loop})",
        "naive": "naive loop (sync boto3, 1 at a time)",
    }
    for kind in kinds:
        flag = "" if b[kind]["verified"] else "  (unverified: see JSON)"
        out.append(Row(s, labels[kind], f"{_f(b[kind]['rps'])} req/s{flag}"))
    out.append(_target_row(b, s, "", loop))
    out.extend(_other_ratios(b, s, ""))
    if "daemon_over_naive" in b:
        out.append(Row(s, "daemon / naive", _f(b["daemon_over_naive"], 2)))
    order = ", ".join(_SHORT[k][1] for k in kinds)
    same = [
        ("emulator_busy", f"emulator busy: {order}", 2, " cores", "(one GIL: ~1 is full)"),
        ("emulator_cpu_ms_per_request", "emulator CPU per request: same order", 1, " ms", ""),
        ("sqs_calls_per_request", "SQS calls per request: same order", 2, "", ""),
        ("in_flight_mean", "messages in flight at SQS (mean): same order", 1, "", ""),
    ]
    for key, figure, digits, unit, target in same:
        value = " / ".join(_f(b[k].get(key, float("nan")), digits) for k in kinds) + unit
        out.append(Row(s, figure, value, target))
    s = "2 CPU per request"
    for kind in kinds:
        kernel = b[kind].get("cpu_sys_ms_per_request")
        value = f"{_f(b[kind]['cpu_ms_per_request'], 2)} ms" + (f" (sys {_f(kernel, 2)})" if kernel is not None else "")
        out.append(Row(s, f"{_SHORT[kind][0]} (user+sys)", value))
    out.append(_target_row(b, s, "cpu_", loop))
    out.extend(_other_ratios(b, s, "cpu_"))
    ceiling = f"{_f(1000 / b['daemon']['cpu_ms_per_request'], 0)} req/s"
    out.append(Row(s, "daemon's own ceiling on 1 core (1 / CPU)", ceiling))
    return out


def _promise_rows(pr: dict[str, Any]) -> list[Row]:
    """Scenario 12: each promise (the log line, admission, the PUT) against its own floor."""
    out = []
    for r in pr["rows"]:
        target = promises.TARGETS.get(r["promise"])
        out.append(
            Row(
                "12 promises: ours / own floor, CPU per call",
                f"{r['promise']} (floor: {r['floor']})",
                f"{_f(r['ratio'], 2)} ({_f(r['ratio_min'], 2)} - {_f(r['ratio_max'], 2)}); "
                f"{_f(r['ours_us'])} / {_f(r['floor_us'])} us",
                f"<= {target}" if target else "",
                _check(r["ratio"], r["ratio"] <= target) if target else None,
            )
        )
    return out


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    b = results.get("burst")
    if b:
        out += _burst_rows(b)
    sl = results.get("slow")
    if sl:
        s = f"3 slow: {sl['requests']} x 1 s, C={sl['concurrency']}"
        out.append(Row(s, "ideal M x 1 s / C", f"{_f(sl['ideal_s'])} s"))
        for key, label in (
            ("async_sleep", "async handler: wall, ideal/actual"),
            ("sync_sleep", "thread-pool handler: wall, ideal/actual"),
        ):
            run = sl[key]
            eff = run["efficiency"]
            flag = "" if run["verified"] else " (unverified)"
            out.append(
                Row(s, label, f"{_f(run['seconds'])} s, {_f(eff, 3)}{flag}", ">= 0.85", _check(eff, eff >= 0.85))
            )
    la = results.get("latency")
    if la:
        s = f"4 latency: {la['requests']} x every {int(la['interval_s'] * 1000)} ms"
        for key, label in (("delivery", "emulator SNS->SQS delivery"), ("daemon", "daemon publish->response in S3")):
            q = la[key]
            out.append(
                Row(
                    s,
                    f"{label} p50/p95/p99",
                    f"{_f(q['p50_ms'])} / {_f(q['p95_ms'])} / {_f(q['p99_ms'])} ms ({q['count']})",
                )
            )
        gap = la["p50_over_delivery_ms"]
        out.append(
            Row(
                s,
                "daemon p50 - delivery p50",
                f"{gap:+.1f} ms" if not math.isnan(gap) else "n/a",
                "<= +25 ms",
                _check(gap, gap <= 25),
            )
        )
    idl = results.get("idle")
    if idl:
        s = f"5 idle: {int(idl['seconds'])} s, 20 s long polls"
        out.append(Row(s, "daemon CPU", f"{_f(idl['cpu_percent'], 3)} %", "< 0.5 %", idl["cpu_percent"] < 0.5))
        out.append(
            Row(
                s,
                "daemon RSS (peak)",
                f"{_f(idl['rss_mb'])} MB ({_f(idl['peak_rss_mb'])})",
                "<= 80 MB",
                idl["rss_mb"] <= 80,
            )
        )
        by_op = ", ".join(f"{k} {v}" for k, v in sorted(idl["sqs_by_operation"].items())) or "none"
        out.append(
            Row(
                s,
                "SQS requests",
                f"{idl['sqs_requests']} ({_f(idl['sqs_requests_per_minute'])}/min: {by_op})",
                "~3/min",
            )
        )
    for key in ("scale", "scale_dynalite"):
        sc = results.get(key)
        if sc:
            out += _scale_rows(sc)
    inf = results.get("inflight")
    if inf:
        s = f"7 in flight: {inf['requests']} handlers x {_f(inf['sleep_s'], 0)} s at once"
        for kind, label in (("async", "async handlers"), ("sync", "sync handlers (thread pool)")):
            run = inf.get(kind)
            if not run:
                continue
            rss, peak = run["peak_rss_mb"], run["in_flight_peak"]
            flag = "" if run["verified"] else " (unverified)"
            reached = peak >= 0.9 * inf["requests"]  # else the figure is not the one the target is about
            if not reached:
                flag += f" (only {peak} in flight at once: not judged)"
            out.append(
                Row(
                    s,
                    f"{label}: peak RSS",
                    f"{_f(rss)} MB{flag}",
                    "<= 150 MB" if kind == "sync" else "",
                    _check(rss, rss <= 150) if kind == "sync" and reached else None,
                )
            )
            out.append(Row(s, f"{label}: drain, most in flight", f"{_f(run['seconds'])} s, {run['in_flight_peak']}"))
    po = results.get("polls")
    if po:
        s = f"8 waiting polls: {po['requests']}"
        if not po.get("available"):
            out.append(Row(s, "daemon CPU, RSS while they wait", po["note"], "<= 2 %, <= 200 MB"))
        else:
            flag = "" if po["verified"] else " (unverified: not all were waiting, or a poll ran)"
            out.append(
                Row(
                    s,
                    "daemon CPU while they wait",
                    f"{_f(po['cpu_percent'], 2)} %{flag}",
                    "<= 2 %",
                    po["cpu_percent"] <= 2,
                )
            )
            out.append(
                Row(s, "daemon RSS while they wait (max)", f"{_f(po['rss_mb'])} MB", "<= 200 MB", po["rss_mb"] <= 200)
            )
            out.append(Row(s, "time to get them all waiting", f"{_f(po['fill']['seconds'])} s (through SNS -> SQS)"))
    out += _lambda_rows(results.get("lambda"))
    out += _web_rows(results.get("web"))
    if results.get("promises"):
        out += _promise_rows(results["promises"])
    out += [Row(*row) for row in cost_rows(results.get("cost"))]
    return out


def _web_rows(w: dict[str, Any] | None) -> list[Row]:
    """Scenario 10: the web listener over HTTPS, sync and async (bench.web_listener)."""
    if not w:
        return []
    out: list[Row] = []
    for key in ("sync", "async"):
        run = w[key]
        s = f"10 web (HTTPS): {run['requests']} {key}, {run['concurrency']} in flight"
        flag = "" if run["verified"] else "  (unverified: see JSON)"
        out.append(Row(s, "requests/s (each until answered)", f"{_f(run['rps'])} req/s{flag}"))
        q = run["answer"]
        out.append(
            Row(
                s,
                "to the answer p50 / p99" + ("" if key == "sync" else " (at the ResponseURL)"),
                f"{_f(q['p50_ms'])} / {_f(q['p99_ms'])} ms",
            )
        )
        if key == "async":
            q = run["round_trip"]
            out.append(Row(s, "to the 200 p50 / p99", f"{_f(q['p50_ms'])} / {_f(q['p99_ms'])} ms"))
        out.append(Row(s, "daemon CPU per request", f"{_f(run['cpu_ms_per_request'], 2)} ms"))
    for key in ("sync_lone", "async_lone"):
        run = w[key]
        s = f"10 web (HTTPS): {run['requests']} {key.split('_')[0]}, one at a time"
        q = run["answer"]
        out.append(Row(s, "to the answer p50 / p99", f"{_f(q['p50_ms'])} / {_f(q['p99_ms'])} ms"))
    return out


def _lambda_rows(fn: dict[str, Any] | None) -> list[Row]:
    """Scenario 9 (bench.functions): what a function's own process costs."""
    if not fn:
        return []
    s = f"9 lambda: isolation, {fn['calls_n']} calls"
    q = lambda key: f"{_f(fn[key]['p50_ms'], 2)} / {_f(fn[key]['p95_ms'], 2)} ms"  # noqa: E731
    return [
        Row(
            s,
            "cold start p50 (trivial / boto3 client)",
            f"{_f(fn['cold_trivial']['p50_ms'], 0)} / {_f(fn['cold_boto3']['p50_ms'], 0)} ms",
        ),
        Row(
            s, "warm process RSS (trivial / boto3 client)", f"{_f(fn['rss_trivial_mb'])} / {_f(fn['rss_boto3_mb'])} MB"
        ),
        Row(s, "per call p50 / p95: in process (plain sync handler)", q("in_process")),
        Row(s, "per call p50 / p95: isolated, cfnresponse over HTTPS", q("isolated_trivial")),
        Row(s, "per call p50 / p95: isolated, kept-open connection", q("isolated_kept_open")),
        Row(
            s,
            "isolation overhead per call, p50 (cfnresponse / kept open)",
            f"+{_f(fn['overhead_ms'], 2)} / +{_f(fn['overhead_kept_open_ms'], 2)} ms",
        ),
        *_fc_rows(fn, s, q),
    ]


def _fc_rows(fn: dict[str, Any], s: str, q: Any) -> list[Row]:
    """An `fc:` function's cold start and per call, beside lambda:'s (results older than it have none)."""
    if "cold_fc" not in fn:
        return []
    return [
        Row(s, "fc: cold start p50 (trivial FC function)", f"{_f(fn['cold_fc']['p50_ms'], 0)} ms"),
        Row(s, "fc: per call p50 / p95: isolated, urllib POST with Date", q("isolated_fc")),
        Row(s, "fc: isolation overhead per call, p50", f"+{_f(fn['overhead_fc_ms'], 2)} ms"),
    ]


def _scale_rows(sc: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    s = f"6 scale-out: {sc['requests']} Creates, {sc.get('state', 'dynamodb (dynalite)')}"
    if "unavailable" in sc:
        return [Row(s, "1, 2, 3 daemon processes", f"n/a: {sc['unavailable'][:70]}")]
    for p in ("1", "2", "3"):
        run = sc.get(p)
        label = f"{p} daemon process{'es' if p != '1' else ''}"
        if run is None:
            out.append(Row(s, label, "fleet mode not available yet"))
        elif "error" in run:
            out.append(Row(s, label, f"could not run: {run['error'][:60]}"))
        else:
            out.append(
                Row(
                    s,
                    label,
                    f"{_f(run['rps'])} req/s (x{_f(run['ratio_to_one'], 2)}), "
                    f"emulator {_f(run['emulator_busy'], 2)} cores",
                )
            )
    out.append(Row(s, "bottleneck", scale_bottleneck(sc)))
    if "dynalite_cpu_ms_per_request" in sc:
        out.append(Row(s, "dynalite CPU per request (all runs)", f"{_f(sc['dynalite_cpu_ms_per_request'], 2)} ms"))
    return out


def scale_bottleneck(sc: dict[str, Any]) -> str:
    runs = [sc[p] for p in ("3", "2", "1") if isinstance(sc.get(p), dict) and "rps" in sc[p]]
    if not runs:
        return "n/a"
    busy = runs[0]["emulator_busy"]
    if busy >= 0.8:
        return f"the emulator (moto {busy:.2f} cores busy; one GIL allows ~1)"
    if "dynalite" in sc.get("state", ""):
        return f"not moto ({busy:.2f} cores busy): the daemons or dynalite (its CPU below)"
    return f"the daemons, not the emulator (moto {busy:.2f} cores busy)"


def table(results: dict[str, Any], header: list[str]) -> str:
    rs = rows(results)
    widths = [
        max([len(h) for h in ("scenario",)] + [len(r.scenario) for r in rs]),
        max([len("figure")] + [len(r.figure) for r in rs]),
        max([len("value")] + [len(r.value) for r in rs]),
        max([len("target")] + [len(r.target) for r in rs]),
    ]
    lines = list(header)
    head = f"{'scenario':<{widths[0]}}  {'figure':<{widths[1]}}  {'value':<{widths[2]}}  {'target':<{widths[3]}}"
    lines += [head, "-" * (len(head) + 8)]
    last = None
    for r in rs:
        scenario = r.scenario if r.scenario != last else ""
        last = r.scenario
        lines.append(
            f"{scenario:<{widths[0]}}  {r.figure:<{widths[1]}}  {r.value:<{widths[2]}}  "
            f"{r.target:<{widths[3]}}  {r.verdict}".rstrip()
        )
    missed = [r for r in rs if r.met is False]
    lines.append("-" * (len(head) + 8))
    lines.append(
        f"targets met: {sum(1 for r in rs if r.met)}/{sum(1 for r in rs if r.met is not None)}"
        + (f"; missed: {', '.join(r.scenario.split(':')[0] + ' ' + r.figure for r in missed)}" if missed else "")
    )
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [asdict(r) | {"verdict": r.verdict} for r in rows(results) if r.met is not None]

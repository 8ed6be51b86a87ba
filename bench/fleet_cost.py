"""Scenario 11, what a fleet costs: the AWS calls one request makes on the DynamoDB store, counted at the
wire, against the minimum the promise needs, priced per million requests; and a member's idle cost.

Each round runs the real daemon (`--state dynamodb://TABLE`, signatures verified) against moto (SQS,
S3) and dynalite (DynamoDB), each behind a counting proxy on 127.0.0.1: bench.proxy for SQS and the
S3 PUTs, bench.dynamodb_proxy for DynamoDB (with the capacity each call consumed), and
tests.support.sns_signing's certificate server for the SNS certificate fetches. The requests are
SNS notifications signed as SNS signs them, put on the queue as SNS delivers them, n at once; then
the daemon is left idle for a window, whose calls give the cost of a member that waits.

Prices: bench.prices (us-east-1 list prices; their pages and date in docs/performance.md).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from cfn_provider.local.emulator import Provider

from . import prices
from .dynamodb_proxy import Call, CapacityProxy
from .harness import Consumer, EmulatorProcess, Request, build_requests, queue_depth
from .noise import spread
from .proxy import RecordingProxy
from .scenarios import Options

SQS_GROUPS = {
    "sqs_receive": ("ReceiveMessage",),
    "sqs_delete": ("DeleteMessage", "DeleteMessageBatch"),
    "sqs_visibility": ("ChangeMessageVisibility", "ChangeMessageVisibilityBatch"),
}
STARTUP_ONLY = ("GetQueueAttributes",)  # the daemon reads the queue's redrive policy once, at start
PERIODIC = ("Query",)  # the due-poll look (every --poll-interval): a cost of time, not of a request


def per_request(sqs_ops: Counter[str], puts: int, calls: list[Call], cert_fetches: int, n: int) -> dict[str, float]:
    """The counted calls of a burst of n requests, per request, by billed figure (bench.prices.BILLED_BY)."""
    grouped = {key: sum(sqs_ops[op] for op in ops) for key, ops in SQS_GROUPS.items()}
    known = {op for ops in SQS_GROUPS.values() for op in ops} | set(STARTUP_ONLY) | {"PUT"}
    other = sum(v for op, v in sqs_ops.items() if op not in known)
    mine = [c for c in calls if c.operation not in PERIODIC]
    out = {key: v / n for key, v in grouped.items()}
    out.update(
        sqs_other=other / n,
        dynamodb_writes=sum(c.is_write for c in mine) / n,
        dynamodb_wru=sum(c.billed_units for c in mine if c.is_write) / n,
        dynamodb_reads=sum(c.is_read for c in mine) / n,
        dynamodb_rru=sum(c.billed_units for c in mine if c.is_read) / n,
        dynamodb_failed_conditions=sum(bool(c.error) for c in mine) / n,
        s3_put=puts / n,
        sns_cert_fetch=cert_fetches / n,
    )
    out["messages_per_receive"] = 1 / out["sqs_receive"] if out["sqs_receive"] else float("nan")
    out.update(wru_by_step(mine))
    return out


def wru_by_step(calls: list[Call]) -> dict[str, float]:
    """Mean WRU of each request's 1st, 2nd and 3rd write to its item (claim, stored response, SENT mark
    on the happy path): where the units above the minimum go."""
    writes: dict[str, list[float]] = {}
    for call in sorted((c for c in calls if c.is_write and c.key), key=lambda c: c.at):
        writes.setdefault(call.key, []).append(call.billed_units)
    out = {}
    for step, name in enumerate(("claim", "save", "mark")):
        units = [w[step] for w in writes.values() if len(w) > step]
        out[f"wru_{name}"] = sum(units) / len(units) if units else float("nan")
    return out


def idle_rates(receive_starts: list[float], calls: list[Call], window: float) -> dict[str, float]:
    """Calls per second of an idle member: SQS from the spacing of its long polls (one at a time, so the
    mean gap between starts is the period; count / window when fewer than two started), DynamoDB
    units from the window's calls."""
    starts = sorted(receive_starts)
    if len(starts) >= 2:
        sqs = (len(starts) - 1) / (starts[-1] - starts[0])
    else:
        sqs = len(starts) / window
    return {
        "sqs_requests": sqs,
        "dynamodb_rru": sum(c.billed_units for c in calls if c.is_read) / window,
        "dynamodb_wru": sum(c.billed_units for c in calls if c.is_write) / window,
        "dynamodb_calls_per_minute": 60 * len(calls) / window,
    }


def priced(counts: dict[str, float]) -> dict[str, Any]:
    """Dollars per million requests: by row, what your bill shows, and with CloudFormation's SNS publish."""
    dollars = prices.per_million(counts)
    billed = prices.billed_total(dollars)
    return {"dollars": dollars, "billed": billed, "with_publish": billed + prices.upstream_per_million()}


# ---------------------------------------------------------------------------- one round
def _daemon(opts: Options, em: EmulatorProcess, provider: Provider, table: str, rundir: Path, **ends: str) -> Consumer:
    daemon = Consumer.daemon(
        em,
        provider,
        f"dynamodb://{table}",
        "trivial",
        rundir / "daemon.log",
        concurrency=opts.concurrency,
        response_endpoint=ends["aws"],
        env={
            "AWS_ENDPOINT_URL_SQS": ends["aws"],
            "AWS_ENDPOINT_URL_DYNAMODB": ends["dynamodb"],
            "STATE_DIRECTORY": str(rundir / "state"),
            **opts.daemon_env,
        },
        extra=["--event-loop", opts.event_loop],
    )
    daemon.args.remove("--no-verify-signatures")  # as deployed: every envelope's signature checked
    daemon.args += ["--trust-signing-cert-url", ends["certs"]]
    return daemon


def _deliver(em: EmulatorProcess, provider: Provider, signer: Any, requests: list[Request]) -> None:
    """What SNS does with CloudFormation's publishes: signed notifications onto the queue, 10 a call."""
    sqs = em.client("sqs")
    for i in range(0, len(requests), 10):
        entries = [{"Id": str(j), "MessageBody": signer.body(r.body)} for j, r in enumerate(requests[i : i + 10])]
        failed = sqs.send_message_batch(QueueUrl=provider.queue_url, Entries=entries).get("Failed")
        if failed:
            raise RuntimeError(f"send failed: {failed[:1]}")


def one_round(opts: Options, db: Any, ddb: CapacityProxy, tag: str, n: int, idle_s: float) -> dict[str, Any]:
    """n requests through a fresh emulator, table and daemon, then `idle_s` of nothing; the counts."""
    from tests.support.sns_signing import CertServer, Signer

    rundir = opts.logdir / tag
    rundir.mkdir(parents=True, exist_ok=True)
    table = f"cfn-cost-{uuid.uuid4().hex[:8]}"
    db.create_table(table)
    with EmulatorProcess(rundir) as em, RecordingProxy(em.port) as aws, CertServer() as certs:
        provider = Provider.create(em)  # type: ignore[arg-type]  # duck-typed Emulator
        signer = Signer(provider, certs)
        requests = build_requests(em.client("s3", endpoint=aws.endpoint), provider, n)
        daemon = _daemon(
            opts, em, provider, table, rundir, aws=aws.endpoint, dynamodb=ddb.endpoint, certs=certs.base_url
        )
        started = time.time()
        try:
            daemon.start(settle=1.0)
            _deliver(em, provider, signer, requests)
            answered = daemon.wait_answered(n, max(60.0, n / 2))
            for _ in range(50):  # the batch's deletes may still be on their way
                if queue_depth(em.client("sqs"), provider.queue_url) == 0:
                    break
                time.sleep(0.2)
            busy_end = time.time()
            time.sleep(idle_s)
            idle_end = time.time()
        finally:
            daemon.stop()
        exchanges = aws.snapshot()
    cert_fetches = sum(certs.hits.values())
    busy = [e for e in exchanges if started <= e.sent_at < busy_end]
    idle = [e for e in exchanges if busy_end <= e.sent_at < idle_end]
    counts = per_request(
        Counter(e.operation for e in busy),
        sum(1 for e in busy if e.method == "PUT" and e.status == 200),
        ddb.calls_between(started, busy_end),
        cert_fetches,
        n,
    )
    rates = idle_rates(
        [e.sent_at for e in idle if e.operation == "ReceiveMessage"],
        ddb.calls_between(busy_end, idle_end),
        idle_end - busy_end,
    )
    return {
        "requests": n,
        "answered": daemon.answered,
        "verified": answered and daemon.answered >= n,
        "per_request": counts,
        "priced": priced(counts),
        "idle_seconds": round(idle_end - busy_end, 1),
        "idle_rates": rates,
        "idle_month": prices.idle_per_month(rates),
        "dynamodb_by_operation": dict(Counter(c.operation for c in ddb.calls_between(started, busy_end))),
        "sqs_by_operation": dict(Counter(e.operation for e in busy)),
        "errors": daemon.errors[:3],
        "logs": str(rundir),
    }


# ---------------------------------------------------------------------------- the scenario
SPREAD_FIGURES = (
    "sqs_receive",
    "sqs_delete",
    "sqs_visibility",
    "messages_per_receive",
    "dynamodb_writes",
    "dynamodb_wru",
    "wru_claim",
    "wru_save",
    "wru_mark",
    "dynamodb_reads",
    "dynamodb_rru",
    "dynamodb_failed_conditions",
    "s3_put",
    "sns_cert_fetch",
)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Spreads (min / median / max over the rounds) of the counts, the dollars and the idle cost; the
    minimum beside them; the Lambda comparison at the medians."""
    out: dict[str, Any] = {"rounds": len(rounds), "runs": rounds, "minimum": dict(prices.MINIMUM)}
    out["per_request"] = {k: spread([r["per_request"][k] for r in rounds]) for k in SPREAD_FIGURES}
    keys = rounds[0]["priced"]["dollars"].keys()
    out["dollars_per_million"] = {k: spread([r["priced"]["dollars"][k] for r in rounds]) for k in keys}
    out["billed_per_million"] = spread([r["priced"]["billed"] for r in rounds])
    out["with_publish_per_million"] = spread([r["priced"]["with_publish"] for r in rounds])
    out["minimum_priced"] = priced(prices.MINIMUM)
    out["idle_sqs_per_month"] = spread([r["idle_rates"]["sqs_requests"] * prices.SECONDS_PER_MONTH for r in rounds])
    out["idle_dynamodb_calls_per_minute"] = spread([r["idle_rates"]["dynamodb_calls_per_minute"] for r in rounds])
    out["idle_rru_per_month"] = spread([r["idle_month"]["per_month"]["dynamodb_rru"] for r in rounds])
    out["idle_dollars_per_month"] = spread([r["idle_month"]["total"] for r in rounds])
    out["long_poll_floor_per_month"] = prices.long_poll_floor_per_month()
    out["idle_floor_dollars_per_month"] = prices.PRICES["sqs_request"].of(out["long_poll_floor_per_month"])
    fn = prices.lambda_per_million(**prices.LAMBDA_ASSUMED)
    out["lambda"] = {"assumed": dict(prices.LAMBDA_ASSUMED), "dollars": fn, "total": sum(fn.values())}
    out["break_even_requests_per_month"] = prices.break_even_requests_per_month(
        out["idle_dollars_per_month"]["median"], out["with_publish_per_million"]["median"], out["lambda"]["total"]
    )
    # the same SQS calls without the table: one host on SQLite (the store's calls are all DynamoDB's)
    out["sqlite_with_publish_per_million"] = spread([_without_table(r["priced"]) for r in rounds])
    out["sqlite_idle_dollars_per_month"] = spread([r["idle_month"]["dollars"]["sqs"] for r in rounds])
    out["sqlite_break_even_requests_per_month"] = prices.break_even_requests_per_month(
        out["sqlite_idle_dollars_per_month"]["median"],
        out["sqlite_with_publish_per_million"]["median"],
        out["lambda"]["total"],
    )
    out["verified"] = all(r["verified"] for r in rounds)
    return out


def _without_table(p: dict[str, Any]) -> float:
    return float(p["with_publish"] - p["dollars"]["dynamodb_wru"] - p["dollars"]["dynamodb_rru"])


def cost(opts: Options) -> dict[str, Any]:
    """`make bench`'s `cost` scenario: opts.rounds rounds of opts.cost_n requests, each followed by
    opts.cost_idle_s seconds idle; n/a (with the reason) without dynalite."""
    n, idle_s = opts.cost_n, opts.cost_idle_s
    try:
        from tests.support.dynalite import Dynalite, DynaliteMissing
    except ImportError as exc:  # the bench runs from the repository, where tests/ is
        return {"requests": n, "unavailable": f"tests.support.dynalite: {exc}"}
    rundir = opts.logdir / "cost"
    rundir.mkdir(parents=True, exist_ok=True)
    try:
        db = Dynalite(rundir / "dynalite.log").start()
    except DynaliteMissing as exc:
        return {"requests": n, "unavailable": str(exc)}
    try:
        with CapacityProxy(db.endpoint) as ddb:
            rounds = []
            for r in range(opts.rounds):
                run = one_round(opts, db, ddb, f"cost-{r + 1}", n, idle_s)
                opts.say(
                    f"    cost-{r + 1}: {run['answered']}/{n}, per request: SQS "
                    f"{run['per_request']['sqs_receive']:.2f} receive {run['per_request']['sqs_delete']:.2f} delete, "
                    f"DynamoDB {run['per_request']['dynamodb_writes']:.2f} writes "
                    f"{run['per_request']['dynamodb_wru']:.2f} WRU, ${run['priced']['billed']:.2f}/M; idle "
                    f"${run['idle_month']['total']:.3f}/month"
                )
                rounds.append(run)
    finally:
        db.stop()
    out = summarise(rounds)
    out["requests"] = n
    return out

"""Scenarios 7 and 8: many requests at once. 1000 slow handlers in flight (async, and sync in the
thread pool): peak RSS and time to drain; and 10,000 waiting polls (a hook until polling is merged).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .scenarios import Options, throughput_run

HANDLERS = {"async": "async_sleep", "sync": "sync_sleep"}


def inflight(opts: Options) -> dict[str, Any]:
    """`inflight_n` requests whose handlers each sleep `inflight_sleep` s, all published at once, to
    one daemon with --concurrency `inflight_n`: how many were in flight at once (at SQS: received,
    not yet deleted), the peak RSS, and the time from the first publish to the last answer
    ("drain"; its floor is the sleep plus the time moto takes to hand out every message)."""
    many = dataclasses.replace(opts, concurrency=opts.inflight_n)
    out: dict[str, Any] = {"requests": opts.inflight_n, "sleep_s": opts.inflight_sleep}
    for kind, handler in HANDLERS.items():
        run = throughput_run(
            many,
            "daemon",
            opts.inflight_n,
            f"inflight-{kind}",
            handler=handler,
            backlog=opts.inflight_n,
            properties={"SleepSeconds": str(opts.inflight_sleep)},
        )
        out[kind] = run
        opts.say(
            f"    inflight {kind}: peak RSS {run['peak_rss_mb']:.1f} MB, {run['in_flight_peak']} in flight at "
            f"most, drained in {run['seconds']:.1f} s"
        )
    return out


# ---------------------------------------------------------------------------- 10,000 waiting polls
def waiting_polls(opts: Options) -> dict[str, Any]:
    """10,000 requests from the long-running issue, all waiting on their polls at once, published
    through SNS -> SQS to a real daemon: the daemon's CPU % and RSS while they wait (targets <= 2 %
    CPU, <= 200 MB RSS). The scenario itself is bench/polls_waiting.py (also runnable alone)."""
    from . import polls_waiting

    waiting = 1000 if opts.idle_seconds < 60 else 10_000  # --quick: a tenth
    out = polls_waiting.run(
        waiting=waiting, seconds=min(60.0, opts.idle_seconds), logdir=opts.logdir / "polls", say=opts.say
    )
    during = out["while_waiting"]
    return {
        "available": True,
        "requests": waiting,
        "cpu_percent": during["cpu_percent"],
        "rss_mb": during["rss_max_mb"],
        "verified": out["verified"],
        "fill": out["fill"],
    }

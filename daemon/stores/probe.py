"""The store probe before a daemon says READY: one read of a key nobody writes.

`run` used to open the idempotency store lazily, so a daemon whose table was missing, whose role
could not read it, or whose network could not reach DynamoDB still said READY after its first
receive; the deploy gate (systemd's READY, then `check`) passed a release that could answer
nothing. The probe is a consistent GetItem (SQLite: a SELECT) of PROBE_KEY: no side effect, the
same permission every request needs first. It is retried with a capped backoff until it works or
the daemon is stopped, logging `store.probe_failed` each time, so READY (and with it the instance's
launch) waits for the store, and a store outage at start costs no crash loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from ..logs import get_logger
from .base import Store

log = get_logger("store")
PROBE_KEY = "cfn-provider-probe"  # never claimed: request keys are digests of a stack's ids
MAX_WAIT = 15.0  # seconds between two probes, at most


async def probe(store: Store, stopping: Callable[[], bool], max_wait: float = MAX_WAIT) -> bool:
    """True once the store answered a read; False if the daemon was stopped first."""
    attempt = 0
    while not stopping():
        attempt += 1
        try:
            await store.get(PROBE_KEY)
        except Exception as exc:  # noqa: BLE001 - any failure: the store is not usable yet
            wait = random.uniform(0, min(max_wait, 0.5 * 2**attempt))
            log.warning(
                "store.probe_failed",
                error=f"{type(exc).__name__}: {exc}"[:300],
                attempt=attempt,
                retry_in=round(wait, 1),
                detail="not READY until the idempotency store answers a read",
            )
            await asyncio.sleep(wait)
            continue
        if attempt > 1:
            log.info("store.probe_ok", attempts=attempt)
        return True
    return False

"""The claim step: one attempt at a request takes it in the idempotency store, or learns what stands in the way.

A claim ends in one of a closed set (`ClaimEnd`): the attempt holds the request (`acquired`); the
daemon is stopping and takes nothing new on (`released`); this ResponseURL was answered already
(`duplicate`); the request's polls answer it (`polling-elsewhere`); another attempt holds it, and
this copy was not to wait for it or the daemon started draining meanwhile (`wait`: hand the message
back, hidden for that lease); or an answer is stored that this copy may re-send (`replay`). A copy
another attempt holds waits here, in the daemon, the message kept hidden by its heartbeat, rather
than going back to the queue: every receive counts toward the dead-letter queue (docs/guarantees.md).

A copy whose caller waits on it (web[sync]) waits only until that caller's limit, and never starts
the handler after waiting: a takeover then would get only what is left of the caller's time (a dead
member's lease, 60 s by default, outlasts the 55 s limit), and the FAILED it stored would be every
later retry's answer. Such a copy ends `wait` instead (the web listener's 503 + Retry-After: the
seconds until the lease lapses, or 1 once the request is free), and the retry takes the request over
with its full budget.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, Protocol

from ..stores.base import CLAIMED, POLLING, Record, Store, url_digest
from .dead_letter import DeadLetter
from .outcome import Outcome
from .outlets import Outlet
from .request import Request, stored_form
from .store_calls import StoreCalls

ClaimEnd = Literal["acquired", "released", "duplicate", "polling-elsewhere", "wait", "replay"]


class Limits(Protocol):
    """What a claim reads of the worker's policy (cfn_provider.pipeline.worker.Policy), at each claim."""

    @property
    def lease_seconds(self) -> int: ...
    @property
    def wait_poll_max(self) -> float: ...


@dataclass(frozen=True)
class Attempt:
    """One attempt at a request: what its claim and its finish share."""

    request: Request
    token: str  # this attempt's claim token: every retry of its writes carries it (cfn_provider.stores.base)
    deadline: float  # the request's (epoch seconds): its SNS Timestamp plus its ServiceTimeout
    outlet: Outlet  # where its answer goes
    run_here: bool = True  # False: once claimed, stored for the poll scheduler to run (web, asynchronous)
    dead_letter: DeadLetter | None = None  # answering from the dead-letter queue (never waits here)

    @cached_property
    def digest(self) -> str:
        """The ResponseURL's digest (cfn_provider.stores.base.url_digest)."""
        return url_digest(self.request.response_url)


@dataclass(frozen=True)
class Claimed:
    end: ClaimEnd
    record: Record | None  # acquired: the record taken over, if any; else the one that stood in the way
    retry_in: float | None = None  # wait: seconds until a retry may take the request (else the record's lease)


class Claims:
    """Claims for `owner` (the daemon) in `store`; `draining` is set when the daemon stops receiving,
    `stopping` says whether its grace period is over."""

    def __init__(
        self,
        store: Store,
        calls: StoreCalls,
        owner: str,
        limits: Callable[[], Limits],
        draining: asyncio.Event,
        stopping: Callable[[], bool],
    ) -> None:
        self.store, self.calls, self.owner, self.limits = store, calls, owner, limits
        self.draining, self.stopping = draining, stopping

    async def claim(self, attempt: Attempt, outcome: Outcome) -> Claimed:
        """Claim the request; while another attempt holds it, wait (noting whom in `outcome`) and try again."""
        request, token, digest = attempt.request, attempt.token, attempt.digest
        lease, wire = self.limits().lease_seconds, stored_form(request)  # stored: poll steps, `cfn-provider requests`
        waited: Record | None = None  # the record this copy waited for, once it has
        while True:
            claim, cut_off = await self.calls.write(
                lambda: self.store.claim(request.key, self.owner, digest, lease, token=token, request=wire)
            )
            if cut_off:  # stopping: take nothing new on
                if claim.acquired:
                    await self.calls.write(lambda: self.store.release(request.key, token))
                return Claimed("released", None)
            if claim.acquired and waited is not None and attempt.outlet.caller_waits:  # its caller lost time
                await self.calls.write(lambda: self.store.release(request.key, token))
                return Claimed("wait", claim.record or waited, retry_in=1.0)  # free now: a retry gets it all
            if claim.acquired:
                return Claimed("acquired", claim.record)
            record = claim.record
            if record is None:  # refused, then gone before it could be read (an endpoint without ALL_OLD)
                await asyncio.sleep(0.05)
                continue
            end = self._in_the_way(attempt, record)
            if end != "wait":
                return Claimed(end, record)
            if outcome.waited_for is None:
                outcome.waited_for = record.owner
            if attempt.dead_letter is not None:
                return Claimed("wait", record)
            again, record = await self._waited_out(record, attempt.outlet.waits_until)
            if not again:
                return Claimed("wait", record)
            waited = record

    def _in_the_way(self, attempt: Attempt, record: Record) -> ClaimEnd:
        """What a refused claim meets in `record`: a stored answer, polls, or an attempt to wait for."""
        if record.answered(attempt.digest) and not attempt.outlet.caller_waits:  # a waiting caller gets the body
            return "duplicate"
        if record.state == POLLING or (not attempt.run_here and record.next_poll is not None):
            return "polling-elsewhere"  # polls answer it, not us
        if must_wait(record, attempt.digest, attempt.deadline):
            return "wait"
        return "replay"  # a stored answer not yet delivered here: re-send it, never re-run the handler

    async def _waited_out(self, record: Record, until: float | None) -> tuple[bool, Record]:
        """Wait for the attempt holding `record` (True: look again); False when the daemon drains meanwhile,
        its grace period's cancel comes, or `until` (a waiting caller's limit) passes first. With the
        record as last read (its lease: when a retry may find the request free)."""
        try:
            return await self._wait_out(record, until)
        except asyncio.CancelledError:
            if not self.stopping():
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
            return False, record

    async def _wait_out(self, record: Record, until: float | None) -> tuple[bool, Record]:
        """Until the attempt holding `record` lets go of it or its lease runs out (True): look
        again at the record now and then (early if the holder finishes), never later than its
        lease ends. False when the daemon starts draining meanwhile, or at `until`."""
        pause = 0.25
        while True:
            now_s = time.time()
            if until is not None and now_s >= until:
                return False, record
            remaining = min((record.lease_until or 0), until or float("inf")) - now_s
            try:
                await asyncio.wait_for(self.draining.wait(), min(max(remaining, 0.05), pause))
                return False, record
            except TimeoutError:
                pass
            pause = min(self.limits().wait_poll_max, pause * 2)
            now = await self.calls.call(functools.partial(self.store.get, record.key))
            if now is None or now.token != record.token or now.state != record.state or not now.leased(time.time()):
                return True, record
            record = now


def must_wait(record: Record, digest: str, deadline: float) -> bool:
    """Whether a claim that was refused must wait for the attempt holding the request: it is
    running the handler, or delivering an answer to this URL (re-sending it would answer
    twice), or holds a FAILED that this URL is to re-run once it is let go. A stored SUCCESS
    for another URL is re-sent at once, whoever holds it; so is a stored answer whose lease
    outlasts this copy's deadline (nothing waited for could still count: a lease written by an
    older release that parked an undeliverable answer for 30 days, for one)."""
    if record.state == CLAIMED:
        return True  # held (or, by a clock that runs ahead of ours, only just let go)
    if (record.lease_until or 0) > deadline:
        return False
    return record.leased(time.time()) and (record.url_digest == digest or record.status == "FAILED")

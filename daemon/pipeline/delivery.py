"""Delivery of an answer: store the body, send it through the request's outlet, then mark it sent or end the lease.

One collaborator for every path that answers: the worker (a fresh answer, a replay, the
dead-letter queue's FAILED) and the poll steps (cfn_provider.pipeline.poll_steps). The body is
stored before it is sent, so a crash after the handler returns is recovered by re-sending the
stored body, never by running the handler again (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..dialects.base import CLOUDFORMATION
from ..logs import get_logger
from ..stores.base import Store, url_digest
from .disposition import Disposition
from .outcome import Outcome
from .outlets import Outlet
from .request import Request
from .response import Response
from .store_calls import StoreCalls

log = get_logger("worker")


class Deliverer:
    """`outlet` is where answers go unless a call names another (the worker's: the ResponseURL);
    `stopping` says whether the daemon's grace period is over (a cut-short send is then handed back)."""

    def __init__(self, store: Store, calls: StoreCalls, outlet: Outlet, stopping: Callable[[], bool]) -> None:
        self.store, self.calls, self.outlet, self.stopping = store, calls, outlet, stopping

    async def store_body(self, request: Request, token: str, answer: Response) -> tuple[bool, bool]:
        """Store the answer under the attempt's claim: (stored, cut off by the grace period meanwhile).
        Not stored: another attempt holds the request now."""
        return await self.calls.write(lambda: self.store.save_response(request.key, token, answer.status, answer.body))

    async def store_and_send(
        self, request: Request, token: str, answer: Response, outcome: Outcome, deadline: float, outlet: Outlet
    ) -> Disposition:
        """The worker's answer: stored, then sent; handed back if the grace period ends while it is stored
        (whoever takes it next re-sends the stored body), left alone if another attempt took it over."""
        saved, cut_off = await self.store_body(request, token, answer)
        if cut_off and saved:
            outcome.delivered = False
            await self.end_lease(request, token)
            return Disposition.RELEASE
        if not saved:
            outcome.name = "lost-claim"
            log.error("store.lost_claim", detail="another worker took this request over; not sending")
            return Disposition.LEAVE
        return await self.send(request, answer.body, outcome, deadline, token=token, outlet=outlet)

    async def send(
        self,
        request: Request,
        body: bytes,
        outcome: Outcome,
        deadline: float | None = None,
        *,
        token: str | None,
        outlet: Outlet | None = None,
    ) -> Disposition:
        """Send the stored `body` to `outlet` (default: the ResponseURL), then mark it sent, or end the lease
        so a redelivery may try at once; `token`: the attempt's when it stored the body, None for a replay."""
        # CloudFormation stops listening at the request's deadline, so no PUT outlives it. ROS's
        # deadline is only a lower bound (its Timeout rarely reaches the properties): the URL's
        # expiry alone bounds that delivery.
        deadline = deadline if request.dialect is CLOUDFORMATION else None
        try:
            delivery = await (outlet or self.outlet).send(request, body, deadline)
        except asyncio.CancelledError:
            if not self.stopping():
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # in a task: never None
            outcome.delivered = False
            await self.end_lease(request, token)
            return Disposition.RELEASE  # the stored body is re-sent by whoever takes it next
        outcome.delivered, outcome.attempts = delivery.delivered, delivery.attempts
        if delivery.delivered:
            await self._mark_sent(request, token)
            return Disposition.DELETE
        await self.end_lease(request, token)  # a redelivery (new URL, or this one) may try at once
        outcome.delivery_error = delivery.detail
        hint = "the ResponseURL has expired or is forbidden" if delivery.expired else "the response was not accepted"
        log.error("response.undeliverable", detail=delivery.detail, hint=hint)
        return Disposition.DELETE  # nothing can reach CloudFormation through this URL any more

    async def _mark_sent(self, request: Request, token: str | None) -> None:
        digest = url_digest(request.response_url)
        try:
            await self.calls.write(lambda: self.store.mark_sent(request.key, digest, token))
        except Exception as exc:  # noqa: BLE001 - answered all the same: the message is done
            log.error(
                "store.mark_sent_failed",
                error=f"{type(exc).__name__}: {exc}"[:300],
                detail="answered, but the store could not record it; a redelivery may re-send it",
            )

    async def end_lease(self, request: Request, token: str | None) -> None:
        """Stop holding a stored answer that was not delivered (no-op when this attempt never held it)."""
        if token is not None:
            await self.calls.write(lambda: self.store.extend(request.key, token, 0))

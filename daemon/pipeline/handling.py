"""A claimed request's answer: from the request alone where possible, else from its handler, run under its deadline.

The worker asks for it once it holds the claim; a poll step asks for it when it runs an action the
web listener accepted without running it (cfn_provider.pipeline.poll_steps). A request answered from
the dead-letter queue gets that queue's FAILED instead of a run of its handler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from ..logs import get_logger
from ..metrics import Metrics
from ..progress import InProgress
from . import raised
from . import response as responses
from .cleanup import TimedOutCreates
from .dead_letter import DeadLetter
from .disposition import when_cut_short
from .pollable import accepted
from .request import Request
from .router import HandlerError, Router
from .runner import Context, HandlerTimeout, call, handler_budget

log = get_logger("worker")
HANDOFF_MARGIN = 60.0  # on shutdown, a request with less time left than this is answered FAILED, not handed off


class Handling:
    """The handlers (`router`) run on `executor` (a sync handler's thread), with the boto `session`
    their Context gives; `stopping` says whether the daemon's grace period is over; `allows(principal,
    ResourceType)` whether a principal was given that handler (cfn_provider.trust.tenants)."""

    def __init__(
        self,
        router: Router,
        executor: Executor,
        session: Any,
        metrics: Metrics,
        timed_out: TimedOutCreates,
        stopping: Callable[[], bool],
        allows: Callable[[str, str], bool] = lambda _principal, _type: True,
    ) -> None:
        self.router, self.executor, self.session, self.metrics = router, executor, session, metrics
        self.timed_out, self.stopping, self.allows = timed_out, stopping, allows

    async def answer(
        self, request: Request, deadline: float, dead_letter: DeadLetter | None = None
    ) -> responses.Response | InProgress:
        """Decide the answer: from the request alone where possible, else from the handler
        (`dead_letter`: the request came from the dead-letter queue, answered FAILED without the handler)."""
        if request.problems:
            return responses.failure(request, "invalid request: " + "; ".join(request.problems))
        if request.request_type == "Delete" and (
            not request.physical_id or responses.is_failed_create_marker(request.physical_id)
        ):
            return responses.success(request, None)  # nothing of ours was created: nothing to delete
        if dead_letter is not None:
            return dead_letter.answer(request)
        if request.request_type == "Delete" and responses.is_timed_out_marker(request.physical_id):
            return await self.timed_out.clean_up(request, deadline, self.run)
        return await self.run(request, deadline)

    async def run(
        self, request: Request, deadline: float, wait_for: asyncio.Future[Any] | None = None
    ) -> responses.Response | InProgress:
        """Run the request's handler (after `wait_for`, a timed-out Create's handler still running, for at
        most half of the time there is); a handler that raises or times out is a FAILED answer."""
        allowed = self.allows(request.principal, request.resource_type)  # as unnamed for a tenant not given it
        route = self.router.route(request.resource_type) if allowed else None
        if route is None:
            return responses.failure(request, f"no handler for {request.resource_type}")
        try:
            handler = route.handler()
        except HandlerError as exc:
            return responses.failure(request, str(exc))
        if wait_for is not None and not wait_for.done():  # the timed-out Create still runs here
            await self._wait_for_create(request, deadline, wait_for)
        budget = handler_budget(deadline - time.time(), request.service_timeout)
        context = Context(request, time.monotonic() + budget, self.session)
        started = time.monotonic()
        try:
            result = await call(
                handler,
                request,
                context,
                self.executor,
                on_cancel=lambda: when_cut_short(self.stopping(), deadline - time.time(), HANDOFF_MARGIN),
            )
        except HandlerTimeout as exc:
            answer = responses.cut_short(request, str(exc))
            if exc.orphan is not None and responses.is_timed_out_marker(answer.physical_id):
                self.timed_out.track(answer.physical_id, exc.orphan)
            return answer
        except Exception as exc:  # noqa: BLE001 - a raising handler is a FAILED answer
            log.warning("handler.raised", error=type(exc).__name__, exc_info=True)
            return responses.failure(request, raised.reason(exc))
        finally:
            self.metrics.handler_ran(request.resource_type, request.request_type, time.monotonic() - started)
        if isinstance(result, InProgress):
            return accepted(handler, request, result)
        return responses.success(request, result)

    @staticmethod
    async def _wait_for_create(request: Request, deadline: float, create: asyncio.Future[Any]) -> None:
        budget = handler_budget(deadline - time.time(), request.service_timeout)
        log.info(
            "timed_out_create.waiting",
            detail="the Create's handler is still running; waiting for it before calling delete",
            up_to_seconds=round(max(0.0, budget / 2), 1),
        )
        await asyncio.wait({create}, timeout=max(0.0, budget / 2))

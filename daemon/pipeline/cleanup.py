"""A Create cut short by its deadline, and the rollback Delete that follows it: the handler's
`delete` gets its chance to remove what the Create may have made after its answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..logs import get_logger
from ..progress import InProgress
from ..stores.base import Record, Store
from . import response as responses
from .request import Request, idempotency_key

log = get_logger("worker")

RunHandler = Callable[[Request, float, "asyncio.Future[Any] | None"], Awaitable[responses.Response | InProgress]]


def gave_marker(record: Record | None, request: Request) -> bool:
    """Whether `record` (a Create's) holds the FAILED answer that gave `request` its timed-out marker."""
    if record is None or record.status != "FAILED" or not record.body:
        return False
    try:
        doc = json.loads(record.body)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and doc.get("PhysicalResourceId") == request.physical_id
        and doc.get("LogicalResourceId") == request.logical_id
        and doc.get("StackId") == request.stack_id
    )


class TimedOutCreates:
    """Timed-out Creates whose handler still runs here (by marker), and their rollback Deletes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._orphans: dict[str, asyncio.Future[Any]] = {}

    def track(self, marker: str, orphan: asyncio.Future[Any]) -> None:
        """Remember a timed-out Create's handler still running here, for its rollback Delete."""
        self._orphans[marker] = orphan
        orphan.add_done_callback(lambda _: self._orphans.pop(marker, None))

    async def clean_up(
        self, request: Request, deadline: float, run_handler: RunHandler
    ) -> responses.Response | InProgress:
        """The rollback Delete of a Create that was cut short.

        The marker is attacker-chosen text on a Delete, so `delete` is called only when it is one
        this provider gave: it matches this Delete's stack, logical id, type and properties, and the
        store holds that Create's FAILED answer carrying exactly this marker. Anything else is
        answered SUCCESS without the handler (as for the failed-Create marker). A `delete` that
        fails (or times out) here is logged and answered SUCCESS too: the Create most likely made
        nothing, and the stack's rollback must not be stuck on it."""
        create_id = responses.timed_out_create(request)
        record = (
            await self.store.get(idempotency_key(request.stack_id, create_id, request.principal)) if create_id else None
        )
        if not gave_marker(record, request):
            log.warning(
                "timed_out_create.unverified",
                physical_id=request.physical_id[:120],
                detail="the Delete carries a timed-out-Create marker this provider did not give for this "
                "stack, resource and properties (or its record has expired): delete is not called",
            )
            return responses.success(request, None)
        answer = await run_handler(request, deadline, self._orphans.get(request.physical_id))
        if isinstance(answer, responses.Response) and not answer.ok:  # an InProgress is polled: see cleanup_failed
            return cleanup_failed(request, answer)
        log.info("timed_out_create.cleaned_up")
        return answer


def cleanup_failed(request: Request, answer: responses.Response) -> responses.Response:
    """`answer` is the FAILED of the rollback Delete that cleans up after a Create that was cut short
    (its `delete` raised or timed out, there or in a later poll step when it went long-running):
    answered SUCCESS, so the stack's rollback is not stuck on a resource that most likely never
    existed, and logged loudly, since it may have."""
    log.error(
        "timed_out_create.cleanup_failed",
        reason=answer.reason,
        physical_id=request.physical_id[:120],
        detail="delete failed after a Create that was cut short; answering SUCCESS so the rollback goes on: "
        "the Create may have made a resource that is now left behind (a leak): check for it",
    )
    return responses.success(request, None)

"""Whether an action's InProgress can be polled (`accepted`), and the FAILED an action that started work gets.

Both the worker's handler run (cfn_provider.pipeline.handling) and the poll steps
(cfn_provider.pipeline.poll_steps) use them.
"""

from __future__ import annotations

from typing import Any

from ..progress import POLL_FUNCTIONS, InProgress, poll_function
from . import response as responses
from .request import Request


def failed(request: Request, reason: str, physical_id: str | None) -> responses.Response:
    """FAILED for an action that started work: with its id when known (the rollback Delete gets it),
    else a Create's timed-out marker, so the rollback Delete still reaches the handler's `delete`."""
    if physical_id and request.request_type != "Delete":
        return responses.failure(request, reason, physical_id)
    return responses.cut_short(request, reason)


def accepted(handler: Any, request: Request, pending: InProgress) -> InProgress | responses.Response:
    """`pending` if the handler can be polled for this action, else FAILED saying why."""
    if poll_function(handler, request.request_type) is None:
        name = POLL_FUNCTIONS.get(request.request_type, "poll_<action>")
        return failed(
            request,
            f"the handler's {request.request_type.lower()} returned InProgress, but the handler "
            f"has no {name} or is_complete to poll it with",
            pending.physical_id,
        )
    try:
        pending.progress_json()
    except ValueError as exc:
        return failed(request, str(exc), pending.physical_id)
    return pending

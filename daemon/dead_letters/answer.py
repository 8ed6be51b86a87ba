"""The answer a dead-lettered request gets: FAILED, saying where the operator should look."""

from __future__ import annotations

import contextvars

import structlog

from ..pipeline import response as responses
from ..pipeline.request import Request

log = structlog.get_logger("worker")

DEAD_LETTER: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("dead_letter", default=None)
"""(dead-letter queue name, message id) while Worker.answer_dead_letter runs a message through the main path."""


def dead_letter_answer(request: Request, where: tuple[str, str]) -> responses.Response:
    queue_name, message_id = where
    log.error(
        "deadletter.answered",
        dead_letter_queue=queue_name,
        detail="the request ran out of receives on the queue; answering FAILED",
    )
    return responses.cut_short(
        request,
        (
            f"The provider could not process this request: it ran out of receives and was moved to the "
            f"dead-letter queue {queue_name}. Look in the provider's log for event deadletter.answered "
            f"(message {message_id}, RequestId {request.request_id})."
        ),
    )

"""The answer a dead-lettered request gets: FAILED, saying where the operator should look."""

from __future__ import annotations

from dataclasses import dataclass

from ..logs import get_logger
from . import response as responses
from .request import Request

log = get_logger("worker")


@dataclass(frozen=True)
class DeadLetter:
    """A message being answered from the dead-letter queue (Worker.answer_dead_letter), passed down the
    main path explicitly: a request nobody has answered gets `answer` instead of a run of its handler,
    and a copy another attempt holds is never waited for in the daemon (the watcher's next pass looks again)."""

    queue_name: str
    message_id: str

    def answer(self, request: Request) -> responses.Response:
        log.error(
            "deadletter.answered",
            dead_letter_queue=self.queue_name,
            detail="the request ran out of receives on the queue; answering FAILED",
        )
        return responses.cut_short(
            request,
            (
                f"The provider could not process this request: it ran out of receives and was moved to the "
                f"dead-letter queue {self.queue_name}. Look in the provider's log for event deadletter.answered "
                f"(message {self.message_id}, RequestId {request.request_id})."
            ),
        )

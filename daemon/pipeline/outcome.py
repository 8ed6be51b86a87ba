"""A request's outcome: what became of it, rendered as its one `request` log line and counted in the metrics.

The worker (cfn_provider.pipeline.worker) and the poll steps (cfn_provider.pipeline.poll_steps)
fill one `Outcome` as a request goes; whatever was left unset (None) is not in the line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..logs import get_logger
from ..metrics import Metrics
from ..trust.urls import redact
from .request import Request
from .response import Response

log = get_logger("worker")

OutcomeName = Literal[
    "answered",  # the answer (the handler's, or the request's own) stored and sent
    "replayed",  # a stored answer re-sent: the handler is never run again
    "replayed-scrubbed",  # a stored NoEcho answer past its replay window: FAILED with the stored id
    "duplicate",  # this ResponseURL was answered already: the copy is deleted
    "polling",  # a long-running action: its progress stored, the poll steps answer it
    "accepted",  # web (asynchronous): stored for a poll step to run its action
    "polling-elsewhere",  # a long-running request whose polls answer it
    "in-progress-elsewhere",  # another attempt holds it: handed back, hidden until that lease ends
    "released",  # the daemon is stopping: handed back for another worker
    "busy",  # web[sync]: its function's every process busy, nothing ran: claim let go of, the caller told to retry
    "lost-claim",  # another attempt took it over meanwhile: nothing sent from here
    "store-unreachable",  # the daemon is stopping while the store is down: handed back
    "interrupted",  # cancelled outright (a second signal)
    "waiting",  # a poll step: not done yet, looked at again later
]
OUTCOMES: frozenset[str] = frozenset(get_args(OutcomeName))


@dataclass
class Outcome:
    """What became of one request (or one poll step of it)."""

    name: OutcomeName | None = None  # rendered as `outcome`; None: it never got that far ("?" in the metrics)
    status: str | None = None  # SUCCESS | FAILED: the answer sent, or found
    physical_id: str | None = None
    reason: str | None = None  # a FAILED answer's
    owner: str | None = None  # the daemon whose attempt (or polls) answers it instead
    waited_for: str | None = None  # the daemon whose attempt this copy waited for first
    took_over_from: str | None = None  # the daemon whose lapsed claim this attempt took over
    delivered: bool | None = None
    attempts: int | None = None  # the delivery's
    delivery_error: str | None = None
    next_poll_in: float | None = None  # seconds
    polls: int | None = None  # a poll step: how many have run, this one included

    def answered(self, answer: Response) -> None:
        """The answer is about to be stored and sent."""
        self.name, self.status, self.physical_id = "answered", answer.status, answer.physical_id
        if not answer.ok:
            self.reason = answer.reason

    @property
    def final(self) -> bool:
        """A poll step that ended the request (its `request` line); any other step logs `poll`."""
        return self.name in ("answered", "replayed")

    def fields(self) -> dict[str, Any]:
        """The log line's fields: those set, `name` as `outcome`, in the order they are declared. Read
        from the instance's own dict: every field holds a plain value (dataclasses.asdict's deep copy
        cost 12 µs a request for nothing)."""
        return {("outcome" if k == "name" else k): v for k, v in vars(self).items() if v is not None}

    def log(self, event: str, request: Request, started: float, **extra: Any) -> None:
        """The line (`request`, or a poll step's `poll`): `started` is the monotonic time work began."""
        log.info(
            event,
            duration_ms=round((time.monotonic() - started) * 1000),
            response_url=redact(request.response_url),
            **extra,
            **self.fields(),
        )

    def count(self, metrics: Metrics, request: Request) -> None:
        metrics.request_done(request.request_type, self.name or "?", self.status)

"""Where a request's stored answer goes: its outlet.

The worker stores an answer first, then hands it to the request's outlet, and marks it sent
when the outlet says it was delivered. Two outlets exist:
- `ResponseUrl` (the default): POST or PUT to the request's ResponseURL(s) through the Responder,
  retried until the URL expires. The queues use it, and so does the web listener's asynchronous
  mode (and every poll step).
- the HTTP response a caller waits on (the web listener's `web[sync]` mode:
  cfn_provider.intake.web_requests.WaitingCaller). A caller waits on its connection, so
  every copy of a request is answered (an answered request's stored body is handed to each
  retry, never recomputed), the connection bounds the deadline, and nothing can be polled. Such
  a copy waits for another attempt only until its caller's limit, and never takes the request
  over after waiting (cfn_provider.pipeline.claim: a takeover gets its full budget or none).
"""

from __future__ import annotations

from typing import Protocol

from ..dialects.ros import ResponseUrlChoice
from .request import Request
from .responder import Delivery, Responder


class Outlet(Protocol):
    caller_waits: bool  # a caller waits for this copy's answer: answered copies get the stored body again
    waits_until: float | None  # when that caller stops waiting (epoch seconds); None: nobody waits

    def deadline(self, request: Request, deadline: float) -> float:
        """The handler's deadline (epoch seconds), given the request's own: no later than the outlet allows."""
        ...

    async def send(self, request: Request, body: bytes, deadline: float | None) -> Delivery:
        """Deliver the stored `body`; `deadline` is the request's when the dialect bounds delivery by it."""
        ...


class ResponseUrl:
    """The request's ResponseURL(s), in the order `url_choice` gives (ROS: intranet first, maybe)."""

    caller_waits = False
    waits_until: float | None = None

    def __init__(self, responder: Responder, url_choice: ResponseUrlChoice) -> None:
        self.responder, self.url_choice = responder, url_choice

    def deadline(self, request: Request, deadline: float) -> float:
        return deadline

    async def send(self, request: Request, body: bytes, deadline: float | None) -> Delivery:
        return await self.responder.send(self.url_choice.urls(request), body, request.dialect, deadline=deadline)

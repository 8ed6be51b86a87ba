"""Keep an in-flight message invisible (and its store lease alive) while it is worked on."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import structlog

from ..transports.queue import Message, Queue

log = structlog.get_logger("heartbeat")


class Heartbeat:
    """Every third of the visibility timeout, push the message's visibility (and any lease) out again."""

    def __init__(self, queue: Queue, message: Message, visibility_timeout: int):
        self.queue, self.message, self.visibility_timeout = queue, message, visibility_timeout
        self._extras: list[Callable[[], Awaitable[object]]] = []
        self.defer_seconds: float | None = None  # set by defer()

    def defer(self, seconds: float) -> None:
        """How long the message is to stay hidden when it is handed back with Disposition.DEFER
        (e.g. the time left on the lease of whoever holds its request)."""
        self.defer_seconds = seconds

    def also(self, extend: Callable[[], Awaitable[object]]) -> None:
        """Run `extend` on every beat too (e.g. the idempotency store's lease)."""
        self._extras.append(extend)

    async def run(self) -> None:
        interval = max(1.0, self.visibility_timeout / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.queue.set_visibility(self.message, self.visibility_timeout)
                for extend in self._extras:
                    await extend()
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried on the next one
                log.warning("heartbeat.failed", error=f"{type(exc).__name__}: {exc}")

"""Keep an in-flight message invisible (and its store lease alive) while it is worked on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..logs import get_logger
from ..transports.queue import Message, Queue

log = get_logger("heartbeat")


class Heartbeat:
    """Every third of the visibility timeout, push the message's visibility (and any lease) out again.

    `start()` ... `stop()` around the work: until the first beat is due there is only a timer, no
    task (most messages are done long before; a task per message, started and cancelled, was a
    measurable share of the daemon's CPU per request).

    Without a queue message (the web listener's requests: `Heartbeat(None, None, lease_seconds)`)
    only the extras beat: the store lease is all that holds such a request."""

    def __init__(self, queue: Queue | None, message: Message | None, visibility_timeout: int):
        self.queue, self.message, self.visibility_timeout = queue, message, visibility_timeout
        self._extras: list[Callable[[], Awaitable[object]]] = []
        self.defer_seconds: float | None = None  # set by defer()
        self.interval = max(1.0, visibility_timeout / 3)
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.interval, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._beats())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def defer(self, seconds: float) -> None:
        """How long the message is to stay hidden when it is handed back with Disposition.DEFER
        (e.g. the time left on the lease of whoever holds its request)."""
        self.defer_seconds = seconds

    def also(self, extend: Callable[[], Awaitable[object]]) -> None:
        """Run `extend` on every beat too (e.g. the idempotency store's lease)."""
        self._extras.append(extend)

    async def _beats(self) -> None:
        while True:
            try:
                if self.queue is not None and self.message is not None:
                    await self.queue.set_visibility(self.message, self.visibility_timeout)
                for extend in self._extras:
                    await extend()
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried on the next one
                log.warning("heartbeat.failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.interval)

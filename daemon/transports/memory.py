"""A queue in this process's memory, with SQS's semantics: for tests and local tools, not for serving.

A real implementation of the `Queue` interface (in the spirit of dramatiq's StubBroker), not a
mock: messages become invisible for their visibility timeout when received and come back when it
lapses; each receive hands out a new receipt handle and counts toward the message's receive count;
only the latest receipt may delete a message or change its visibility (as MNS; SQS's older
receipts sometimes still work, never rely on it); a receive long-polls up to `wait_seconds` for a
message to arrive or come back; with a dead-letter queue, a message received `max_receive_count`
times moves there on its next receive, as SQS's redrive policy does. The pipeline's own code
(poller, worker, heartbeat, deletes) runs on it unchanged. Not thread-safe: use it from one event
loop's thread (a test may `send` before the loop runs).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
import uuid
from dataclasses import dataclass

from ..errors import TransportError
from .queue import Message


class ReceiptHandleInvalid(TransportError):
    """The receipt is not the message's latest, or the message is gone (deleted or moved)."""


@dataclass
class _Stored:
    id: str
    body: str
    sent_at: dt.datetime
    visible_at: float = 0.0  # time.monotonic()
    receive_count: int = 0
    receipt: str | None = None  # the latest receipt handed out


class MemoryQueue:
    """`send()` what a producer (SNS, a test) would publish; the daemon consumes it through `Queue`."""

    max_batch = max_delete_batch = 10

    def __init__(
        self, name: str = "memory", *, dead_letter: MemoryQueue | None = None, max_receive_count: int = 0
    ) -> None:
        if dead_letter is not None and max_receive_count < 1:
            raise ValueError("a dead-letter queue needs max_receive_count >= 1")
        self.url = f"memory://{name}"
        self.dead_letter, self.max_receive_count = dead_letter, max_receive_count
        self._messages: dict[str, _Stored] = {}  # by id, in the order sent
        self._waiters: set[asyncio.Future[None]] = set()  # receives long-polling for a change
        self._receipts = itertools.count(1)
        self.deleted: list[str] = []  # ids, in the order they were deleted

    # ------------------------------------------------------------------ the producer's side
    def send(self, body: str, *, delay: float = 0.0) -> str:
        """Put a message on the queue (visible after `delay` seconds); its id."""
        message_id = str(uuid.uuid4())
        self._messages[message_id] = _Stored(
            message_id, body, dt.datetime.now(dt.UTC), visible_at=time.monotonic() + delay
        )
        self._notify()
        return message_id

    def visible(self) -> list[str]:
        """Ids of the messages a receive could take now."""
        now = time.monotonic()
        return [m.id for m in self._messages.values() if m.visible_at <= now]

    def in_flight(self) -> list[str]:
        """Ids of the messages received and still hidden."""
        now = time.monotonic()
        return [m.id for m in self._messages.values() if m.visible_at > now and m.receipt is not None]

    def __len__(self) -> int:
        return len(self._messages)

    def _notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ Queue
    async def receive(self, max_messages: int, wait_seconds: int, visibility_timeout: int) -> list[Message]:
        deadline = time.monotonic() + wait_seconds
        while True:
            taken = self._take(max_messages, visibility_timeout)
            left = deadline - time.monotonic()
            if taken or left <= 0:
                return taken
            # until a send or a visibility change, or the next hidden message comes back, within the wait
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, min(left, self._next_return()))
            except TimeoutError:
                pass
            finally:
                self._waiters.discard(waiter)

    def _next_return(self) -> float:
        now = time.monotonic()
        later = [m.visible_at - now for m in self._messages.values() if m.visible_at > now]
        return max(0.01, min(later)) if later else float("inf")

    def _take(self, max_messages: int, visibility_timeout: int) -> list[Message]:
        now = time.monotonic()
        out: list[Message] = []
        for stored in list(self._messages.values()):
            if len(out) >= max_messages:
                break
            if stored.visible_at > now:
                continue
            if self.dead_letter is not None and stored.receive_count >= self.max_receive_count:
                del self._messages[stored.id]  # the redrive policy: moved, with its count, never handed out
                self.dead_letter._messages[stored.id] = _Stored(
                    stored.id, stored.body, stored.sent_at, receive_count=stored.receive_count
                )
                self.dead_letter._notify()
                continue
            stored.receive_count += 1
            stored.visible_at = now + visibility_timeout
            stored.receipt = f"{stored.id}#{next(self._receipts)}"
            out.append(Message(stored.id, stored.body, stored.receipt, stored.sent_at, stored.receive_count))
        return out

    def _held(self, message: Message) -> _Stored:
        stored = self._messages.get(message.id)
        if stored is None or stored.receipt != message.receipt:
            raise ReceiptHandleInvalid(f"receipt {message.receipt!r} is not the latest for message {message.id}")
        return stored

    async def delete(self, message: Message) -> None:
        self._held(message)
        del self._messages[message.id]
        self.deleted.append(message.id)

    async def delete_batch(self, messages: list[Message]) -> dict[int, str]:
        failed: dict[int, str] = {}
        for index, message in enumerate(messages):
            try:
                await self.delete(message)
            except ReceiptHandleInvalid as exc:
                failed[index] = f"ReceiptHandleIsInvalid: {exc}"
        return failed

    async def set_visibility(self, message: Message, seconds: int) -> None:
        stored = self._held(message)
        stored.visible_at = time.monotonic() + seconds
        self._notify()

    async def has_dead_letter_queue(self) -> bool | None:
        return self.dead_letter is not None

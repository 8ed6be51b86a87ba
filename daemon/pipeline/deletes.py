"""Batched deletes: one DeleteMessageBatch for up to ten handled messages, not ten DeleteMessage calls.

A delete is queue bookkeeping after the answer is out, so it can wait a moment for company,
Nagle-style: with no batch on its way, what is waiting goes at the end of the current
event-loop turn (deletes that finish together go together); while a batch is on its way,
new deletes gather until it returns, the batch is full, or `linger` seconds pass (so one
slow call does not hold the others up). Under load batches fill by themselves; when idle a
delete goes at once. Each caller still awaits its own message's outcome, and a failure
reaches only the callers whose entries failed (the queue reports them per entry).

The poller also says which messages came in one receive (`expect`) and when one of them is done
without a delete (`done`): a waiting delete then also waits while another message of its receive
is still being worked on (for `company` seconds at most, 1 s), so the messages of one receive are
deleted in one call, as a loop that deletes each receive's batch does (the bench's durable floor):
deletes that went as each message's PUT returned averaged 5 a call, against 9.5 a receive brings,
and each call costs botocore's fixed price.

Profiling the burst bench put per-message DeleteMessage at 40% of the daemon's CPU, nearly
all of it botocore's fixed cost per call (signing, endpoint rules, hooks); batching also
takes most delete requests off SQS.
"""

from __future__ import annotations

import asyncio

from ..errors import TransportError
from ..transports.queue import Message, Queue

LINGER_SECONDS = 0.05
COMPANY_SECONDS = 1.0  # at most, for the rest of a waiting delete's receive


class DeleteBatcher:
    def __init__(
        self, queue: Queue, *, linger: float = LINGER_SECONDS, company: float = COMPANY_SECONDS, eager: bool = True
    ):
        self.queue, self.linger, self.eager = queue, linger, eager  # eager=False: always wait `linger`
        self.company = max(linger, company)
        self.max_batch = queue.max_delete_batch
        self._first_at = 0.0  # loop time when the oldest waiting delete came
        self._waiting: list[tuple[Message, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._receives: dict[int, _Receive] = {}  # id(message) -> its receive, while it is worked on
        self._held: list[_Receive] = []  # the receives of the waiting deletes

    def expect(self, messages: list[Message]) -> None:
        """`messages` came in one receive: each is to end in `delete` or `done`."""
        if len(messages) > 1:
            receive = _Receive(len(messages))
            for message in messages:
                self._receives[id(message)] = receive

    def done(self, message: Message) -> None:
        """`message` is done with and will not be deleted here (or was, already): its receive's
        waiting deletes no longer wait for it (idempotent)."""
        receive = self._receives.pop(id(message), None)
        if receive is not None:
            receive.working -= 1
            if not receive.working and self._waiting and self.eager:
                self._send_soon()

    async def delete(self, message: Message) -> None:
        """Delete `message` with the next batch; raises what the queue reported for it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # read even if its caller is gone
        self._waiting.append((message, done))
        receive = self._receives.pop(id(message), None)
        if receive is not None:
            receive.working -= 1
            self._held.append(receive)
        if len(self._waiting) >= self.max_batch:
            self._send()
        else:
            if self._timer is None:
                self._first_at = loop.time()
                self._timer = loop.call_later(self.linger, self._lingered)
            if self.eager:
                self._send_soon()
        await asyncio.shield(done)  # a cancelled caller must not cancel the others' outcome

    def _send_soon(self) -> None:
        """At the end of this event-loop turn, unless a batch is on its way or a waiting message's
        receive is still being worked on (then when that batch returns, the receive is done, or
        the linger ends, whichever is first)."""
        if self._sending or self._soon is not None or self._company_coming():
            return
        self._soon = asyncio.get_running_loop().call_soon(self._send)

    def _company_coming(self) -> bool:
        return any(receive.working for receive in self._held)

    def _lingered(self) -> None:
        """The linger is over: send, unless the rest of a waiting delete's receive may still come."""
        loop = asyncio.get_running_loop()
        left = self._first_at + self.company - loop.time()
        if left > 0 and self._company_coming():
            self._timer = loop.call_later(left, self._send)
        else:
            self._timer = None
            self._send()

    def _send(self) -> None:
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None
        self._held.clear()
        while self._waiting:
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
            task = asyncio.create_task(self._delete(batch), name="delete-batch")
            self._sending.add(task)
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if self.eager and self._waiting and not self._sending and not self._company_coming():
            self._send()  # gathered while it was on its way

    async def _delete(self, batch: list[tuple[Message, asyncio.Future[None]]]) -> None:
        try:
            failed = await self.queue.delete_batch([message for message, _ in batch])
        except Exception as exc:  # the whole call failed: every entry failed
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        except BaseException:  # cancelled (abandon): so are its callers' outcomes
            for _, done in batch:
                done.cancel()
            raise
        for index, (_, done) in enumerate(batch):
            if done.done():
                continue
            error = failed.get(index)
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(DeleteFailed(error))

    def abandon(self) -> None:
        """Stop now (a second stop signal): drop what waits, cancel what is being sent. Those
        messages come back after their visibility timeout, and their stored answers are replayed."""
        for handle in (self._timer, self._soon):
            if handle is not None:
                handle.cancel()
        self._timer = self._soon = None
        for _, done in self._waiting:
            done.cancel()
        self._waiting.clear()
        self._held.clear()
        self._receives.clear()
        for task in list(self._sending):
            task.cancel()

    async def close(self) -> None:
        """Send what is waiting and wait for every batch in flight."""
        self._send()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


class _Receive:
    """The messages of one receive still being worked on (not yet deleted or done with)."""

    __slots__ = ("working",)

    def __init__(self, working: int):
        self.working = working


class DeleteFailed(TransportError):
    """The queue refused to delete one entry of a batch (e.g. an expired receipt handle)."""

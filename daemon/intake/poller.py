"""Long-poll the queue and run each message as its own task.

Backpressure: a slot is taken for each message a receive may bring, before it is sent, so
the daemon never works on more than `concurrency` messages. A slot frees when its message's
work is done; the queue bookkeeping after it (a delete, batched by `DeleteBatcher`) does
not hold one. While the queue is busy (the last receive came back full) up to `receivers`
receives run side by side, so freed slots refill in one round trip rather than one per
batch of ten; otherwise there is one receive at a time (one long poll while idle), and
after a receive that brought some messages but not a full batch the next waits
`RECEIVE_PAUSE` (50 ms) so that a trickle gathers into fuller, fewer receives (SQS calls
cost CPU here and money at AWS; a request arriving in that pause waits for it).

Stopping has two phases (arq's pattern): stop receiving and let in-flight work finish
within the grace period; then cancel what is left, which the worker turns into a FAILED
answer (deadline too close to hand off) or a release back to the queue. The grace period
counts from the stop (the signal); the long poll open at that moment is let finish meanwhile,
side by side (what it brings is handed straight back), never before the grace period starts.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_never, wait_random_exponential

from ..logs import get_logger
from ..pipeline.deletes import DeleteBatcher
from ..pipeline.disposition import Disposition
from ..pipeline.heartbeat import Heartbeat
from ..pipeline.worker import Worker
from ..transports.queue import Message, Queue

log = get_logger("poller")
MAX_RECEIVERS = 4  # receives in flight at once while the queue is busy
RECEIVE_PAUSE = 0.05  # after a part-full receive, before the next: fuller batches, fewer calls
SETTLE_SECONDS = 15.0  # after the grace period: time for cancelled work to answer or release
MAX_VISIBILITY = 12 * 3600  # SQS's limit on a message's visibility timeout


class Poller:
    def __init__(
        self,
        queue: Queue,
        worker: Worker,
        *,
        concurrency: int = 32,
        visibility_timeout: int = 60,
        wait_seconds: int = 20,
        grace_period: float = 30.0,
        max_backoff: float = 20.0,
        on_ready: Callable[[], object] | None = None,
        on_receive_error: Callable[[], object] | None = None,
    ):
        self.queue, self.worker = queue, worker
        self.concurrency, self.visibility_timeout = concurrency, visibility_timeout
        self.wait_seconds, self.grace_period, self.max_backoff = wait_seconds, grace_period, max_backoff
        self.on_ready, self.on_receive_error = on_ready, on_receive_error
        self.receivers = max(1, min(MAX_RECEIVERS, math.ceil(concurrency / queue.max_batch)))
        self.deletes = DeleteBatcher(queue)
        self.started_at: dict[asyncio.Task[None], float] = {}  # in-flight task -> when it was received (monotonic)
        self.free = concurrency  # slots: a message takes one from before its receive until its work is done
        self._wakeup: asyncio.Future[None] | None = None  # the run loop waits on it (see _changes)
        self.tasks: set[asyncio.Task[None]] = set()
        self.has_dlq: bool | None = None
        self.handled = 0
        self.last_receive_ok: bool | None = None  # for the health file
        self.last_receive_at: float | None = None
        self.last_error: str | None = None
        self._stop = asyncio.Event()
        self._stopped_at: float | None = None  # monotonic time of the first stop(): the grace period starts there
        self._ready = False
        self._busy = False  # the last receive came back full
        self._receive_after = 0.0  # monotonic time before which no new receive starts
        self._receiving: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Stop receiving; in-flight work drains (idempotent)."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stop.set()
        drain = getattr(self.worker, "drain", None)
        if drain is not None:
            drain()  # copies waiting for another holder go back to the queue now
        self._wake()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def grace_left(self) -> float:
        """Seconds left of the grace period, which starts at the stop (all of it before then)."""
        if self._stopped_at is None:
            return self.grace_period
        return max(0.0, self._stopped_at + self.grace_period - time.monotonic())

    async def run(self) -> None:
        self.has_dlq = await self.queue.has_dead_letter_queue()
        if self.has_dlq is None:
            log.warning(
                "queue.redrive_unknown", detail="cannot read RedrivePolicy; bad messages will be left on the queue"
            )
        try:
            while not self.stopping:
                pause = self._receive_after - time.monotonic()
                if pause > 0:
                    await self._changes(timeout=pause)
                elif self._may_receive():
                    taken = min(self.free, self.queue.max_batch)
                    self.free -= taken
                    receiving = asyncio.create_task(self._receive_into(taken), name="receive")
                    self._receiving.add(receiving)
                    receiving.add_done_callback(self._received)
                else:
                    await self._changes()
            # side by side: the grace period is not kept waiting for the long poll open at the stop
            await asyncio.gather(self._release_late(), self._drain())
        finally:
            await self.deletes.close()

    def _may_receive(self) -> bool:
        """One receive for whatever slots are free; side by side with others only while the queue
        is busy, up to `receivers`, and for a whole batch of free slots (small receives cost as
        much as full ones)."""
        if not self._receiving:
            return self.free > 0
        return self._busy and len(self._receiving) < self.receivers and self.free >= self.queue.max_batch

    async def _changes(self, timeout: float | None = None) -> None:
        """Until a receive ends, a slot frees that allows a receive, stop is asked, or `timeout`.
        (One plain future, woken by those: the run loop waits here once per message.)"""
        loop = asyncio.get_running_loop()
        self._wakeup = loop.create_future()
        timer = loop.call_later(timeout, self._wake) if timeout is not None else None
        try:
            await self._wakeup
        finally:
            self._wakeup = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _received(self, task: asyncio.Task[None]) -> None:
        self._receiving.discard(task)
        self._wake()

    def _release(self, slots: int = 1) -> None:
        self.free += slots
        if self._may_receive():
            self._wake()

    def _forget(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.started_at.pop(task, None)

    def oldest_in_flight(self) -> float:
        """Seconds the oldest in-flight message has been worked on (0 when idle)."""
        return time.monotonic() - min(self.started_at.values()) if self.started_at else 0.0

    # ------------------------------------------------------------------ receiving
    async def _receive_into(self, taken: int) -> None:
        """One receive for `taken` slots; a task per message, unless stop came meanwhile."""
        messages: list[Message] = []
        try:
            messages = await self._receive(taken)
            self._busy = len(messages) == taken  # as many as asked for: likely more waiting
            if 0 < len(messages) < taken:  # messages trickling in: let a few gather for the next receive
                self._receive_after = time.monotonic() + RECEIVE_PAUSE
            if not self.stopping:
                self.deletes.expect(messages)  # one receive's deletes go together
                for message in messages:
                    task = asyncio.create_task(self._handle(message), name=f"message-{message.id}")
                    self.tasks.add(task)
                    self.started_at[task] = time.monotonic()
                    task.add_done_callback(self._forget)
                return
        finally:
            self._release(taken - (0 if self.stopping else len(messages)))
        for message in messages:  # stop came mid-poll: hand back what SQS gave us, at once
            await self._dispose(message, Disposition.RELEASE)
            log.info("message.released", message_id=message.id, detail="received as the daemon was stopping")

    async def _release_late(self) -> None:
        """Cancelling a long poll could strand messages SQS already handed over (hidden for a whole
        visibility timeout); let the polls in flight finish within the grace period (they hand back
        what they get)."""
        # cancelling our side does not end the poll at SQS: whatever arrives until it ends would be
        # handed to nobody, so outlast it (a second signal cancels it at once via abort())
        if not self._receiving:
            return
        poll_ends = (self._stopped_at or time.monotonic()) + self.wait_seconds + 5 - time.monotonic()
        _, late = await asyncio.wait(set(self._receiving), timeout=max(self.grace_left(), poll_ends))
        for receiving in late:
            receiving.cancel()
        if late:
            await asyncio.wait(late)

    async def _receive(self, count: int) -> list[Message]:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self.last_receive_ok, self.last_error = False, f"{type(exc).__name__}: {exc}"[:300]
            self._busy = False  # no more receives side by side while the queue cannot be reached
            if self.on_receive_error:
                self.on_receive_error()
            log.warning(
                "queue.receive_failed",
                error=f"{type(exc).__name__}: {exc}"[:300],
                attempt=state.attempt_number,
                retry_in=round(state.upcoming_sleep, 1),
            )

        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            stop=stop_never,
            before_sleep=before_sleep,
            wait=wait_random_exponential(multiplier=0.5, max=self.max_backoff),
        ):
            with attempt:
                messages = await self.queue.receive(count, self.wait_seconds, self.visibility_timeout)
        self.last_receive_ok, self.last_receive_at, self.last_error = True, time.time(), None
        if not self._ready:
            self._ready = True
            if self.on_ready:
                self.on_ready()
        return messages

    # ------------------------------------------------------------------ one message
    async def _handle(self, message: Message) -> None:
        if message.receive_count > 1:  # counted by the template's ReceivedAgain metric filter
            log.info("message.received_again", message_id=message.id, receive_count=message.receive_count)
        holding = True
        try:
            heartbeat = Heartbeat(self.queue, message, self.visibility_timeout)
            heartbeat.start()
            try:
                disposition = await self.worker.process(message, heartbeat)
            except asyncio.CancelledError:
                if not self.worker.stopping:
                    raise
                disposition = Disposition.RELEASE  # cut off by the grace period: hand it back
            finally:
                heartbeat.stop()
            holding = False
            self._release()  # the work is done: the bookkeeping below need not hold a slot
            await self._finish(self._dispose(message, disposition, heartbeat.defer_seconds))
            self.handled += 1
        except asyncio.CancelledError:
            pass  # hard stop: the message comes back when its visibility timeout lapses
        except Exception:  # noqa: BLE001 - one message must never take the daemon down
            log.exception("message.crashed")
        finally:
            self.deletes.done(message)  # (a no-op once it was deleted or disposed of)
            if holding:
                self._release()

    async def _finish(self, aw: Awaitable[None]) -> None:
        """Let queue bookkeeping complete even when the grace period's cancel lands meanwhile."""
        task = asyncio.ensure_future(aw)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not self.worker.stopping:
                raise
            await task

    async def _dispose(self, message: Message, disposition: Disposition, defer_seconds: float | None = None) -> None:
        if disposition is not Disposition.DELETE:
            self.deletes.done(message)  # the deletes of its receive need not wait for it
        try:
            if disposition is Disposition.DELETE:
                await self.deletes.delete(message)
            elif disposition is Disposition.RELEASE:
                await self.queue.set_visibility(message, 0)
            elif disposition is Disposition.DEFER:
                await self.queue.set_visibility(message, self.defer_seconds(message, defer_seconds))
            elif disposition is Disposition.REJECT:
                if self.has_dlq is False:
                    log.warning(
                        "message.deleted",
                        message_id=message.id,
                        detail="no dead-letter queue is configured, so the rejected message is deleted",
                    )
                    await self.deletes.delete(message)
        except Exception as exc:  # noqa: BLE001 - the message simply comes back later
            log.warning(
                "message.dispose_failed",
                message_id=message.id,
                disposition=disposition.value,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )

    def defer_seconds(self, message: Message, asked: float | None = None) -> int:
        """How long a deferred message stays hidden: what the worker asked for (the time left on
        the lease that blocks it, a backoff), else the visibility timeout; within SQS's 12 h.
        Every defer costs the message one receive of its maxReceiveCount (docs: receive budget)."""
        seconds = self.visibility_timeout if asked is None else asked
        return max(1, min(MAX_VISIBILITY, math.ceil(seconds)))

    # ------------------------------------------------------------------ stopping
    async def _drain(self) -> None:
        await drain(set(self.tasks), self.worker, self.grace_left())

    def abort(self) -> None:
        """Second signal: stop now, whatever is in flight."""
        self.stop()
        self.worker.stopping = False  # no more answering or releasing: just go
        for receiving in list(self._receiving):
            receiving.cancel()
        self.deletes.abandon()
        for task in list(self.tasks):
            task.cancel()


async def drain(tasks: set[asyncio.Task[Any]], worker: Worker, seconds_left: float) -> None:
    """The second phase of a stop (the poller's, the web listener's): let `tasks` finish within what
    is left of the grace period (it counts from the stop), then cancel the rest with
    `worker.stopping` set, so that the worker answers FAILED or hands each back, and give them
    SETTLE_SECONDS to."""
    if not tasks:
        return
    log.info("draining", in_flight=len(tasks), seconds_left=round(seconds_left, 1))
    _, pending = await asyncio.wait(tasks, timeout=seconds_left)
    if not pending:
        return
    log.warning("grace_period_over", cancelling=len(pending))
    worker.stopping = True
    for task in pending:
        task.cancel()
    await asyncio.wait(pending, timeout=SETTLE_SECONDS)

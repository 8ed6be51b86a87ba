"""Answer the requests left in the queue's dead-letter queue, so no stack hangs on one.

A request whose receives ran out on the queue (a handler that crashed the process each time,
an outage longer than maxReceiveCount allowed) is moved to the dead-letter queue named by the
queue's RedrivePolicy (SQS) or enabled DlqPolicy (MNS: DeadLetterTargetQueue), and nothing
would answer it: its stack would wait out the ServiceTimeout (an hour by default; ROS: its
Timeout). Every `interval` seconds each daemon looks there and puts
each message through the main path (`Worker.answer_dead_letter`): the same admission
(signature, topic allowlist, ResponseURL allowlist), the same store rules; only a request
nobody has answered gets FAILED, saying the provider could not process it and where to look,
instead of a run of its handler. The store's conditional claim decides who answers, so a whole
fleet may watch one dead-letter queue: one answer per request.

What becomes of each message (the worker's disposition):
- answered now, or already answered (the store says so), or undeliverable (URL expired):
  deleted from the dead-letter queue. Its answer is final, a `redrive` could only bring back a
  duplicate, and keeping it would make every pass of every daemon receive it and ask the store
  again. The `deadletter.answered` log event (error level) and the stored record keep the trace.
- held by another worker (claimed, or delivering under a live lease), or a transient failure
  (certificate fetch): hidden until the next pass, then looked at again.
- anything else (not a request, failed admission: forged, unsigned, foreign topic or URL; a
  lost claim): left in the dead-letter queue for the operator, never answered, hidden only
  LEAVE_SECONDS so that later receives of the same pass move past it; it stays visible to
  `redrive`, the console and depth alarms the rest of the time.

Each message is logged once as `deadletter.arrived` (warning) the first time this daemon sees it:
what a dead-letter alarm should count (arrivals), where the queue's depth would stay high for as
long as a message is left for the operator and so hide the next one.

Receives are spent sparingly: one pass at most every `interval` seconds (60 by default; the
first after a random part of it, so fleet members spread out), a pass ends at the first receive
that brings nothing new or after `max_per_pass` messages, and a message being worked on is kept
hidden by a heartbeat, like on the main path. The dead-letter queue normally has no redrive
policy of its own, so its receive counts are not a budget.

One message never stalls a pass: the worker does not wait in the daemon for a request another
attempt holds (DEFER: the next pass looks again), and a pass waits at most `message_seconds` for
any one message (a slow PUT, a store outage); one still being worked on then goes on in the
background, hidden by its heartbeat (`still-running`), and the pass moves on.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, OrderedDict
from collections.abc import Coroutine
from typing import Any

from ..logs import get_logger
from ..pipeline.disposition import Disposition
from ..pipeline.heartbeat import Heartbeat
from ..pipeline.worker import Worker
from ..transports.queue import Message, Queue
from ..trust.urls import redact

log = get_logger("deadletters")
DEFAULT_INTERVAL = 60.0  # seconds between passes
LEAVE_SECONDS = 30  # a message left for the operator is hidden this long: the pass moves past it
MAX_PER_PASS = 100  # messages looked at in one pass, at most
MESSAGE_SECONDS = 60.0  # a pass waits this long, at most, for one message (a delivery gets at least 30 s)
ARRIVALS_REMEMBERED = 10_000  # message ids already logged as deadletter.arrived, at most


def queue_name(url: str) -> str:
    """The queue's name, for Reasons and logs (the last part of its URL: SQS and MNS alike)."""
    return url.rstrip("/").rpartition("/")[2] or url


class DeadLetterWatcher:
    """`await run()` until `stop()`; `sweep()` is one pass (returns what became of the messages)."""

    def __init__(
        self,
        queue: Queue,
        worker: Worker,
        *,
        interval: float = DEFAULT_INTERVAL,
        visibility_timeout: int = 60,
        max_per_pass: int = MAX_PER_PASS,
        wait_seconds: int = 1,
        message_seconds: float | None = None,
    ):
        self.queue, self.worker = queue, worker
        self.name = queue_name(queue.url)
        self.interval, self.visibility_timeout = interval, visibility_timeout
        self.max_per_pass, self.wait_seconds = max_per_pass, wait_seconds
        self.message_seconds = MESSAGE_SECONDS if message_seconds is None else message_seconds
        self._stop = asyncio.Event()
        self._receive_failed = False  # said once until a receive works again
        self._behind: set[asyncio.Task[str]] = set()  # messages an earlier pass stopped waiting for
        self._arrived: OrderedDict[str, None] = OrderedDict()  # ids already logged as deadletter.arrived

    def stop(self) -> None:
        """No new pass, and the running one takes no new message (idempotent)."""
        self._stop.set()

    async def run(self) -> None:
        log.info("deadletter.watching", dead_letter_queue=self.name, interval=self.interval)
        try:
            await self._pause(random.uniform(0, self.interval))
            while not self._stop.is_set():
                await self.sweep()
                await self._pause(self.interval)
            if self._behind:  # stopping: the messages still being worked on are part of the last pass
                await asyncio.wait(set(self._behind))
        finally:
            for task in self._behind:
                task.cancel()

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def sweep(self) -> Counter[str]:
        """One pass over the dead-letter queue."""
        outcomes: Counter[str] = Counter()
        seen: set[str] = set()
        while len(seen) + len(self._behind) < self.max_per_pass and not self._stop.is_set():
            room = self.max_per_pass - len(seen) - len(self._behind)
            batch = await self._receive(min(self.queue.max_batch, room))
            fresh = [m for m in batch if m.id not in seen]
            if not fresh:
                break
            seen.update(m.id for m in fresh)
            for disposition in await self._bounded([self._one(m) for m in fresh]):
                outcomes[disposition] += 1
        if outcomes:
            log.info("deadletter.sweep", dead_letter_queue=self.name, **{k: v for k, v in sorted(outcomes.items())})
        return outcomes

    async def _bounded(self, work: list[Coroutine[Any, Any, str]]) -> list[str]:
        """Each message's outcome, waiting at most `message_seconds` for any of them: one still
        running then goes on in the background (its heartbeat keeps it hidden) as `still-running`."""
        tasks = [asyncio.create_task(w, name="dead-letter") for w in work]
        try:
            done, pending = await asyncio.wait(tasks, timeout=self.message_seconds)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        for task in pending:
            self._behind.add(task)
            task.add_done_callback(self._behind.discard)
        return [task.result() if task in done else "still-running" for task in tasks]

    async def _receive(self, count: int) -> list[Message]:
        try:
            messages = await self.queue.receive(count, self.wait_seconds, self.visibility_timeout)
        except Exception as exc:  # noqa: BLE001 - e.g. no sqs:ReceiveMessage on the DLQ: said once
            if not self._receive_failed:
                self._receive_failed = True
                log.error(
                    "deadletter.receive_failed",
                    dead_letter_queue=self.name,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                    detail="requests left in the dead-letter queue cannot be answered until this works",
                )
            return []
        self._receive_failed = False
        return messages

    async def _one(self, message: Message) -> str:
        """Put one message through the worker; carry out what it says. Returns what was done."""
        self._log_arrival(message)
        heartbeat = Heartbeat(self.queue, message, self.visibility_timeout)
        heartbeat.start()
        try:
            disposition = await self.worker.answer_dead_letter(message, heartbeat, self.name)
        except Exception:  # noqa: BLE001 - one message must never stop the watcher
            log.exception("deadletter.crashed", message_id=message.id)
            return "crashed"  # it comes back when its visibility lapses
        finally:
            heartbeat.stop()
        try:
            if disposition is Disposition.DELETE:
                await self.queue.delete(message)
                return "deleted"
            if disposition is Disposition.DEFER:
                await self.queue.set_visibility(message, max(1, int(self.interval)))
                return "deferred"
            await self.queue.set_visibility(message, LEAVE_SECONDS)
            return "left"
        except Exception as exc:  # noqa: BLE001 - the message simply comes back later
            log.warning(
                "deadletter.dispose_failed",
                message_id=message.id,
                disposition=disposition.value,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            return "dispose-failed"

    def _log_arrival(self, message: Message) -> None:
        if message.id in self._arrived:
            return
        self._arrived[message.id] = None
        if len(self._arrived) > ARRIVALS_REMEMBERED:
            self._arrived.popitem(last=False)
        log.warning(
            "deadletter.arrived",
            dead_letter_queue=self.name,
            message_id=message.id,
            receive_count=message.receive_count,
        )


async def watcher_for(
    queue: Queue, worker: Worker, *, interval: float, visibility_timeout: int
) -> DeadLetterWatcher | None:
    """The watcher of `queue`'s dead-letter queue; None (saying why) when it is off, the queue has
    none, or the transport cannot name it."""
    if interval <= 0:
        log.info(
            "deadletter.off",
            detail="--dead-letter-interval 0: requests left in the dead-letter queue are not answered by this daemon",
        )
        return None
    find = getattr(queue, "dead_letter_queue", None)
    if find is None:  # a transport that cannot name its dead-letter queue
        if await queue.has_dead_letter_queue():
            log.warning(
                "deadletter.unsupported",
                queue_url=redact(queue.url),
                detail="this transport's dead-letter queue is not watched: requests left there are not "
                "answered by the daemon: watch it",
            )
        return None
    try:
        dlq = await find()
    except Exception as exc:  # noqa: BLE001 - e.g. no sqs:GetQueueAttributes / GetQueueUrl permission
        log.error(
            "deadletter.unknown",
            error=f"{type(exc).__name__}: {exc}"[:300],
            detail="cannot find the queue's dead-letter queue; requests left there will not be answered",
        )
        return None
    if dlq is None:
        return None
    return DeadLetterWatcher(dlq, worker, interval=interval, visibility_timeout=visibility_timeout)

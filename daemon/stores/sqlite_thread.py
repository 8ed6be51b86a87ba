"""The thread that owns the SQLite store's connection (cfn_provider.stores.sqlite): every call
that may wait (an fsync, another process's lock) runs there, in order, off the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
# a queued call: (its future: asyncio's, or concurrent.futures' for `call`; the loop to hand it back on,
# None for `call`; the function; its arguments; durable)
Job = tuple[Any, "asyncio.AbstractEventLoop | None", Callable[..., Any], tuple[Any, ...], bool]


class OwnerThread:
    """The one thread that owns the SQLite connection: calls run on it in order. Each call is a
    queue entry; the thread takes what is queued in one pass, and each stretch of it (a durable
    group, or the plain calls between groups) goes back to the event loop in one
    `call_soon_threadsafe` (one wake-up of the loop for the stretch). The bench's profile showed a
    ThreadPoolExecutor's per-call machinery (a lock-guarded Future with its Condition, a work
    item, the thread-count check) as the daemon's busiest frame of its own.

    Durable writes (`run_durable`) queued together are handed to `group` together: the store
    runs them in one transaction, so they share one fsync (group commit). Each caller still
    hears of its write only once the fsync that covers it has returned."""

    def __init__(
        self,
        name: str,
        group: Callable[[list[tuple[Callable[..., Any], tuple[Any, ...]]]], list[tuple[Any, BaseException | None]]],
    ) -> None:
        self.stopped = False
        self._group = group
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the thread and wait for it (set-up, before any event loop is involved)."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((done, None, fn, args, False))
        return done.result()

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return self._submit(fn, args, False)

    def run_durable(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` through `group`, with the other durable writes queued meanwhile (for the
        store: inside one transaction it commits with an fsync)."""
        return self._submit(fn, args, True)

    def _submit(self, fn: Callable[..., T], args: tuple[Any, ...], durable: bool) -> asyncio.Future[T]:
        if self.stopped:
            raise RuntimeError("the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((future, loop, fn, args, durable))
        return future

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._jobs.put(None)
            self._thread.join()

    def _serve(self) -> None:
        while (first := self._jobs.get()) is not None:
            batch, stop = [first], False  # what is queued now: run in order, durable neighbours as one group
            while len(batch) < _MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            self._run_batch(batch)
            if stop:
                return

    def _run_batch(self, batch: list[Job]) -> None:
        """Neighbouring durable jobs as one group, the others one by one; each stretch's outcomes
        go back as soon as it is done (a job is not kept waiting for a later group's fsync)."""
        for durable, stretch in itertools.groupby(batch, key=lambda job: job[4]):
            jobs = list(stretch)
            if durable:
                try:
                    outcomes = self._group([(fn, args) for _, _, fn, args, _ in jobs])
                except BaseException as exc:  # noqa: BLE001 - handed to every caller of the group
                    outcomes = [(None, exc)] * len(jobs)
            else:
                outcomes = [_outcome(fn, args) for _, _, fn, args, _ in jobs]
            settled = zip(jobs, outcomes, strict=True)
            self._hand_back([(future, loop, result, error) for (future, loop, *_), (result, error) in settled])

    @staticmethod
    def _hand_back(settled: list[tuple[Any, Any, Any, BaseException | None]]) -> None:
        by_loop: dict[Any, list[tuple[Any, Any, BaseException | None]]] = {}
        for future, loop, result, error in settled:
            if loop is None:
                future.set_exception(error) if error is not None else future.set_result(result)
            else:
                by_loop.setdefault(loop, []).append((future, result, error))
        for loop, outcomes in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, outcomes)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass


_MAX_BATCH = 64  # jobs taken from the queue in one pass


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        return None, exc


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

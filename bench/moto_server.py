"""moto's server in a process of its own, so the bench can tell its CPU apart from the consumer's.

    python -m bench.moto_server      # prints one JSON line {"endpoint": ..., "pid": ...}, then serves
                                     # until stdin closes or SIGTERM/SIGINT arrives

Two races in moto's SQS are closed here (and only here), because real SQS has neither and
either one turns a benchmark into a 60 s wait for a visibility timeout:
- `Queue.delete_message` rebuilds the queue's message list without the lock `add_message`
  takes, so two deletes at once (the daemon deletes each message as it finishes) or a delete
  racing an SNS delivery can bring a deleted message back or drop a new one;
- `receive_message` checks that a message is visible and then marks it received, unlocked, so
  two concurrent receives can both be handed the same message.
Deletes take the queue's lock; receives take one lock, let go of it while they long-poll.

It also counts the calls it serves, by operation (X-Amz-Target's operation for SQS and
DynamoDB, else the HTTP method: PUT = a response uploaded, POST = an SNS publish); GET
/_bench/calls returns the counts so far as JSON.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter

from daemon.emulator import Emulator


def _close_sqs_races() -> None:
    from moto.sqs.models import Queue, SQSBackend

    unlocked_delete = Queue.delete_message

    def delete_message(self: Queue, receipt_handle: str) -> None:
        with self._messages_lock:
            unlocked_delete(self, receipt_handle)

    gate, holding = threading.Lock(), threading.local()
    unlocked_receive, unlocked_wait = SQSBackend.receive_message, Queue.wait_for_messages

    def receive_message(self: SQSBackend, *args: object, **kwargs: object) -> object:
        with gate:
            holding.gate = True
            try:
                return unlocked_receive(self, *args, **kwargs)
            finally:
                holding.gate = False

    def wait_for_messages(self: Queue, timeout: int) -> None:
        if not getattr(holding, "gate", False):
            return unlocked_wait(self, timeout)
        gate.release()  # other receives may run while this one long-polls
        try:
            unlocked_wait(self, timeout)
        finally:
            gate.acquire()

    Queue.delete_message = delete_message  # type: ignore[method-assign]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


def _count_calls() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    counts: Counter = Counter()
    lock = threading.Lock()
    dispatch = DomainDispatcherApplication.__call__

    def __call__(self: DomainDispatcherApplication, environ: dict, start_response: object) -> object:
        if environ.get("PATH_INFO") == "/_bench/calls":
            with lock:
                body = json.dumps(counts).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        operation = target.rsplit(".", 1)[-1] if target else environ.get("REQUEST_METHOD", "?")
        with lock:
            counts[operation] += 1
        return dispatch(self, environ, start_response)

    DomainDispatcherApplication.__call__ = __call__  # type: ignore[method-assign]


def main() -> int:
    _close_sqs_races()
    _count_calls()
    emulator = Emulator()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def watch_stdin() -> None:  # the bench died without a word: go too
        try:
            sys.stdin.read()
        finally:
            done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(json.dumps({"endpoint": emulator.endpoint, "pid": os.getpid()}), flush=True)
    done.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

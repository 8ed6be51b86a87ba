"""moto's server in a process of its own, so the bench can tell its CPU apart from the consumer's.

    python -m bench.moto_server      # prints one JSON line {"endpoint": ..., "pid": ...}, then serves
                                     # until stdin closes or SIGTERM/SIGINT arrives

Like every `cfn_provider.local.emulator.Emulator`, it runs with moto's two SQS races closed (see
there). Its receive's retention check reads the one attribute it needs (`_cheap_retention_check`:
moto computes every queue attribute there, a cost real SQS does not have), and so does its send
(`_cheap_send`). It also counts the
calls it serves, by operation (X-Amz-Target's operation for SQS and DynamoDB, else the HTTP
method: PUT = a response uploaded, POST = an SNS publish); GET /_bench/calls returns the counts
so far as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter

from cfn_provider.local.emulator import Emulator


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


def _cheap_retention_check() -> None:
    """moto checks each message it is about to return against the queue's retention period by
    computing *every* queue attribute (three passes over all its messages, a clock read per
    message), which makes a receive quadratic in the queue's length and its cost depend on how many
    messages the consumer holds in flight; real SQS has no such cost. Read the one attribute, the
    same comparison."""
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    def is_message_valid_based_on_retention_period(self: SQSBackend, queue_name: str, message: object) -> bool:
        retention_period = int(self.get_queue(queue_name).message_retention_period)
        return retention_period + message.sent_timestamp / 1000 > unix_time()  # type: ignore[attr-defined]

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]


def _cheap_send() -> None:
    """moto's send (SendMessage, and every SNS delivery to a queue) reads one flag,
    ContentBasedDeduplication, out of the queue's full attributes, whose three message counts are
    passes over the whole queue: a send's cost grew with the messages in flight. While a thread
    sends, `Queue.attributes` gives that thread the flag alone, as the full attributes hold it (on
    FIFO queues only); GetQueueAttributes and every other thread see the full attributes."""
    from moto.sqs.models import Queue, SQSBackend

    sending = threading.local()
    full = Queue.attributes
    send = SQSBackend.send_message

    def attributes(self: Queue) -> dict[str, object]:
        if not getattr(sending, "on", False):
            return full.fget(self)  # type: ignore[attr-defined,no-any-return]
        if not self.fifo_queue:
            return {}
        value = self.content_based_deduplication  # type: ignore[attr-defined]
        return {"ContentBasedDeduplication": str(value).lower() if isinstance(value, bool) else value}

    def send_message(self: SQSBackend, *args: object, **kwargs: object) -> object:
        sending.on = True
        try:
            return send(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            sending.on = False

    Queue.attributes = property(attributes)  # type: ignore[method-assign,assignment]
    SQSBackend.send_message = send_message  # type: ignore[method-assign,assignment]


def main() -> int:
    _count_calls()
    _cheap_retention_check()
    _cheap_send()
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

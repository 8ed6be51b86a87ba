"""Give moto's DynamoDB the one guarantee fleet mode rests on: a conditional write is atomic.

moto evaluates a ConditionExpression and then applies the write as two steps, with no lock,
while its server handles requests on many threads; two daemons claiming one key at the same
moment can then both succeed (seen: 31 of 300 keys raced by 6 clients). Real DynamoDB
applies each conditional write atomically per item. The tests therefore serialise moto's
DynamoDB request handling (server side, in this process); clients still talk to it over HTTP.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()


def make_dynamodb_writes_atomic() -> None:
    """Idempotent: wrap moto's DynamoDB request handler in one process-wide lock."""
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.call_action
    if getattr(original, "_atomic", False):
        return

    def call_action(self):  # type: ignore[no-untyped-def]
        with _lock:
            return original(self)

    call_action._atomic = True  # type: ignore[attr-defined]
    DynamoHandler.call_action = call_action  # type: ignore[method-assign]

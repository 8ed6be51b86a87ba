"""`InProgress`: what a long-running handler action returns instead of an answer (the poll contract).

    from cfn_provider import InProgress

    def create(event, context):
        op = start_snapshot(event["ResourceProperties"])
        return InProgress(progress={"Operation": op}, physical_id=op, after=30)

    def poll_create(event, context, progress):     # or one is_complete(event, context, progress)
        if not finished(progress["Operation"]):
            return InProgress(progress=progress, after=30)   # look again in 30 s
        return {"PhysicalResourceId": progress["Operation"], "Data": {...}}   # done: the usual result

The daemon stores `progress` (JSON) in its idempotency store, lets go of the queue message and
of the concurrency slot, and calls the module's poll function after `after` seconds, on whichever
fleet member finds it due, until it returns a result (SUCCESS), raises (FAILED) or the request's
deadline comes (FAILED, timed out). `physical_id`, once given, is the id every later answer
carries (a FAILED one too, so CloudFormation's rollback Delete reaches `delete` with it).
`no_echo=True` says the progress holds what the answer will hide (NoEcho Data, such as crhelper's
helper.Data with helper.NoEcho set): it is kept as a NoEcho body is, in clear only for the replay
window after it was stored (cfn_provider.trust.retention), and once set it stays set for the request.
"""

from __future__ import annotations

import json
import math
from typing import Any

DEFAULT_AFTER = 15.0  # seconds before the next poll when the handler does not say
MIN_AFTER, MAX_AFTER = 1.0, 3600.0
MAX_PROGRESS = 64 * 1024  # bytes of JSON; progress is a bookmark, not a data store
POLL_FUNCTIONS = {"Create": "poll_create", "Update": "poll_update", "Delete": "poll_delete"}


class InProgress:
    """Not an answer yet: look again after `after` seconds, with `progress` (JSON-serialisable)."""

    ok = True  # not a failure (code that checks a Response's `ok` passes it on)

    def __init__(
        self, progress: Any = None, physical_id: str | None = None, after: float = DEFAULT_AFTER, no_echo: bool = False
    ):
        if physical_id is not None and (not isinstance(physical_id, str) or not physical_id):
            raise TypeError("InProgress(physical_id=...) must be a non-empty str")
        try:
            after = float(after)
        except (TypeError, ValueError):
            raise TypeError("InProgress(after=...) must be a number of seconds") from None
        if not math.isfinite(after):
            raise TypeError("InProgress(after=...) must be a finite number of seconds")
        self.progress, self.physical_id, self.no_echo = progress, physical_id, bool(no_echo)
        self.after = min(MAX_AFTER, max(MIN_AFTER, after))

    def progress_json(self) -> str:
        """`progress` as JSON text; ValueError when it is not JSON-serialisable or too large."""
        try:
            text = json.dumps(self.progress, allow_nan=False, separators=(",", ":"), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"InProgress progress is not JSON-serialisable ({str(exc)[:200]})") from None
        if len(text.encode()) > MAX_PROGRESS:
            raise ValueError(f"InProgress progress is {len(text.encode())} bytes of JSON; the limit is {MAX_PROGRESS}")
        return text

    def __repr__(self) -> str:
        return f"InProgress(physical_id={self.physical_id!r}, after={self.after}, no_echo={self.no_echo})"


class Busy(InProgress):
    """The action could not start now (every process of a `lambda:` function busy): nothing was done.
    From a queue it is polled like any InProgress (the next try after `after` seconds); a caller
    waiting on its connection (web[sync]) is told to retry (503 + Retry-After) and the claim is let
    go of, so that its retry runs it (cfn_provider.pipeline.worker)."""

    def __repr__(self) -> str:
        return f"Busy(after={self.after})"


def poll_function(handler: Any, request_type: str) -> Any:
    """The handler's poll function for this action (`poll_create` ...) or its `is_complete`; None if neither."""
    for name in (POLL_FUNCTIONS.get(request_type, ""), "is_complete"):
        fn = getattr(handler, name, None) if name else None
        if callable(fn):
            return fn
    return None

"""How long a stored answer with NoEcho Data stays in clear: the replay window.

The store keeps each response body so that a redelivered message re-sends it instead of re-running
the handler, and so that CloudFormation retrying the operation (same StackId + RequestId, a new
ResponseURL) gets the same SUCCESS. Both can only happen while CloudFormation still waits for that
request: it waits at most the resource's ServiceTimeout (1..3600 s, default 3600) from when it sent
the request, then fails the operation and never asks for that RequestId again. A message that
reaches the daemon later (SQS keeps messages up to 14 days: a backlog after an outage, a redrive)
names a request nobody listens for; its presigned URL (about two hours) may still accept a PUT,
but CloudFormation ignores it.

So NoEcho Data is needed for at most the longest ServiceTimeout after the body is stored (the body
is stored after the request was sent, so this bounds every request's deadline), plus a margin
for clocks that disagree and a queue that is slow to deliver:

    NOECHO_REPLAY_WINDOW = 3600 s + 900 s = 4500 s (75 minutes) after the body is stored

After it the store replaces the body by a copy without Data (`scrub`): the record keeps its
status, ids and every ResponseURL digest answered, so duplicates are still recognised. A message
that then wants the stored SUCCESS again is answered FAILED with the stored PhysicalResourceId
(so the Delete that follows a failed operation removes what was made), never by re-running the
handler (a second Create would make a second resource) and never by sending the secret from
anywhere else. Past the window CloudFormation is not listening, so the FAILED only matters if
the window was wrong, and then it ends the wait instead of letting the stack hang.

Only bodies whose answer set NoEcho and carries Data are scrubbed; other bodies are kept (they
hold nothing a stack's outputs do not show) until the record expires.

The progress of a long-running request (cfn_provider.pipeline.poll_steps's PollState) follows the
same rule when the handler marked it NoEcho (`InProgress(no_echo=True)`; crhelper's helper.Data
with helper.NoEcho set): the store scrubs the handler's part of it (`scrub_progress`) a replay
window after it was last stored, with the body. It is only needed until the request's deadline,
which comes before that. Its bookkeeping (deadline, steps, the PhysicalResourceId so far) stays.
"""

from __future__ import annotations

import json
from typing import Any

NOECHO_REPLAY_WINDOW = 3600.0 + 900.0
SCRUBBED = 0.0  # `scrub_at` once the Data is gone (a record never scrubbed has None, or a future time)


def holds_secret(body: bytes | None) -> bool:
    """True for a response body with NoEcho set and non-empty Data."""
    doc = _load(body)
    return bool(doc and doc.get("NoEcho") is True and doc.get("Data"))


def scrub(body: bytes) -> bytes:
    """The body without its Data (and without NoEcho, which then hides nothing)."""
    doc = _load(body)
    if doc is None:
        return b""
    doc.pop("Data", None)
    doc.pop("NoEcho", None)
    return json.dumps(doc, separators=(",", ":")).encode()


def scrub_at(body: bytes, now: float) -> float | None:
    """When the body's NoEcho Data must leave the store (None: it holds none)."""
    return now + NOECHO_REPLAY_WINDOW if holds_secret(body) else None


def progress_scrub_at(progress: str, now: float) -> float | None:
    """When a stored progress's NoEcho part must leave the store (None: it is not NoEcho)."""
    doc = _load(progress.encode())
    return now + NOECHO_REPLAY_WINDOW if doc and doc.get("no_echo") is True and doc.get("progress") else None


def scrub_progress(progress: str) -> str:
    """The stored progress without what the handler put in it (kept: the daemon's bookkeeping)."""
    doc = _load(progress.encode())
    if doc is None:
        return ""
    doc["progress"] = None
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def past_window(scrub_time: float | None, now: float) -> bool:
    """True when a record's stored NoEcho Data is gone or due to go (scrubbed or not yet)."""
    return scrub_time is not None and scrub_time <= now


def physical_id(body: bytes | None) -> str | None:
    doc = _load(body)
    value = doc.get("PhysicalResourceId") if doc else None
    return value if isinstance(value, str) and value else None


def _load(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None

"""What happens to a queue message once the worker is done with it (the poller carries it out), and
to a request whose handler a stop cuts short."""

from __future__ import annotations

import enum


class Disposition(enum.Enum):
    DELETE = "delete"  # done with it
    LEAVE = "leave"  # let it come back after its visibility timeout
    DEFER = "defer"  # hide it for a while (Heartbeat.defer_seconds), then look again
    RELEASE = "release"  # make it visible again now, for another worker
    REJECT = "reject"  # bad input: leave for the dead-letter queue, or delete when there is none


def when_cut_short(stopping: bool, time_left: float, handoff_margin: float) -> str:
    """What becomes of a request whose handler a stop cuts short, as the worker decides it (its
    process(): `stopping` is False after a second signal), for the `handler.orphaned` line."""
    if not stopping:
        return (
            "the daemon is stopping at once (a second signal): the request is neither answered nor handed "
            "back, and its message comes back after its visibility timeout"
        )
    if time_left >= handoff_margin:
        return "the daemon is stopping: the request is handed back to the queue, for another worker to run"
    return (
        "the daemon is stopping: the request is answered FAILED (provider shutting down), too near its "
        "deadline to hand it off"
    )


STEP_HANDED_BACK = (
    "the daemon is stopping: this poll step is handed back (due now), for another daemon to "
    "take up from the stored progress"
)

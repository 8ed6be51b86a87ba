"""What happens to a queue message once the worker is done with it: the poller carries it out."""
from __future__ import annotations

import enum


class Disposition(enum.Enum):
    DELETE = "delete"  # done with it
    LEAVE = "leave"  # let it come back after its visibility timeout
    DEFER = "defer"  # hide it for a while (Heartbeat.defer_seconds), then look again
    RELEASE = "release"  # make it visible again now, for another worker
    REJECT = "reject"  # bad input: leave for the dead-letter queue, or delete when there is none

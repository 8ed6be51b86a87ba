"""A Store whose writes are applied but whose answers are lost: the network lying to the daemon.

    store = LyingStore(real_store, lie_at={1, 3})      # the 1st and 3rd write through it
    store = LyingStore(real_store, first_tries=True)   # the first try of every distinct write

Each chosen write is applied by the real store, then a botocore ReadTimeoutError is raised, as
when DynamoDB applied a write and the answer never arrived (a timeout, a reset): the caller
cannot tell it was applied. A retry with identical arguments is let through truthfully.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

WRITES = ("claim", "extend", "save_response", "mark_sent", "release", "save_progress", "take_poll")


class LyingStore:
    def __init__(self, store: Any, lie_at: Iterable[int] = (), first_tries: bool = False):
        self.store, self.lie_at, self.first_tries = store, set(lie_at), first_tries
        self.writes = self.lies = 0
        self._seen: set[tuple] = set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if name not in WRITES:
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            number = self.writes
            result = await attr(*args, **kwargs)
            call = (name, args, tuple(sorted(kwargs.items())))
            first = call not in self._seen
            self._seen.add(call)
            if number in self.lie_at or (self.first_tries and first):
                from botocore.exceptions import ReadTimeoutError

                self.lies += 1
                raise ReadTimeoutError(endpoint_url="http://store.invalid/")
            return result

        return write

"""The embedded daemon's log as simulate shows it. With --logs, every line on stderr. Without, the
daemon's errors on stderr, and each `handler.raised` line kept, so the traceback of a handler that
raised is printed under the failure it explains (its Reason says where the traceback is)."""

from __future__ import annotations

import io
import json
import re
import sys
from typing import Any

from ...pipeline.raised import TRACEBACK_HINT

_REQUEST_ID = re.compile(r"RequestId: ([0-9A-Za-z-]+)\)?$")


class DaemonLog(io.TextIOBase):
    """A text stream for cfn_provider.logs.configure (JSON lines) that keeps tracebacks by request id."""

    def __init__(self) -> None:
        super().__init__()
        self._partial = ""
        self.tracebacks: dict[str, str] = {}

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        try:
            record: Any = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return
        if record.get("event") == "handler.raised" and record.get("request_id"):
            self.tracebacks[str(record["request_id"])] = str(record.get("exception") or "")
        elif record.get("level") in ("error", "critical"):
            sys.stderr.write(line + "\n")

    def traceback_for(self, reason: str) -> str | None:
        """The traceback a Reason (`... (traceback in ...) (RequestId: X)`) points at, if it was kept."""
        match = _REQUEST_ID.search(reason)
        if TRACEBACK_HINT not in reason or match is None:
            return None
        return _trimmed(self.tracebacks.get(match.group(1)) or "") or None


_INTERNAL = ("/cfn_provider/", "/concurrent/futures/", "/asyncio/")


def _trimmed(text: str) -> str:
    """The traceback without the daemon's own frames (the runner, the thread pool), when any other remain."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Traceback"):
        return text
    frames, i = [], 1
    while i < len(lines) and lines[i].startswith("  File "):
        end = i + 1
        while end < len(lines) and lines[end].startswith("    "):
            end += 1
        frames.append(lines[i:end])
        i = end
    own = [f for f in frames if not any(part in f[0] for part in _INTERNAL)] or frames
    return "\n".join([lines[0], *(line for frame in own for line in frame), *lines[i:]])


def configure(show: bool) -> DaemonLog | None:
    """Configure the daemon's logging for simulate; the DaemonLog keeping tracebacks when lines are not shown."""
    from ... import logs

    if show:
        logs.configure("auto", "info", stream=sys.stderr)
        return None
    kept = DaemonLog()
    logs.configure("json", "warning", stream=kept)  # type: ignore[arg-type]  # a text stream
    return kept

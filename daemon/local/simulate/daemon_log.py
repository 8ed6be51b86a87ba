"""The embedded daemon's log as simulate shows it. With --logs, every line on stderr. Without, the
daemon's errors on stderr as one readable line each (a function's: its resource and its message,
never the JSON record), and each `handler.raised` line and each exception a function logged kept,
so the traceback is printed under the failure it explains (by the Reason's request id)."""

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
        self.function_tracebacks: dict[str, str] = {}  # a function's logged exception, by request id

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
            if str(record.get("event", "")).startswith("function.") and record.get("exception"):
                self.function_tracebacks.setdefault(str(record.get("request_id")), str(record["exception"]))
            sys.stderr.write(readable(record) + "\n")

    def traceback_for(self, reason: str) -> str | None:
        """The traceback a Reason (`... (traceback in ...) (RequestId: X)`) points at, if it was kept."""
        match = _REQUEST_ID.search(reason)
        if match is None:
            return None
        if TRACEBACK_HINT not in reason:  # a function's own Reason: the exception it logged, if any
            return _trimmed(self.function_tracebacks.get(match.group(1)) or "") or None
        return _trimmed(self.tracebacks.get(match.group(1)) or "") or None


_PLUMBING = {"event", "level", "timestamp", "logger", "exception", "request_id", "aws_request_id", "stack"}


def readable(record: dict[str, Any]) -> str:
    """An error line of the daemon's log as one line a person reads: a function's (its resource, its
    message, the exception's last line; the traceback is shown under the failure), or the daemon's
    own (its event and fields), never the JSON record."""
    exception = str(record.get("exception") or "").strip().splitlines()
    last = f": {exception[-1]}" if exception else ""
    if str(record.get("event", "")).startswith("function."):
        where = record.get("logical_id") or record.get("function") or "function"
        return f"error: {where} (function {record.get('function')}): {record.get('message', '')}{last}"
    fields = " ".join(f"{k}={v}" for k, v in record.items() if k not in _PLUMBING)
    return f"error: daemon {record.get('event', '')}{': ' + fields if fields else ''}{last}"


_INTERNAL = ("/cfn_provider/", "/concurrent/futures/", "/asyncio/", "/botocore/")


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

"""A function's output in the daemon's log: its logging records and printed lines, one log line each.

Each line carries the function's name and, during a call, the request's `request_id`, `stack`,
`logical_id` and the call's `aws_request_id`; it goes through the daemon's renderer (JSON or
console) and redaction like any other line (a ResponseURL's query string, credentials). A
record keeps its level (`function.log`, with its logger's name as `function_logger`); printed lines and
anything written to the process's stdout/stderr by other means are `function.output` at info.

NoEcho: a function may print its answer before it PUTs it (AWS's cfnresponse prints the body),
so during a call its lines are held until the answer arrives or the call ends; if the answer has
NoEcho, every Data value in it is taken out of those lines and of the call's later ones. Lines
beyond MAX_HELD (or MAX_HELD_BYTES) while held are counted and dropped (`function.output_dropped`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..logs import get_logger

MAX_HELD = 5000
MAX_HELD_BYTES = 2 * 1024 * 1024
MIN_SECRET = 4  # characters: shorter NoEcho values are not searched for (they would blank ordinary words)
LEVELS = {"debug", "info", "warning", "error", "critical"}

log = get_logger("function")


def secret_values(data: Any) -> list[str]:
    """Every scalar in NoEcho Data, as text and as it appears inside JSON, longest first."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif value is not None and not isinstance(value, bool):
            text = str(value)
            if len(text) >= MIN_SECRET:
                found.add(text)
                found.add(json.dumps(text)[1:-1])
                found.add(json.dumps(text, ensure_ascii=False)[1:-1])

    walk(data)
    return sorted(found, key=len, reverse=True)


class Output:
    """One execution environment's lines: live between calls, held during one until its answer."""

    def __init__(self, function: str):
        self.function = function
        self.call: dict[str, str] | None = None  # the ids of the call being served
        self.holding = False
        self.held: list[tuple[str, dict[str, Any]]] = []
        self.held_bytes = self.dropped = 0
        self.secrets: list[str] = []

    def begin(self, ids: dict[str, str]) -> None:
        self.end()
        self.call, self.holding, self.secrets = dict(ids), True, []

    def answered(self, no_echo_data: Any = None) -> None:
        """The call's answer arrived: take its NoEcho values out, and stop holding."""
        if no_echo_data is not None:
            self.secrets = secret_values(no_echo_data)
        self._flush()

    def end(self) -> None:
        """The call ended (returned, crashed, was killed): what is held goes out."""
        self._flush()
        self.call = None

    def record(self, level: str, message: str, logger: str | None = None, exc: str | None = None) -> None:
        fields: dict[str, Any] = {"message": message, "function_logger": logger}
        if exc:
            fields["exception"] = exc
        self._line(level if level in LEVELS else "info", "function.log", fields)

    def printed(self, text: str, stream: str) -> None:
        self._line("info", "function.output", {"message": text, "stream": stream})

    def _line(self, level: str, event: str, fields: dict[str, Any]) -> None:
        fields = {"function": self.function, **(self.call or {}), **fields}
        if not self.holding:
            self._emit(level, event, fields)
            return
        size = sum(len(str(v)) for v in fields.values())
        if len(self.held) >= MAX_HELD or self.held_bytes + size > MAX_HELD_BYTES:
            self.dropped += 1
            return
        self.held.append((level, {"event": event, **fields}))
        self.held_bytes += size

    def _flush(self) -> None:
        self.holding = False
        held, self.held, self.held_bytes = self.held, [], 0
        for level, fields in held:
            self._emit(level, fields.pop("event"), fields)
        if self.dropped:
            log.warning(
                "function.output_dropped",
                function=self.function,
                lines=self.dropped,
                **(self.call or {}),
                detail=f"more than {MAX_HELD} lines or {MAX_HELD_BYTES} bytes before the answer",
            )
            self.dropped = 0

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if self.secrets:
            fields = {k: _without(v, self.secrets) if isinstance(v, str) else v for k, v in fields.items()}
        getattr(log, level)(event, **fields)


def _without(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "<redacted>")
    return text

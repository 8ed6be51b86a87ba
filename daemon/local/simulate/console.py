"""What simulate prints: CloudFormation-style events and outputs on stdout; notes, warnings and the
progress indicator on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import click

from .state import STACK_TYPE


@dataclass
class Event:
    timestamp: str
    logical_id: str
    physical_id: str
    resource_type: str
    status: str
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "Timestamp": self.timestamp,
            "LogicalResourceId": self.logical_id,
            "PhysicalResourceId": self.physical_id,
            "ResourceType": self.resource_type,
            "ResourceStatus": self.status,
            "ResourceStatusReason": self.reason,
        }


def status_colour(status: str) -> str | None:
    if status.endswith("FAILED"):
        return "red"
    if "ROLLBACK" in status:
        return "yellow"
    if status.endswith("COMPLETE"):
        return "green"
    if status.endswith("SKIPPED"):
        return "cyan"
    return None


class Console:
    """Events and outputs on stdout; notes, warnings and the progress indicator on stderr."""

    SPINNER = "|/-\\"
    PLAIN_PROGRESS_EVERY = 10.0  # seconds between "still waiting" lines when stderr is not a terminal

    def __init__(self, logical_width: int = 20, type_width: int = 20, tty: bool | None = None):
        self.logical_width, self.type_width = logical_width, type_width
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._progress_shown = False
        self._frame = 0
        self._last_plain = 0.0
        self._header = False

    def widths(self, logical_ids: list[str], types: list[str]) -> None:
        self.logical_width = max([self.logical_width, *map(len, logical_ids)])
        self.type_width = max([self.type_width, *map(len, types)])

    def note(self, text: str) -> None:
        self.clear_progress()
        click.echo(click.style("note: ", fg="cyan") + text, err=True)

    def warn(self, text: str) -> None:
        self.clear_progress()
        click.echo(click.style("warning: ", fg="yellow") + text, err=True)

    def line(self, text: str = "", **style: Any) -> None:
        self.clear_progress()
        click.echo(click.style(text, **style) if style else text)

    def event(self, ev: Event) -> None:
        self.clear_progress()
        if not self._header:
            self._header = True
            click.echo(
                click.style(
                    self._row("TIMESTAMP (UTC)", "LOGICAL ID", "TYPE", "STATUS", "PHYSICAL ID", "REASON"), bold=True
                )
            )
        physical = "-" if ev.resource_type == STACK_TYPE else ev.physical_id or "-"  # the stack id is in the notes
        click.echo(
            self._row(
                ev.timestamp,
                ev.logical_id,
                ev.resource_type,
                ev.status,
                physical,
                ev.reason,
                colour=status_colour(ev.status),
            )
        )

    def _row(
        self, ts: str, logical: str, rtype: str, status: str, physical: str, reason: str, colour: str | None = None
    ) -> str:
        status_cell = f"{status:<44}"
        if colour:
            status_cell = click.style(status_cell, fg=colour)
        return (
            f"{ts:<24}  {logical:<{self.logical_width}}  {rtype:<{self.type_width}}  {status_cell}  "
            f"{physical}  {reason}"
        ).rstrip()

    def progress(self, text: str, elapsed: float, limit: float) -> None:
        if self.tty:
            self._frame = (self._frame + 1) % len(self.SPINNER)
            click.echo(
                f"\r\x1b[K{self.SPINNER[self._frame]} {text}: {elapsed:.0f} s of {limit:.0f} s",
                nl=False,
                err=True,
                color=True,
            )
            self._progress_shown = True
        elif elapsed - self._last_plain >= self.PLAIN_PROGRESS_EVERY:
            self._last_plain = elapsed
            click.echo(f"... {text}: {elapsed:.0f} s of {limit:.0f} s", err=True)

    def progress_done(self) -> None:
        self._last_plain = 0.0
        self.clear_progress()

    def clear_progress(self) -> None:
        if self._progress_shown:
            click.echo("\r\x1b[K", nl=False, err=True, color=True)
            self._progress_shown = False

"""One invocation of simulate: the backend and the embedded daemon up, the operation announced, run
(Ctrl-C included), summarised, and the exit status CloudFormation's outcome gives."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ..template import Template
from . import daemon_log, interrupts, template_functions
from .backend import Backend
from .console import Console, Event, status_colour
from .daemon_log import DaemonLog
from .engine import Engine
from .remember import Remembered
from .state import COMPLETE, INTERRUPTED, STACK_TYPE, StackState, write_state
from .template_functions import TemplateDefaults

# For tests, which run the commands inside pytest: never os._exit() there (see _exit_code).
HARD_EXIT_PAST_STUCK_HANDLERS = True


def announce(console: Console, backend: Backend, template: Template | None, state: StackState, path: Path) -> None:
    """Say what is about to be simulated (after the template's own notes)."""
    console.note(f"stack {state.name} ({state.stack_id}), kept in {path}")
    console.note(backend.describe() + "; handlers: " + (", ".join(backend.handler_names()) or "none"))
    console.note(state.remembered.describe())
    if template is None:
        return
    for note in template.notes:
        console.note(note)
    custom = template.custom
    if custom:
        console.note(f"ServiceToken of {', '.join(custom)} replaced by the simulated topic {backend.topic_arn}")
    for rtype in sorted({template.resources[k]["Type"] for k in custom}):
        if not backend.serves(rtype):
            hint = f"--handler '{rtype}'" if backend.available(rtype) else f"--handler '{rtype}=MODULE[:ATTR]'"
            console.warn(f"no handler serves {rtype}: its requests will be answered FAILED (add {hint})")
    types = [template.resources[k]["Type"] for k in template.order] + [r.type for r in state.resources.values()]
    console.widths(list(template.resources) + list(state.resources) + [state.name], types + [STACK_TYPE])


def run(
    kind: str,
    path: Path,
    options: Mapping[str, Any],
    make_state: Callable[[Backend], StackState],
    operation: Callable[[Engine, Backend, Console], str],
    previous: StackState | None = None,
    defaults: TemplateDefaults | None = None,
) -> None:
    """One operation: the options given now on top of what `previous` (the stack's state) remembers,
    and both on top of `defaults` (the template's own Lambda functions)."""
    kept = daemon_log.configure(options["show_logs"])
    remembered = (previous.remembered if previous else Remembered()).with_options(options)
    console = Console()
    status = ""
    engine: Engine | None = None
    try:
        emulator = previous.emulator if previous else None
        with interrupts.caught(), Backend(remembered, path, emulator, defaults) as backend:
            state = make_state(backend)
            state.remembered, state.emulator = remembered, backend.emulator_record
            for warning in backend.warnings:
                console.warn(warning)
            for served in backend.defaults.served:
                console.note(served)

            def save(st: StackState) -> None:
                write_state(path, st)

            engine = Engine(backend, state, console, save, options["wait_limit"])
            try:
                status = operation(engine, backend, console)
            except KeyboardInterrupt:
                interrupts.handled()
                console.clear_progress()
                if state.status.endswith("IN_PROGRESS"):
                    engine.interrupted(INTERRUPTED[kind])
                raise
    except KeyboardInterrupt:
        interrupts.handled()
        click.echo("interrupted", err=True)
        _exit(130)
    if status == "NO_CHANGES":
        _exit(0)
    if status == "DELETE_COMPLETE":
        for gone in (path, path.with_suffix(".emulator.log")):  # the stack's emulator sees its file go, and stops
            with contextlib.suppress(FileNotFoundError):
                gone.unlink()
        template_functions.forget(path)
    _summary(console, state, status, path, engine.failures if engine else [], kept)
    _exit(0 if status in COMPLETE else 1)


def _summary(
    console: Console, state: StackState, status: str, path: Path, failures: list[Event], kept: DaemonLog | None
) -> None:
    console.line()
    console.line(f"Stack {state.name}: {status}", bold=True, fg=status_colour(status))
    if state.status_reason and status not in COMPLETE:
        console.line(f"  {state.status_reason}")
    for ev in failures:
        console.line(f"  {ev.logical_id} {ev.status}: {ev.reason}", fg="red")
        traceback = kept.traceback_for(ev.reason) if kept else None
        if traceback:
            console.line("    " + traceback.rstrip().replace("\n", "\n    "), dim=True)
    if state.outputs and status in ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"):
        console.line("Outputs:")
        width = max(map(len, state.outputs))
        for name, entry in state.outputs.items():
            export = f"  (Export: {entry['ExportName']})" if entry.get("ExportName") else ""
            console.line(f"  {name:<{width}}  {entry['Value']}{export}")
    if status == "DELETE_COMPLETE":
        console.line(f"(state file {path} removed)")
    else:
        console.line(f"(state: {path})")


def _exit(code: int) -> None:
    """Exit; a sync handler still running on an abandoned request cannot be killed and Python would
    wait for its thread, so leave it behind (as `cfn-provider run` does)."""
    stuck = [t.name for t in threading.enumerate() if t.name.startswith("handler") and t.is_alive()]
    if stuck and HARD_EXIT_PAST_STUCK_HANDLERS:
        click.echo(f"note: leaving {len(stuck)} handler thread(s) still running behind", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

"""`simulate create|update --seed FILE`: a Python script of boto3 calls run against the stack's AWS
(its embedded emulator, or --endpoint) before the operation, to put there what the handlers expect
to find (a volume to snapshot, a hosted zone, a parameter). It runs in simulate's own process with
boto3 already pointed at that endpoint (AWS_ENDPOINT_URL, test credentials, AWS_REGION): a plain
`boto3.client("ec2")` reaches the emulator. A module-level dict named `parameters` gives template
parameters (a `--parameter` given on the command line wins), remembered for later operations."""

from __future__ import annotations

import runpy
import traceback
from typing import Any

import click

from .console import Console
from .state import SimulateError


def run_seed(path: str, console: Console, where: str) -> dict[str, str]:
    """Run the seed script at `path`; the template parameters it gives."""
    console.note(f"seed: running {path} against {where}")
    try:
        namespace: dict[str, Any] = runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code in (None, 0):
            return {}
        raise SimulateError(f"the seed script {path} exited with {exc.code!r}; nothing else was run") from None
    except Exception as exc:  # noqa: BLE001 - the author's script: show its traceback, stop before the stack
        click.echo(traceback.format_exc().rstrip(), err=True)
        raise SimulateError(
            f"the seed script {path} failed ({type(exc).__name__}: {exc}); nothing else was run"
        ) from None
    given = namespace.get("parameters", {})
    if not isinstance(given, dict) or not all(isinstance(k, str) for k in given):
        raise SimulateError(f"the seed script {path}: `parameters` must be a dict of parameter names to values")
    return {k: str(v) for k, v in given.items()}

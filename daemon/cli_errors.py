"""The command line's one way out for an error the operator can fix: `cfn-provider: <message>` and its exit code.

`cfn-provider` is a `Commands` group: a StartupError or OperatorError (cfn_provider.errors) raised
anywhere in a command, its option callbacks (a --config file) included, ends the command with
its message on one line of stderr and the class's exit code; no command catches them itself.
Anything else is not the operator's to fix and keeps its traceback. Click's own usage errors
(a bad option value on the command line) are click's: exit 2, with the usage.
"""

from __future__ import annotations

from typing import Any

import click

from .errors import CfnProviderError


def message(exc: CfnProviderError) -> str:
    """The line the operator sees (a message of several lines, e.g. a handler's import error, joined into one)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"cfn-provider: {' '.join(lines) or type(exc).__name__}"


class Commands(click.Group):
    """A click group whose commands end a product error with an exit code as one line (see the module docstring)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CfnProviderError as exc:
            if exc.exit_code is None:
                raise
            click.echo(message(exc), err=True)
            ctx.exit(exc.exit_code)

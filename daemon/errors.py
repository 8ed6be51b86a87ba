"""The product's exception hierarchy: one base, a branch per kind of failure, and the exit codes the CLI gives.

Everything cfn-provider raises derives from `CfnProviderError`, through one of these branches
(docs/architecture.md draws the tree with each class and where it lives):

- `StartupError`: the daemon or an operator command cannot start, and nothing was done: the
  config file, the store URL, the transport's settings, a state file open to others, the event
  loop, a handler or function that does not load, a function setting. The CLI catches it once
  (cfn_provider.cli_errors) and prints `cfn-provider: <message>`, exit 2.
- `OperatorError`: an operator command ran and could not do what it was asked (bootstrap, answer,
  invoke): `cfn-provider: <message>`, exit 1 (invoke: 2, as its help says).
- `NotAdmitted`: a message the pipeline does not act on, one class per outcome: `Rejected` (bad
  input), `Forged` (it may be forged), `Deferred` (not now: a signing certificate cannot be fetched yet).
- `InputError`: what a message, a request, a template or a URL says is not usable (the reasons
  admission turns into `Rejected` or `Forged`).
- `TransportError`: a queue, the network or the web listener refused or failed a call.
- `HandlerFailure`: a handler's action ended without a usable answer (timed out, crashed, or
  FAILED on purpose: a class with `reason_is_message = True` gives its message alone as the
  Reason, cfn_provider.pipeline.raised).

A class keeps the built-in base it had, as a second base, where code catches it by that base
(`except ValueError`: the SDK's PropertyError, the settings errors). Only `StartupError` and
`OperatorError` have an exit code: any other exception reaching the CLI is a bug and shows its traceback.

The module imports nothing of the package (the stale-install check loads it before anything else).
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FAILED = 1  # the command ran and failed (cfn-provider check: not healthy, ...)
EXIT_NOT_STARTED = 2  # a usage error (click's) or a start-up error: nothing was done


class CfnProviderError(Exception):
    """The base of every exception the product raises."""

    exit_code: ClassVar[int | None] = None  # None: not for the operator to fix; the CLI shows the traceback


class StartupError(CfnProviderError):
    """Nothing could start: the message says what to fix (the CLI: `cfn-provider: <message>`, exit 2)."""

    exit_code: ClassVar[int | None] = EXIT_NOT_STARTED


class TransportConfigError(StartupError, ValueError):
    """The queue transport or the web listener cannot be set up (e.g. MNS without credentials)."""


class OperatorError(CfnProviderError):
    """An operator command could not do what it was asked; the message says why (exit 1)."""

    exit_code: ClassVar[int | None] = EXIT_FAILED


class NotAdmitted(CfnProviderError):
    """A message the pipeline does not act on (cfn_provider.pipeline.admission): the subclass says
    what becomes of it, `event` how it is logged and counted."""

    event: ClassVar[str]


class Rejected(NotAdmitted):
    """Bad input: not a request, or not one this daemon can answer (logged `rejected`)."""

    event: ClassVar[str] = "rejected"


class Forged(NotAdmitted):
    """It may be forged: a signature, topic, delivery form or ResponseURL the daemon does not trust
    (logged `security`)."""

    event: ClassVar[str] = "security"


class Deferred(NotAdmitted):
    """Not now: worth looking at again later (a signing certificate that cannot be fetched yet;
    logged `deferred` when it first fails)."""

    event: ClassVar[str] = "deferred"


class InputError(CfnProviderError):
    """What a message, a request, a template or a URL says is not usable (the message says why)."""


class TransportError(CfnProviderError):
    """A queue, the network or the web listener refused or failed a call."""


class HandlerFailure(CfnProviderError):
    """A handler's action ended without a usable answer: its request is answered FAILED."""

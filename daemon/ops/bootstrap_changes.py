"""What `cfn-provider bootstrap` reports of each step: a Change (created, updated or exists), and
the error that stops it (cfn_provider.ops.bootstrap runs the steps)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OperatorError

CREATED, UPDATED, EXISTS = "created", "updated", "exists"


class BootstrapError(OperatorError):
    """Bootstrap cannot go on: an option, the region, or what it finds in the account (the message says which)."""


@dataclass(frozen=True)
class Change:
    kind: str  # "sns topic", "sqs queue", ...
    name: str  # ARN, URL or name
    action: str  # created | updated | exists
    detail: str = ""

    def describe(self, dry_run: bool) -> str:
        action = (
            {CREATED: "would create", UPDATED: "would update"}.get(self.action, self.action) if dry_run else self.action
        )
        line = f"{action:<13} {self.kind:<17} {self.name}"
        return f"{line}  ({self.detail})" if self.detail else line

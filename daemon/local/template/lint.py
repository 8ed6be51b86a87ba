"""A template checked by cfn-lint, used as a library (`cfnlint.api.lint`), before simulate runs
anything: each finding as `FILE:LINE:COLUMN: RULE message`, in cfn-lint's own words (its "did you
mean" included). Errors stop the run; warnings are shown. cfn-lint comes with the `simulate`
extra (the message says how to add it to this install: provider_source.install_hint)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import TemplateError

EXTRA = "simulate"  # the extra that installs what simulate needs: moto's server and cfn-lint


class MissingExtra(TemplateError):
    """What simulate needs is not installed; the message names the extra."""


def missing_extra(module: str, what: str) -> MissingExtra:
    from ..provider_source import install_hint

    return MissingExtra(f"simulate needs {what} (the Python module {module} is not installed): {install_hint(EXTRA)}")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    rule: str
    message: str
    severity: str  # error | warning | informational

    @property
    def error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.rule} {self.message}"


def lint(path: str, text: str, region: str = "us-east-1") -> list[Finding]:
    """cfn-lint's findings for the template `text` (read from `path`), in the order of the file."""
    try:
        from cfnlint.api import lint as cfn_lint  # type: ignore[import-untyped]  # no py.typed
    except ImportError:
        raise missing_extra("cfnlint", "cfn-lint to check templates") from None
    matches: list[Any] = cfn_lint(text, regions=[region])
    found = [
        Finding(
            path,
            int(m.linenumber),
            int(m.columnnumber),
            str(m.rule.id),
            str(m.message).strip(),
            str(getattr(m.rule, "severity", "error")).lower(),
        )
        for m in matches
    ]
    return sorted(found, key=lambda f: (f.line, f.column, f.rule))


def check(path: str, text: str, region: str = "us-east-1") -> list[Finding]:
    """The warnings (and informational findings) when there is no error; TemplateError listing every error otherwise."""
    findings = lint(path, text, region)
    errors = [f for f in findings if f.error]
    if errors:
        listed = "\n".join(f"  {f}" for f in errors)
        raise TemplateError(f"{path}: cfn-lint found {len(errors)} error(s); nothing was run:\n{listed}")
    return findings

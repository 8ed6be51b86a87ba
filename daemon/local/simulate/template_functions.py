"""The template's own Lambda functions, served by simulate as the template defines them.

A custom resource whose ServiceToken is `!GetAtt Fn.Arn` is served by `Fn` as a `lambda:` target
with the settings of its own resource (cfn_provider.local.template.lambdas: Handler, Code,
Environment.Variables, Timeout, MemorySize; values resolved as the template resolves them). An
inline function's source (Code.ZipFile) is written beside the stack's state file, as
STACK.functions/LOGICAL_ID/index.py, its folder. What is given on the command line (or remembered)
comes on top: a `--handler` for a type replaces the template's function for it (its settings then
apply only if that handler is a `lambda:` one too), and a `--function` setting replaces the
template's value of that setting.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..template import NO_VALUE, StackInfo, Template, TemplateError, lambdas


@dataclass
class TemplateDefaults:
    """The --handler and --function values the template's functions give, and what was left out."""

    handlers: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)  # said before the operation: what serves what
    notes: list[str] = field(default_factory=list)  # warned: what could not be used

    def merged(self, handlers: list[str], functions: list[str]) -> tuple[list[str], list[str]]:
        """These defaults with the given (or remembered) --handler and --function values on top."""
        by_type = {_type(h): h for h in self.handlers}
        given = {_type(h): h for h in handlers}
        by_type.update(given)
        lambda_types = {t for t, h in by_type.items() if h.partition("=")[2].strip().startswith("lambda:")}
        kept = [f for f in self.functions if _type(f) in lambda_types]
        return list(by_type.values()), kept + list(functions)


def functions_folder(state_path: Path) -> Path:
    return state_path.parent / f"{state_path.stem}.functions"


def from_template(
    doc: Mapping[str, Any], parameters: Mapping[str, str], info: StackInfo, template_file: str | None, state_path: Path
) -> TemplateDefaults:
    """The defaults `doc`'s functions give (their inline sources written under functions_folder)."""
    base = Path(template_file).parent if template_file else Path.cwd()
    try:
        template = Template(doc, parameters, info)
    except TemplateError:
        template = None  # said when the operation makes it; plain values only meanwhile
    found = lambdas.read(doc, base, _resolver(template) if template is not None else None)
    codes: dict[str, str] = {}
    for fn in found:
        if fn.usable and fn.inline is not None and fn.types:
            folder = functions_folder(state_path) / fn.logical_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / lambdas.INLINE_MODULE).write_text(fn.inline, encoding="utf-8")
            codes[fn.logical_id] = str(folder.resolve())
    defaults = TemplateDefaults(lambdas.handler_options(found), lambdas.function_options(found, codes))
    for fn in found:
        defaults.notes += fn.notes
        if fn.usable and fn.types:
            defaults.served.append(
                f"{', '.join(fn.types)} served by the template's function {fn.logical_id} "
                f"(lambda:{fn.handler}; --handler / --function override it)"
            )
    return defaults


def forget(state_path: Path) -> None:
    """The stack is gone: so are its inline functions' folders."""
    shutil.rmtree(functions_folder(state_path), ignore_errors=True)


def _resolver(template: Template) -> lambdas.Resolve:
    def resolve(value: Any, where: str) -> Any:
        resolved = template.resolve(value, lambda _: None, where)
        if resolved is NO_VALUE:
            return None
        return resolved

    return resolve


def _type(option: str) -> str:
    return option.partition("=")[0].strip()

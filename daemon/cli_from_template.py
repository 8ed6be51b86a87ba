"""`cfn-provider handlers --from-template TEMPLATE`: the options and config tables that serve a
template's own Lambda functions (cfn_provider.local.template.lambdas), printed for the operator."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from .errors import StartupError
from .local.template import Template, TemplateError, lambdas
from .local.template import load as load_template


class TemplateUnreadable(StartupError):
    """The template given to --from-template cannot be read (the message says why): exit 2."""


def print_from_template(path: str, inline_dir: str | None) -> None:
    """The --handler / --function lines, then the config file's tables; notes on stderr."""
    try:
        doc = load_template(path)
    except TemplateError as exc:
        raise TemplateUnreadable(f"--from-template: {exc}") from None
    found = lambdas.read(doc, Path(path).resolve().parent, _resolver(doc))
    codes = _write_inline(found, inline_dir)
    for fn in found:
        for note in fn.notes:
            click.echo(f"note: {note}", err=True)
        if fn.usable and fn.inline is not None and fn.logical_id not in codes and fn.types:
            click.echo(
                f"note: {fn.logical_id}'s code is inline (Code.ZipFile): give --inline-code DIR to write it "
                f"as DIR/{fn.logical_id}/{lambdas.INLINE_MODULE}, its code folder",
                err=True,
            )
    served = [fn for fn in found if fn.usable and fn.types and (fn.inline is None or fn.logical_id in codes)]
    if not served:
        click.echo("# no custom resource of this template calls a usable Lambda function (ServiceToken !GetAtt Fn.Arn)")
        return
    handlers, functions = lambdas.handler_options(served), lambdas.function_options(served, codes)
    click.echo("# cfn-provider run (or simulate) options:")
    for value in handlers:
        click.echo(f"--handler {shlex.quote(value)}")
    for value in functions:
        click.echo(f"--function {shlex.quote(value)}")
    click.echo("\n# or the same in the config file (cfn-provider run --config FILE):")
    click.echo(lambdas.toml(served, codes), nl=False)


def _resolver(doc: Any) -> lambdas.Resolve | None:
    """Intrinsics resolved with the parameters' defaults, when the template can be read so; else plain
    values only (each intrinsic then noted)."""
    try:
        template = Template(doc)
    except TemplateError:
        return None

    def resolve(value: Any, where: str) -> Any:
        return template.resolve(value, lambda _: None, where)

    return resolve


def _write_inline(found: list[lambdas.TemplateFunction], inline_dir: str | None) -> dict[str, str]:
    if not inline_dir:
        return {}
    codes: dict[str, str] = {}
    for fn in found:
        if fn.usable and fn.inline is not None and fn.types:
            folder = Path(inline_dir).resolve() / fn.logical_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / lambdas.INLINE_MODULE).write_text(fn.inline, encoding="utf-8")
            codes[fn.logical_id] = str(folder)
    return codes

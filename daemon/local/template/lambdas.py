"""The Lambda functions a template's custom resources call, read from their own resources.

A custom resource whose ServiceToken is `!GetAtt Fn.Arn` (`{"Fn::GetAtt": ["Fn", "Arn"]}`) calls
the function `Fn`, an AWS::Lambda::Function (or SAM's AWS::Serverless::Function). Its properties
say how the daemon runs it as a `lambda:` target: Handler (the target), Code (a local folder:
`Code: ./folder` as `aws cloudformation package` reads it, SAM's CodeUri; or the inline
Code.ZipFile / InlineCode source, which Lambda keeps as index.py), Environment.Variables, Timeout
and MemorySize. `read` gives each function with the ResourceTypes it serves; `handler_options`,
`function_options` and `toml` turn them into the `--handler` / `--function` strings and the
config file's tables (`cfn-provider handlers --from-template`, `simulate`). What cannot be used
(code only in S3 or an image, another runtime, a value that does not resolve) is a note, never a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...functions.settings import FunctionSettingError, parse_options
from ...functions.target import parse_target

LAMBDA_TYPES = ("AWS::Lambda::Function", "AWS::Serverless::Function")
INLINE_MODULE = "index.py"  # what Lambda names an inline (ZipFile) Python function's file
_LOGICAL_ID = re.compile(r"[A-Za-z0-9]{1,255}")  # CloudFormation's rule (the inline code's folder is named by it)
_CUSTOM_TYPE = re.compile(r"AWS::CloudFormation::CustomResource|Custom::[A-Za-z0-9_@-]{1,60}")
Resolve = Callable[[Any, str], Any]  # (value, where) -> the value with its intrinsics resolved; raises if it cannot


@dataclass
class TemplateFunction:
    """One function of the template and the ResourceTypes that call it."""

    logical_id: str
    types: list[str] = field(default_factory=list)
    callers: list[str] = field(default_factory=list)  # the custom resources' logical ids
    handler: str | None = None
    code: str | None = None  # an absolute local folder
    inline: str | None = None  # the inline source (ZipFile / InlineCode)
    environment: dict[str, str] = field(default_factory=dict)
    timeout: int | None = None
    memory_mb: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.handler is not None and (self.code is not None or self.inline is not None)

    def settings(self, code: str | None = None) -> dict[str, Any]:
        """Its [functions."TYPE"] table (`code`: where its inline source was written, if it has one)."""
        table: dict[str, Any] = {}
        if code or self.code:
            table["code"] = code or self.code
        if self.environment:
            table["environment"] = dict(self.environment)
        if self.timeout is not None:
            table["timeout"] = self.timeout
        if self.memory_mb is not None:
            table["memory_mb"] = self.memory_mb
        return table


def read(doc: Mapping[str, Any], base: Path, resolve: Resolve | None = None) -> list[TemplateFunction]:
    """The template's functions that custom resources call, in template order; `base`: the folder
    relative code paths start from (the template's); `resolve`: intrinsics in property values."""
    resources = doc.get("Resources")
    if not isinstance(resources, dict):
        return []
    found: dict[str, TemplateFunction] = {}
    for logical_id, resource in resources.items():
        props = resource.get("Properties") if isinstance(resource, dict) else None
        target = _arn_of(props.get("ServiceToken")) if isinstance(props, dict) else None
        function = resources.get(target) if target else None
        if not isinstance(function, dict) or function.get("Type") not in LAMBDA_TYPES or not target:
            continue
        if target not in found:
            found[target] = _function(target, function, base, resolve or _literal)
        found[target].callers.append(str(logical_id))
        rtype = str(resource.get("Type"))
        if not _CUSTOM_TYPE.fullmatch(rtype):
            found[target].notes.append(f"{str(logical_id)[:64]}: {rtype[:80]!r} is not a custom resource type")
        elif rtype not in found[target].types:
            found[target].types.append(rtype)
    _one_function_per_type(list(found.values()))
    return list(found.values())


def _arn_of(token: Any) -> str | None:
    """The logical id in a ServiceToken `!GetAtt Fn.Arn` (either long form), else None."""
    if not isinstance(token, dict) or list(token) != ["Fn::GetAtt"]:
        return None
    arg = token["Fn::GetAtt"]
    if isinstance(arg, str):
        arg = arg.split(".", 1)
    if isinstance(arg, list) and len(arg) == 2 and arg[1] == "Arn" and isinstance(arg[0], str):
        return arg[0]
    return None


def _literal(value: Any, where: str) -> Any:
    """Without a template to resolve against: plain values only."""
    if isinstance(value, (dict, list)):
        raise ValueError(f"{where} is an intrinsic function ({json.dumps(value)[:80]})")
    return value


def _function(logical_id: str, resource: Mapping[str, Any], base: Path, resolve: Resolve) -> TemplateFunction:
    fn = TemplateFunction(logical_id)
    if not _LOGICAL_ID.fullmatch(logical_id):
        fn.notes.append(f"{logical_id[:64]!r} is not a logical id (letters and digits): left out")
        return fn
    props = resource.get("Properties")
    props = props if isinstance(props, dict) else {}
    where = f"{logical_id}.Properties"
    runtime = _value(fn, resolve, props.get("Runtime"), f"{where}.Runtime")
    if runtime is not None and not str(runtime).startswith("python"):
        fn.notes.append(f"{logical_id}: Runtime {runtime} is not Python; only Python functions run here")
        return fn
    handler = _value(fn, resolve, props.get("Handler"), f"{where}.Handler")
    fn.handler = str(handler) if handler else None
    if fn.handler is None:
        fn.notes.append(f"{logical_id}: no Handler")
    else:
        try:
            parse_target(fn.handler)
        except ValueError as exc:
            fn.notes.append(f"{logical_id}: Handler {exc}")
            fn.handler = None
    _code(fn, props, base, resolve, where)
    variables = (
        (props.get("Environment") or {}).get("Variables") if isinstance(props.get("Environment"), dict) else None
    )
    for name, raw in (variables or {}).items() if isinstance(variables, dict) else ():
        value = _value(fn, resolve, raw, f"{where}.Environment.Variables.{name}")
        try:
            parse_options([f"{logical_id}=env.{name}=x"])  # a name the daemon takes (Lambda's rule, not reserved)
        except FunctionSettingError as exc:
            fn.notes.append(f"{where}.Environment.Variables: left out ({str(exc).partition(': ')[2]})")
            continue
        if value is not None:
            fn.environment[str(name)] = _text(value)
    fn.timeout = _number(fn, resolve, props.get("Timeout"), f"{where}.Timeout", 1, 900)
    fn.memory_mb = _number(fn, resolve, props.get("MemorySize"), f"{where}.MemorySize", 128, 10240)
    return fn


def _code(fn: TemplateFunction, props: Mapping[str, Any], base: Path, resolve: Resolve, where: str) -> None:
    """Code (or SAM's CodeUri / InlineCode): a local folder, the inline source, or a note why neither."""
    code = props.get("Code", props.get("CodeUri"))
    inline = props.get("InlineCode")
    if isinstance(code, dict) and "ZipFile" in code:
        inline = code["ZipFile"]
    if inline is not None:
        source = _value(fn, resolve, inline, f"{where}.Code.ZipFile")
        fn.inline = str(source) if source is not None else None
        return
    if isinstance(code, str):
        folder = (base / code).resolve()
        if folder.is_dir():
            fn.code = str(folder)
            return
        fn.notes.append(f"{fn.logical_id}: its Code {code} is not a local folder (give --function 'TYPE=code=FOLDER')")
        return
    fn.notes.append(
        f"{fn.logical_id}: its Code is not local (S3, an image): unpack it into a folder and give "
        "--function 'TYPE=code=FOLDER'"
    )


def _value(fn: TemplateFunction, resolve: Resolve, raw: Any, where: str) -> Any:
    if raw is None:
        return None
    try:
        return resolve(raw, where)
    except (ValueError, KeyError, TypeError) as exc:  # TemplateError is a ValueError
        fn.notes.append(f"{where} is left out: {exc} (give it with --function)")
        return None


def _number(fn: TemplateFunction, resolve: Resolve, raw: Any, where: str, low: int, high: int) -> int | None:
    value = _value(fn, resolve, raw, where)
    if value is None:
        return None
    try:
        number = int(str(value))
    except ValueError:
        fn.notes.append(f"{where} {str(value)[:40]!r} is not a whole number: left out")
        return None
    if not low <= number <= high:
        fn.notes.append(f"{where} {number} is outside {low}..{high}: left out")
        return None
    return number


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _one_function_per_type(functions: list[TemplateFunction]) -> None:
    """A ResourceType is served by one function: a type two functions serve is served by neither."""
    owners: dict[str, list[TemplateFunction]] = {}
    for fn in functions:
        for rtype in fn.types:
            owners.setdefault(rtype, []).append(fn)
    for rtype, fns in owners.items():
        if len(fns) > 1:
            names = ", ".join(f.logical_id for f in fns)
            for fn in fns:
                fn.types.remove(rtype)
                fn.notes.append(
                    f"{rtype} calls several functions ({names}): serve it with --handler, or give each "
                    "function's resources a type of their own"
                )


def handler_options(functions: list[TemplateFunction]) -> list[str]:
    """`--handler` values: TYPE=lambda:HANDLER for every type a usable function serves."""
    return [f"{rtype}=lambda:{fn.handler}" for fn in functions if fn.usable for rtype in fn.types]


def function_options(functions: list[TemplateFunction], codes: Mapping[str, str] | None = None) -> list[str]:
    """`--function` values (`codes`: logical id -> the folder its inline source was written to)."""
    out: list[str] = []
    for fn in functions:
        if not fn.usable:
            continue
        for rtype in fn.types:
            for key, value in fn.settings((codes or {}).get(fn.logical_id)).items():
                if key == "environment":
                    out += [f"{rtype}=env.{name}={text}" for name, text in value.items()]
                else:
                    out.append(f"{rtype}={key}={value}")
    return out


def toml(functions: list[TemplateFunction], codes: Mapping[str, str] | None = None) -> str:
    """The config file's [handlers] entries and [functions."TYPE"] tables for them."""
    usable = [(rtype, fn) for fn in functions if fn.usable for rtype in fn.types]
    lines = ["[handlers]"] + [f"{_key(rtype)} = {json.dumps('lambda:' + str(fn.handler))}" for rtype, fn in usable]
    for rtype, fn in usable:
        lines += ["", f"[functions.{_key(rtype)}]"]
        for key, value in fn.settings((codes or {}).get(fn.logical_id)).items():
            if key == "environment":
                pairs = ", ".join(f"{_key(k)} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"environment = {{ {pairs} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    """A TOML key: bare when it can be, else quoted."""
    return name if name.replace("_", "").replace("-", "").isalnum() and name.isascii() else json.dumps(name)

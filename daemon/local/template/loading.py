"""Reading a template: YAML or JSON text to plain data, CloudFormation's short forms (`!Ref`,
`!GetAtt`, `!Sub`, ...) turned into their long form (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`, ...)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml

from .values import FUNCTIONS, TemplateError


class _Loader(yaml.SafeLoader):
    """SafeLoader with CloudFormation's short forms, and no timestamp conversion (so an unquoted
    `AWSTemplateFormatVersion: 2010-09-09` stays the string CloudFormation reads)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_SHORT_FORMS = {"Ref": "Ref", "Condition": "Condition", **{name: f"Fn::{name}" for name in FUNCTIONS}}


def _short_form(long_name: str) -> Callable[[yaml.SafeLoader, yaml.Node], dict[str, Any]]:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
            if long_name == "Fn::GetAtt":
                logical_id, dot, attribute = str(value).partition(".")
                if not dot or not logical_id or not attribute:
                    raise TemplateError(
                        f"!GetAtt {value!r}: expected LogicalId.Attribute (line {node.start_mark.line + 1})"
                    )
                value = [logical_id, attribute]
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:  # the one other kind of node
            value = loader.construct_mapping(cast(yaml.MappingNode, node), deep=True)
        return {long_name: value}

    return construct


for _short, _long in _SHORT_FORMS.items():
    _Loader.add_constructor(f"!{_short}", _short_form(_long))


class _Named(io.StringIO):
    """Text with a name, so PyYAML's errors say `in "template.yaml", line 4`, not `<unicode string>`."""

    def __init__(self, text: str, name: str):
        super().__init__(text)
        self.name = name


def _yaml(text: str, name: str) -> Any:
    return yaml.load(_Named(text, name), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def loads(text: str, name: str = "<template>") -> dict[str, Any]:
    """A template (YAML or JSON text) as plain data, short forms in their long form."""
    doc: Any
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as json_error:
            try:
                doc = _yaml(text, name)
            except yaml.YAMLError:
                raise TemplateError(f"{name} is not valid JSON: {json_error}") from None
    else:
        try:
            doc = _yaml(text, name)
        except yaml.YAMLError as exc:
            raise TemplateError(f"{name} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise TemplateError(f"{name}: a template is a mapping with a Resources section")
    return doc


def load(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"cannot read template {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TemplateError(f"template {path} is not UTF-8 text") from None
    return loads(text, str(path))

"""Property schema validation for the SDK: CloudFormation's string scalars converted to what a
JSON Schema asks for, and failures that name the property and the rule, never the value.

CloudFormation sends every scalar as a string; where the schema's `type` asks for a boolean, an
integer or a number (and does not also allow a string) the strings "true"/"false", "42", "1.5"
are converted (`coerce`), in nested objects and arrays too, and `default`s of missing properties
are filled in. `validate` then raises PropertyError listing at most five problems, each as
`Path.To[0].Property: what is wrong (rule)`: a Reason lands in stack events and logs that more
people read than the template's author, so the rejected value is never quoted.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import validators
from jsonschema.exceptions import SchemaError

from ..errors import HandlerFailure

__all__ = ["PropertyError", "check_schema", "coerce", "describe", "thaw", "validate"]

_INT = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_MAX_REPORTED = 5


class PropertyError(HandlerFailure, ValueError):
    """ResourceProperties do not match the handler's schema (the message names the property)."""

    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


def thaw(value: Any) -> Any:
    """The daemon's read-only request values as plain dicts and lists (copies)."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def coerce(value: Any, schema: Any, root: Any | None = None) -> Any:
    """Convert CloudFormation's string scalars where `schema` asks for booleans/integers/numbers.

    Never raises: what cannot be converted is left as it is for validation to report. Also fills
    in the `default` of missing object properties. Returns a new value; `value` is not changed.
    """
    return _coerce(thaw(value), schema, schema if root is None else root, 0)


def _coerce(value: Any, schema: Any, root: Any, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > 64:
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str):
        value = _coerce(value, _resolve(root, ref), root, depth + 1)
    for sub in schema.get("allOf") or ():
        value = _coerce(value, sub, root, depth + 1)
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            value = _first_fitting(value, branches, root, depth)

    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or ())
    if isinstance(value, str) and types and "string" not in types:
        value = _scalar(value, types)

    if isinstance(value, dict):
        _coerce_object(value, schema, root, depth)
    elif isinstance(value, list):
        _coerce_array(value, schema, root, depth)
    return value


def _coerce_object(value: dict[str, Any], schema: Mapping[str, Any], root: Any, depth: int) -> None:
    """Each property by its schema (properties, then patternProperties, then additionalProperties),
    and the defaults of missing ones filled in."""
    props = _mapping(schema, "properties")
    patterns = _mapping(schema, "patternProperties")
    extra = schema.get("additionalProperties")
    for name, sub in props.items():
        if name not in value and isinstance(sub, Mapping) and "default" in sub:
            value[name] = copy.deepcopy(sub["default"])
    for name in list(value):
        if name in props:
            value[name] = _coerce(value[name], props[name], root, depth + 1)
            continue
        matched = False
        for pattern, sub in patterns.items():
            try:
                hit = re.search(pattern, name)
            except re.error:
                hit = None
            if hit:
                matched = True
                value[name] = _coerce(value[name], sub, root, depth + 1)
        if not matched and isinstance(extra, Mapping):
            value[name] = _coerce(value[name], extra, root, depth + 1)


def _coerce_array(value: list[Any], schema: Mapping[str, Any], root: Any, depth: int) -> None:
    """Each item by its schema (prefixItems / the tuple form of items, then items)."""
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # draft 4-7 tuple form
        prefix, items = items, schema.get("additionalItems")
    prefix = prefix if isinstance(prefix, list) else []
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else items
        value[i] = _coerce(item, sub, root, depth + 1)


def _mapping(schema: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`schema[key]` where it is an object (properties, patternProperties), else an empty one."""
    found = schema.get(key)
    return found if isinstance(found, Mapping) else {}


def _scalar(text: str, types: list[str]) -> Any:
    s = text.strip()
    if "boolean" in types and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if "integer" in types and _INT.match(s):
        return int(s)
    if "number" in types and _NUMBER.match(s):
        if _INT.match(s):
            return int(s)
        number = float(s)
        if math.isfinite(number):
            return number
    if "integer" in types and _NUMBER.match(s):  # "3.0" is an integer to JSON Schema
        number = float(s)
        if math.isfinite(number) and number.is_integer():
            return int(number)
    if "null" in types and s == "null":
        return None
    return text


def _first_fitting(value: Any, branches: list[Any], root: Any, depth: int) -> Any:
    """anyOf/oneOf: keep a value one branch already accepts, else the first conversion one accepts."""
    if any(_is_valid(value, b, root) for b in branches):
        return value
    for branch in branches:
        candidate = _coerce(copy.deepcopy(value), branch, root, depth + 1)
        if _is_valid(candidate, branch, root):
            return candidate
    return value


def _is_valid(value: Any, schema: Any, root: Any) -> bool:
    try:
        cls = validators.validator_for(root if isinstance(root, Mapping) else {})
        return cls(root).evolve(schema=schema).is_valid(value)
    except Exception:  # noqa: BLE001 - a broken sub-schema simply does not fit
        return False


def _resolve(root: Any, ref: str) -> Any:
    """Local references only ("#/$defs/Name"); anything else is not followed."""
    if not ref.startswith("#"):
        return {}
    node = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node


def _path(error: Any) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(where: str, name: str) -> str:
    name = name if len(name) <= 64 else name[:61] + "..."
    return f"{where}.{name}" if where else name


def _bound(value: Any) -> str:
    """A rule's parameter, from the handler's schema (never from the properties), kept short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 100 else text[:97] + "..."


_RULES: dict[str, Callable[[Any], str]] = {
    "type": lambda v: "must be of type " + (" or ".join(v) if isinstance(v, list) else str(v)),
    "minimum": lambda v: f"must be at least {_bound(v)}",
    "maximum": lambda v: f"must be at most {_bound(v)}",
    "exclusiveMinimum": lambda v: f"must be greater than {_bound(v)}",
    "exclusiveMaximum": lambda v: f"must be less than {_bound(v)}",
    "multipleOf": lambda v: f"must be a multiple of {_bound(v)}",
    "minLength": lambda v: f"must be at least {_bound(v)} characters long",
    "maxLength": lambda v: f"must be at most {_bound(v)} characters long",
    "pattern": lambda v: f"must match the pattern {_bound(v)}",
    "format": lambda v: f"must be a valid {_bound(v)}",
    "enum": lambda v: f"must be one of {_bound(v)}",
    "const": lambda v: "must be the one value the schema allows",
    "minItems": lambda v: f"must have at least {_bound(v)} items",
    "maxItems": lambda v: f"must have at most {_bound(v)} items",
    "uniqueItems": lambda v: "must not repeat an item",
    "minProperties": lambda v: f"must have at least {_bound(v)} properties",
    "maxProperties": lambda v: f"must have at most {_bound(v)} properties",
    "anyOf": lambda v: "must match at least one of the allowed forms",
    "oneOf": lambda v: "must match exactly one of the allowed forms",
    "not": lambda v: "must not match the form the schema excludes",
}


def describe(error: Any) -> list[str]:
    """What is wrong, naming the property (its path) and the rule (the schema keyword), never the
    value: jsonschema's own messages quote the rejected value (`'Hunter2' does not match ...`),
    and a Reason lands in stack events and logs that more people read than the template's author."""
    where, rule = _path(error), str(error.validator)
    instance = error.instance
    if rule == "required" and isinstance(instance, Mapping) and isinstance(error.validator_value, list):
        return [f"{_join(where, str(n))}: is required (required)" for n in error.validator_value if n not in instance]
    if rule in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, Mapping):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known = _mapping(schema, "properties")
        patterns = _mapping(schema, "patternProperties")

        def matches(name: str) -> bool:
            try:
                return any(re.search(p, name) for p in patterns)
            except re.error:
                return False

        extra = [str(n) for n in instance if n not in known and not matches(str(n))]
        if extra:
            return [f"{_join(where, n)}: is not a property this resource takes ({rule})" for n in extra]
    text = _RULES[rule](error.validator_value) if rule in _RULES else "does not satisfy the schema"
    return [f"{where or 'ResourceProperties'}: {text} ({rule})"]


def validate(props: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise PropertyError naming each offending property and rule (at most five), never a value."""
    cls = validators.validator_for(schema)
    errors = sorted(cls(schema).iter_errors(props), key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)))
    if not errors:
        return
    parts = list(dict.fromkeys(part for error in errors for part in describe(error)))
    more = f" (and {len(parts) - _MAX_REPORTED} more)" if len(parts) > _MAX_REPORTED else ""
    raise PropertyError("invalid ResourceProperties: " + "; ".join(parts[:_MAX_REPORTED]) + more)


def check_schema(schema: Mapping[str, Any], owner: str) -> None:
    """Raise TypeError when `schema` (the class `owner`'s) is not a valid JSON Schema."""
    try:
        # types-jsonschema's Validator protocol takes a dict; jsonschema takes any Mapping (its Schema type)
        validators.validator_for(schema).check_schema(schema)  # type: ignore[arg-type]
    except SchemaError as exc:
        raise TypeError(f"{owner}.schema is not a valid JSON Schema: {exc.message}") from None

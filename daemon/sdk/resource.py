"""A small declarative layer on top of the plain handler contract (shared/DESIGN.md).

    from cfn_provider import Resource

    class Thing(Resource):
        schema = {                                   # JSON Schema for ResourceProperties
            "type": "object",
            "properties": {"Size": {"type": "integer", "minimum": 1}, "Name": {"type": "string"}},
            "required": ["Size"],
            "additionalProperties": False,
        }
        replace_on = ("Name",)                       # a change to these replaces the resource

        async def create(self, props, call):         # props: validated, "3" already became 3
            thing = await make_thing(props["Size"], region=call.region)
            return {"PhysicalResourceId": thing.id, "Data": {"Url": thing.url}}

        async def update(self, props, old, call):    # only for changes outside replace_on
            await resize_thing(call.physical_id, props["Size"])
            return {"Data": {"Url": url_of(call.physical_id)}}

        async def delete(self, props, call):         # never validated; must tolerate "already gone"
            await remove_thing(call.physical_id)

    handler = Thing.handler()                        # register "mypkg.thing:handler"

What the layer does, and nothing more:
- The author sees ResourceProperties without ServiceToken and ServiceTimeout (CloudFormation's and
  the daemon's own), as plain mutable dicts and lists.
- Create and Update check the properties against `schema` first (a failure is a FAILED answer
  naming the property). CloudFormation sends every scalar as a string; where the schema's `type`
  asks for a boolean, an integer or a number (and does not also allow a string) the strings
  "true"/"false", "42", "1.5" are converted, in nested objects and arrays too. `default`s of
  missing properties are filled in. A Delete is never validated (a resource created under an
  older schema must still be deletable): its properties are converted where possible.
- Update: when a property in `replace_on` changed (or the class has no `update` and anything
  changed), `create` runs for a new resource (`call.replacing` is true) and the answer carries
  its new PhysicalResourceId (one is made up if `create` returned none). CloudFormation then
  sends a Delete for the old id, with the old properties. Otherwise `update` runs and keeps the id.
- `call` carries the request (`call.event`, ids, `call.region` from the StackId), the daemon's
  context (`remaining()`, a bound `log`) and the shared aiobotocore `session`, with
  `call.client("ec2")` for a client in the stack's region.

Actions may be `async def` (run on the event loop; use for aiobotocore) or plain functions (run in
the daemon's thread pool); keep one kind per class (in a class with any async method, the sync
ones run in a thread of their own). The object `Thing.handler()` returns has
plain `create(event, context)` / `update` / `delete` callables, so the daemon's router and
runner treat it like any other handler.
"""
from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import json
import math
import re
from typing import Any, Callable, Mapping, Sequence

import structlog

from jsonschema import validators

from ..pipeline.request import RequestFields
from jsonschema.exceptions import SchemaError

__all__ = ["Call", "Handler", "PropertyError", "Resource", "coerce", "validate"]

CLOUDFORMATION_OWN = ("ServiceToken", "ServiceTimeout")  # never shown to the author
_INT = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_MAX_REPORTED = 5


class PropertyError(ValueError):
    """ResourceProperties do not match the handler's schema (the message names the property)."""


# ---------------------------------------------------------------------------------- properties

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
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        patterns = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), Mapping) else {}
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
    elif isinstance(value, list):
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems")
        prefix = prefix if isinstance(prefix, list) else []
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            value[i] = _coerce(item, sub, root, depth + 1)
    return value


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
        known = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        patterns = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), Mapping) else {}

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
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise TypeError(f"{owner}.schema is not a valid JSON Schema: {exc.message}") from None


# ---------------------------------------------------------------------------------- the call

class Call(RequestFields):
    """What an SDK action gets besides the properties: the request, the daemon's context, helpers."""

    def __init__(self, event: Mapping[str, Any], context: Any = None, *, replacing: bool = False):
        self.event = event  # the request exactly as the daemon received it (read-only)
        self.context = context  # cfn_provider.pipeline.runner.Context, or None when called without one
        self.replacing = replacing  # True while `create` runs for an Update that replaces

    def _mapping(self) -> Mapping[str, Any]:
        return self.event

    @property
    def physical_id(self) -> str | None:
        """The existing resource's id (Update, Delete); None on Create."""
        return self._str("PhysicalResourceId") or None

    @property
    def region(self) -> str | None:
        """The stack's region, from its StackId ARN (None when the StackId is not an ARN)."""
        parts = self.stack_id.split(":")
        return parts[3] if len(parts) > 5 and parts[0] == "arn" and parts[3] else None

    @property
    def log(self) -> Any:
        log = getattr(self.context, "log", None)
        return log if log is not None else structlog.get_logger("handler")

    @property
    def session(self) -> Any:
        """The daemon's shared aiobotocore session (a new one when called without the daemon)."""
        session = getattr(self.context, "session", None)
        if session is None:
            import aiobotocore.session

            session = aiobotocore.session.get_session()
            if self.context is not None:
                try:
                    self.context.session = session
                except AttributeError:
                    pass
        return session

    def client(self, service: str, **kwargs: Any) -> Any:
        """`async with call.client("ssm") as ssm:` in the stack's region unless region_name is given."""
        kwargs.setdefault("region_name", self.region)
        return self.session.create_client(service, **kwargs)

    def remaining(self) -> float:
        """Seconds left before the daemon answers FAILED (timed out) instead."""
        remaining = getattr(self.context, "remaining", None)
        return remaining() if callable(remaining) else math.inf

    def new_physical_id(self) -> str:
        """The id the daemon would give a Create that returns none: stack, logical id, RequestId hash."""
        from ..pipeline.request import Request
        from ..pipeline.response import default_physical_id

        return default_physical_id(Request(wire=self.event))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- resources

class Resource:
    """Subclass, set `schema` / `replace_on`, write create (and update, delete), then
    `handler = MyResource.handler()`."""

    schema: Mapping[str, Any] | None = None
    replace_on: Sequence[str] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.schema is not None:
            check_schema(cls.schema, cls.__name__)
        if isinstance(cls.replace_on, str):
            raise TypeError(f"{cls.__name__}.replace_on must be a sequence of property names, not a str")

    @classmethod
    def handler(cls, *args: Any, **kwargs: Any) -> "Handler":
        return Handler(cls(*args, **kwargs))

    # --- what authors write
    def create(self, props: dict[str, Any], call: Call) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement create")

    def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
        """Default: no in-place update; every change replaces (see needs_replacement)."""
        return None

    def delete(self, props: dict[str, Any], call: Call) -> Any:
        return None

    # --- what authors may override
    def needs_replacement(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> bool:
        """True when a `replace_on` property changed, or anything changed and there is no `update`."""
        if not self.updates_in_place():
            return props != old
        return any(props.get(name) != old.get(name) for name in self.replace_on)

    def updates_in_place(self) -> bool:
        """Whether the class has its own `update`."""
        return type(self).update is not Resource.update

    def properties(self, event: Mapping[str, Any], key: str = "ResourceProperties", *, check: bool = True) -> dict[str, Any]:
        """`event[key]` without CloudFormation's own keys, converted per schema, validated if `check`."""
        raw = event.get(key)
        props = {k: v for k, v in thaw(raw if isinstance(raw, Mapping) else {}).items() if k not in CLOUDFORMATION_OWN}
        if self.schema is None:
            return props
        props = coerce(props, self.schema)
        if check:
            validate(props, self.schema)
        return props


class Handler:
    """The plain handler (create/update/delete taking the request and the daemon's context)
    around a Resource. The actions are async when any of the Resource's methods is (its sync
    ones then run in a thread), else plain functions (the daemon runs them in its pool)."""

    def __init__(self, resource: Resource):
        if not isinstance(resource, Resource):
            raise TypeError(f"Handler needs a cfn_provider.Resource, not {type(resource).__name__}")
        self.resource = resource
        r = type(resource)
        shape = any(inspect.iscoroutinefunction(m) for m in (r.create, r.update, r.delete))
        self.create = self._action(self._create, shape)
        self.update = self._action(self._update, shape)
        self.delete = self._action(self._delete, shape)

    def __repr__(self) -> str:
        return f"<sdk handler {type(self.resource).__module__}.{type(self.resource).__qualname__}>"

    # Each step is a generator: it yields (method, args) to call and receives the result, so
    # one body serves the sync and the async shapes of the action.
    def _create(self, event: Mapping[str, Any], context: Any):
        props = self.resource.properties(event)
        return (yield self.resource.create, (props, Call(event, context)))

    def _update(self, event: Mapping[str, Any], context: Any):
        res = self.resource
        props = res.properties(event)
        old = res.properties(event, "OldResourceProperties", check=False)
        call = Call(event, context)
        if not res.needs_replacement(props, old, call):
            return (yield res.update, (props, old, call))
        call.replacing = True
        result = yield res.create, (props, call)
        return _with_new_id(result, call)

    def _delete(self, event: Mapping[str, Any], context: Any):
        props = self.resource.properties(event, check=False)
        return (yield self.resource.delete, (props, Call(event, context)))

    @staticmethod
    def _action(steps: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
        # The author's methods are called outside the try blocks: a StopIteration they raise is
        # their error, never mistaken for the end of the steps.
        if is_async:
            async def action(event: Mapping[str, Any], context: Any = None) -> Any:
                gen = steps(event, context)
                try:
                    method, args = next(gen)
                except StopIteration as stop:
                    return stop.value
                while True:
                    if inspect.iscoroutinefunction(method):
                        result = await method(*args)
                    elif getattr(method, "__func__", None) in _DEFAULTS:  # trivial: no thread needed
                        result = method(*args)
                    else:  # a sync method in an otherwise async class: off the loop
                        result = await asyncio.to_thread(method, *args)
                    try:
                        method, args = gen.send(result)
                    except StopIteration as stop:
                        return stop.value
        else:
            def action(event: Mapping[str, Any], context: Any = None) -> Any:  # type: ignore[misc]
                gen = steps(event, context)
                try:
                    method, args = next(gen)
                except StopIteration as stop:
                    return stop.value
                while True:
                    result = method(*args)
                    try:
                        method, args = gen.send(result)
                    except StopIteration as stop:
                        return stop.value
        functools.update_wrapper(action, steps, assigned=("__doc__",))
        action.__name__ = action.__qualname__ = steps.__name__.lstrip("_")
        return action


_DEFAULTS = (Resource.update, Resource.delete)


def _with_new_id(result: Any, call: Call) -> Any:
    """A replacement must answer with a new PhysicalResourceId, or CloudFormation deletes nothing."""
    if result is None:
        result = {}
    elif isinstance(result, str):
        result = {"PhysicalResourceId": result}
    elif isinstance(result, Mapping):
        result = dict(result)
    else:
        return result  # not ours to judge: the daemon answers FAILED for an unusable result
    if not result.get("PhysicalResourceId"):
        result["PhysicalResourceId"] = call.new_physical_id()
    elif result["PhysicalResourceId"] == call.physical_id:
        call.log.warning("sdk.replacement_kept_id", physical_id=call.physical_id,
                         detail="create returned the old id on a replacement: CloudFormation will not delete it")
    return result

"""CloudFormation templates for `cfn-provider simulate`: load, resolve, order.

- `load(path)` / `loads(text)`: YAML or JSON, the short-form intrinsics (`!Ref`, `!GetAtt`,
  `!Sub`, ...) turned into their long form (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`, ...).
- `Template(doc, parameters, stack)`: Parameters (defaults, overrides, their constraints),
  pseudo parameters, Conditions, Mappings; the resources that exist under those conditions;
  their dependency order (Ref, GetAtt, Sub and DependsOn; a cycle is an error, worded as
  CloudFormation words it); and `resolve()` of Ref / Fn::GetAtt / Fn::Sub / Fn::Join /
  Fn::Select / Fn::If / Fn::Split / ... against the custom resources created so far.

Only custom resources (`AWS::CloudFormation::CustomResource`, `Custom::*`) are simulated.
A Ref or GetAtt to any other resource resolves to a placeholder string, with a warning.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

import yaml

CUSTOM_RESOURCE_TYPE = "AWS::CloudFormation::CustomResource"
PSEUDO_PARAMETERS = ("AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition", "AWS::Region",
                     "AWS::StackId", "AWS::StackName", "AWS::URLSuffix")
PLACEHOLDER_PREFIX = "placeholder-"


class TemplateError(ValueError):
    """The template cannot be used as it stands (CloudFormation would refuse it too)."""


class AttributeMissing(TemplateError):
    """Fn::GetAtt names an attribute the custom resource's response did not return."""

    def __init__(self, logical_id: str, attribute: str):
        super().__init__(f"{logical_id} returned no attribute {attribute!r}")
        self.logical_id, self.attribute = logical_id, attribute


def is_custom(resource_type: str) -> bool:
    return resource_type == CUSTOM_RESOURCE_TYPE or resource_type.startswith("Custom::")


class _NoValue:
    """AWS::NoValue: removes the property (or list item) it is the value of."""

    _instance: "_NoValue | None" = None

    def __new__(cls) -> "_NoValue":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE = _NoValue()


# ------------------------------------------------------------------------------------ loading
class _Loader(yaml.SafeLoader):
    """SafeLoader with CloudFormation's short forms, and no timestamp conversion (so an unquoted
    `AWSTemplateFormatVersion: 2010-09-09` stays the string CloudFormation reads)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_SHORT_FORMS = {
    "Ref": "Ref", "Condition": "Condition", "GetAtt": "Fn::GetAtt",
    **{name: f"Fn::{name}" for name in (
        "Sub", "Join", "Select", "If", "Equals", "Not", "And", "Or", "FindInMap", "Base64", "Split", "GetAZs",
        "ImportValue", "Cidr", "Transform", "ToJsonString", "Length")},
}


def _short_form(long_name: str) -> Callable[[yaml.SafeLoader, yaml.Node], dict[str, Any]]:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
            if long_name == "Fn::GetAtt":
                logical_id, dot, attribute = str(value).partition(".")
                if not dot or not logical_id or not attribute:
                    raise TemplateError(f"!GetAtt {value!r}: expected LogicalId.Attribute (line {node.start_mark.line + 1})")
                value = [logical_id, attribute]
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        return {long_name: value}

    return construct


for _short, _long in _SHORT_FORMS.items():
    _Loader.add_constructor(f"!{_short}", _short_form(_long))


def loads(text: str, name: str = "<template>") -> dict[str, Any]:
    """A template (YAML or JSON text) as plain data, short forms in their long form."""
    doc: Any
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as json_error:
            try:
                doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
            except yaml.YAMLError:
                raise TemplateError(f"{name} is not valid JSON: {json_error}") from None
    else:
        try:
            doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
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


# ------------------------------------------------------------------------------- resolving
class ResourceView(Protocol):
    """What resolving needs from a created custom resource."""

    physical_id: str
    data: Mapping[str, Any]


Lookup = Callable[[str], "ResourceView | None"]


@dataclass(frozen=True)
class StackInfo:
    """What the pseudo parameters resolve to."""

    name: str
    stack_id: str
    region: str = "us-east-1"
    account_id: str = "123456789012"

    @property
    def partition(self) -> str:
        if self.region.startswith("cn-"):
            return "aws-cn"
        if self.region.startswith("us-gov-"):
            return "aws-us-gov"
        return "aws"

    @property
    def url_suffix(self) -> str:
        return "amazonaws.com.cn" if self.region.startswith("cn-") else "amazonaws.com"

    @classmethod
    def new(cls, name: str, region: str = "us-east-1", account_id: str = "123456789012") -> "StackInfo":
        partition = cls(name, "", region, account_id).partition
        return cls(name, f"arn:{partition}:cloudformation:{region}:{account_id}:stack/{name}/{uuid.uuid4()}",
                   region, account_id)


_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_INTRINSICS = {"Ref", "Condition"} | {f"Fn::{n}" for n in (
    "GetAtt", "Sub", "Join", "Select", "If", "Equals", "Not", "And", "Or", "FindInMap", "Base64", "Split", "GetAZs",
    "ImportValue", "Cidr", "Transform", "ToJsonString", "Length")}


def _intrinsic(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key in _INTRINSICS:
            return key, arg
    return None


def _as_string(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TemplateError(f"{where}: expected a string, got {_describe(value)}")


def _describe(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def stringify(value: Any) -> Any:
    """CloudFormation sends a custom resource's scalar properties as strings: 3 -> "3", true -> "true"."""
    if isinstance(value, dict):
        return {k: stringify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stringify(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


class Template:
    """One template under one set of parameter values: what exists, in which order, and values."""

    def __init__(self, doc: Mapping[str, Any], parameters: Mapping[str, str] | None = None,
                 stack: StackInfo | None = None, on_warning: Callable[[str], object] | None = None):
        self.doc = doc
        self.stack = stack or StackInfo.new("simulated-stack")
        self.on_warning = on_warning
        self._warned: set[str] = set()
        self.notes: list[str] = []  # said once, before anything happens
        if "Transform" in doc:
            raise TemplateError("the template has a Transform (e.g. AWS::Serverless or AWS::LanguageExtensions); "
                                "simulate reads plain templates only: process it first (e.g. sam build / sam validate)")
        self.mappings = self._section("Mappings")
        self.all_resources = self._section("Resources")
        if not self.all_resources:
            raise TemplateError("Template format error: At least one Resources member must be defined.")
        for logical_id, resource in self.all_resources.items():
            if not isinstance(resource, dict) or not isinstance(resource.get("Type"), str):
                raise TemplateError(f"Template format error: resource {logical_id} has no Type")
            if "Properties" in resource and not isinstance(resource["Properties"], dict):
                raise TemplateError(f"Template format error: {logical_id}.Properties must be a mapping")
        self._check_nulls(self.all_resources, "Resources")
        self.resources: dict[str, Any] = {}  # the ones that exist: set once conditions are known
        self.outputs_defs: dict[str, Any] = {}
        self.parameters = self._parameters(parameters or {})
        self._condition_defs = self._section("Conditions")
        self._conditions: dict[str, bool] = {}
        self.conditions = {name: self.condition(name) for name in self._condition_defs}
        self.resources = {k: v for k, v in self.all_resources.items() if self._exists(v, f"resource {k}")}
        self.outputs_defs = {k: v for k, v in self._section("Outputs").items()
                             if isinstance(v, dict) and self._exists(v, f"output {k}")}
        self._validate_references()
        self.dependencies = {k: self._dependencies_of(k) for k in self.resources}
        self.order = self._topological_order()
        self.custom = [k for k in self.order if is_custom(self.resources[k]["Type"])]
        for logical_id in self.order:
            rtype = self.resources[logical_id]["Type"]
            if not is_custom(rtype):
                self.notes.append(f"{logical_id} ({rtype}) is not a custom resource: simulate does not create it; "
                                  f"a Ref or Fn::GetAtt to it resolves to a placeholder ({PLACEHOLDER_PREFIX}...)")

    # -------------------------------------------------------------- sections and parameters
    def _section(self, name: str) -> dict[str, Any]:
        section = self.doc.get(name) or {}
        if not isinstance(section, dict):
            raise TemplateError(f"Template format error: {name} must be a mapping")
        return section

    def _check_nulls(self, value: Any, path: str) -> None:
        if value is None:
            raise TemplateError(f"Template format error: [/{path}] 'null' values are not allowed in templates")
        if isinstance(value, dict):
            for k, v in value.items():
                self._check_nulls(v, f"{path}/{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._check_nulls(v, f"{path}/{i}")

    def _parameters(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        declared = self._section("Parameters")
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise TemplateError(f"Parameters: [{', '.join(unknown)}] do not exist in the template")
        outside_service_tokens = self._mentioned_names(skip_service_tokens=True)
        values: dict[str, Any] = {}
        missing = []
        for name, spec in declared.items():
            spec = spec if isinstance(spec, dict) else {}
            if name in overrides:
                raw: Any = overrides[name]
            elif "Default" in spec:
                raw = spec["Default"]
                if isinstance(raw, list):
                    raw = ",".join(_as_string(v, f"Parameter {name}") for v in raw)
            elif name not in outside_service_tokens:
                values[name] = PLACEHOLDER_PREFIX + name
                self.notes.append(f"parameter {name} has no value, but it only feeds a ServiceToken, which simulate "
                                  "replaces: left unset")
                continue
            else:
                missing.append(name)
                continue
            values[name] = self._parameter_value(name, spec, _as_string(raw, f"Parameter {name}"))
        if missing:
            raise TemplateError(f"Parameters: [{', '.join(missing)}] must have values "
                                "(give them with --parameter NAME=VALUE)")
        return values

    @staticmethod
    def _parameter_value(name: str, spec: Mapping[str, Any], value: str) -> Any:
        ptype = str(spec.get("Type", "String"))
        is_list = ptype == "CommaDelimitedList" or ptype.startswith("List<")
        items = [v.strip() for v in value.split(",")] if is_list else [value]
        allowed = spec.get("AllowedValues")
        if allowed is not None:
            allowed_strings = [_as_string(v, f"Parameter {name} AllowedValues") for v in allowed]
            if any(item not in allowed_strings for item in items):
                raise TemplateError(f"Parameter '{name}' must be one of AllowedValues ({', '.join(allowed_strings)})")
        pattern = spec.get("AllowedPattern")
        if pattern is not None and any(re.fullmatch(str(pattern), item) is None for item in items):
            raise TemplateError(spec.get("ConstraintDescription")
                                and f"Parameter '{name}' failed to satisfy constraint: {spec['ConstraintDescription']}"
                                or f"Parameter '{name}' must match pattern {pattern}")
        for bound, check in (("MinLength", lambda v, b: len(v) >= b), ("MaxLength", lambda v, b: len(v) <= b)):
            if bound in spec and any(not check(item, int(spec[bound])) for item in items):
                raise TemplateError(f"Parameter '{name}' must satisfy {bound} {spec[bound]}")
        if ptype in ("Number", "List<Number>"):
            for item in items:
                try:
                    number = float(item)
                except ValueError:
                    raise TemplateError(f"Parameter '{name}' must be a number") from None
                if "MinValue" in spec and number < float(spec["MinValue"]):
                    raise TemplateError(f"Parameter '{name}' must be a number not less than {spec['MinValue']}")
                if "MaxValue" in spec and number > float(spec["MaxValue"]):
                    raise TemplateError(f"Parameter '{name}' must be a number not greater than {spec['MaxValue']}")
        return items if is_list else value

    def _mentioned_names(self, skip_service_tokens: bool) -> set[str]:
        """Every name a Ref / Sub / GetAtt mentions, anywhere, conditions ignored."""
        names: set[str] = set()

        def walk(value: Any) -> None:
            found = _intrinsic(value)
            if found:
                key, arg = found
                if key == "Ref" and isinstance(arg, str):
                    names.add(arg)
                elif key == "Fn::Sub":
                    text = arg[0] if isinstance(arg, list) and arg else arg
                    if isinstance(text, str):
                        names.update(v.split(".")[0] for v in _SUB_VARIABLE.findall(text) if not v.startswith("!"))
                    walk(arg)
                    return
            if isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        for section in ("Conditions", "Outputs"):
            walk(self.doc.get(section))
        for resource in self.all_resources.values():
            for key, value in resource.items():
                if key == "Properties" and skip_service_tokens and is_custom(resource["Type"]) and isinstance(value, dict):
                    walk({k: v for k, v in value.items() if k != "ServiceToken"})
                else:
                    walk(value)
        return names

    # ------------------------------------------------------------------------ conditions
    def condition(self, name: str, _stack: tuple[str, ...] = ()) -> bool:
        if name in self._conditions:
            return self._conditions[name]
        if name not in self._condition_defs:
            raise TemplateError(f"Template format error: Unresolved condition dependency {name}")
        if name in _stack:
            raise TemplateError(f"Template format error: Circular dependency between conditions: [{', '.join(_stack)}]")
        value = self._condition_value(self._condition_defs[name], f"Conditions.{name}", _stack + (name,))
        self._conditions[name] = value
        return value

    def _condition_value(self, value: Any, where: str, stack: tuple[str, ...] = ()) -> bool:
        found = _intrinsic(value)
        if found is None:
            if isinstance(value, bool):
                return value
            raise TemplateError(f"{where}: a condition must be Fn::Equals, Fn::Not, Fn::And, Fn::Or or Condition")
        key, arg = found
        if key == "Condition":
            return self.condition(str(arg), stack)
        if key == "Fn::Equals":
            if not isinstance(arg, list) or len(arg) != 2:
                raise TemplateError(f"{where}: Fn::Equals takes a list of two values")
            a, b = (self._plain(v, where) for v in arg)
            return _comparable(a) == _comparable(b)
        if key == "Fn::Not":
            items = arg if isinstance(arg, list) else [arg]
            if len(items) != 1:
                raise TemplateError(f"{where}: Fn::Not takes a list of one condition")
            return not self._condition_value(items[0], where, stack)
        if key in ("Fn::And", "Fn::Or"):
            if not isinstance(arg, list) or not 2 <= len(arg) <= 10:
                raise TemplateError(f"{where}: {key} takes a list of 2 to 10 conditions")
            results = [self._condition_value(v, where, stack) for v in arg]
            return all(results) if key == "Fn::And" else any(results)
        raise TemplateError(f"{where}: {key} is not a condition function")

    def _plain(self, value: Any, where: str) -> Any:
        """A value in Conditions: parameters, pseudo parameters and mappings only."""
        def no_resources(logical_id: str) -> ResourceView | None:
            raise TemplateError(f"{where}: conditions cannot refer to resources ({logical_id})")

        return self.resolve(value, no_resources, where)

    def _exists(self, definition: Mapping[str, Any], where: str) -> bool:
        name = definition.get("Condition")
        if name is None:
            return True
        if not isinstance(name, str):
            raise TemplateError(f"{where}: Condition must be the name of a condition")
        return self.condition(name)

    # -------------------------------------------------------------------- references
    def _references(self, value: Any, where: str) -> Iterator[tuple[str, str | None]]:
        """(name, attribute or None) for each Ref / GetAtt / Sub variable, following only the
        Fn::If branches the conditions choose."""
        found = _intrinsic(value)
        if found:
            key, arg = found
            if key == "Ref":
                if not isinstance(arg, str):
                    raise TemplateError(f"{where}: Ref takes a name")
                yield arg, None
                return
            if key == "Fn::GetAtt":
                logical_id, attribute = self._getatt_args(arg, where)
                yield logical_id, attribute if isinstance(attribute, str) else "*"
                if not isinstance(attribute, str):
                    yield from self._references(attribute, where)
                return
            if key == "Fn::Sub":
                text, variables = self._sub_args(arg, where)
                for name in _SUB_VARIABLE.findall(text):
                    name = name.strip()
                    if name.startswith("!") or name in variables:
                        continue
                    head, dot, attribute = name.partition(".")
                    if dot and head in self.all_resources:
                        yield head, attribute
                    else:
                        yield name, None
                for v in variables.values():
                    yield from self._references(v, where)
                return
            if key == "Fn::If":
                if not isinstance(arg, list) or len(arg) != 3 or not isinstance(arg[0], str):
                    raise TemplateError(f"{where}: Fn::If takes [condition name, value if true, value if false]")
                yield from self._references(arg[1] if self.condition(arg[0]) else arg[2], where)
                return
            if key == "Condition":
                return
        if isinstance(value, dict):
            for k, v in value.items():
                yield from self._references(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from self._references(v, f"{where}[{i}]")

    def _validate_references(self) -> None:
        unresolved: list[str] = []
        for where, value in self._evaluated_parts():
            for name, attribute in self._references(value, where):
                if attribute is None and (name in self.parameters or name in PSEUDO_PARAMETERS):
                    continue
                if name not in self.resources and name not in unresolved:
                    unresolved.append(name)
        for logical_id, resource in self.resources.items():
            for name in _depends_on(resource, logical_id):
                if name not in self.resources and name not in unresolved:
                    unresolved.append(name)
        if unresolved:
            raise TemplateError(f"Template format error: Unresolved resource dependencies [{', '.join(unresolved)}] "
                                "in the Resources block of the template")

    def _evaluated_parts(self) -> Iterator[tuple[str, Any]]:
        for logical_id, resource in self.resources.items():
            for key in ("Properties", "Metadata"):
                if key in resource:
                    props = resource[key]
                    if key == "Properties" and is_custom(resource["Type"]):
                        props = {k: v for k, v in props.items() if k != "ServiceToken"}  # replaced, not resolved
                    yield f"{logical_id}.{key}", props
        for name, output in self.outputs_defs.items():
            yield f"Outputs.{name}", output

    def _dependencies_of(self, logical_id: str) -> set[str]:
        resource = self.resources[logical_id]
        deps = set(_depends_on(resource, logical_id))
        for key in ("Properties", "Metadata"):
            if key in resource:
                value = resource[key]
                if key == "Properties" and is_custom(resource["Type"]):
                    value = {k: v for k, v in value.items() if k != "ServiceToken"}
                deps.update(name for name, _ in self._references(value, logical_id) if name in self.resources)
        return deps

    def attributes_used(self, logical_id: str) -> list[str]:
        """The attributes the template reads from `logical_id` with Fn::GetAtt (or ${Res.Attr})."""
        used: list[str] = []
        for where, value in self._evaluated_parts():
            for name, attribute in self._references(value, where):
                if name == logical_id and attribute not in (None, "*") and attribute not in used:
                    used.append(attribute)
        return used

    def _topological_order(self) -> list[str]:
        done: list[str] = []
        remaining = list(self.resources)
        while remaining:
            ready = next((r for r in remaining if self.dependencies[r] <= set(done)), None)
            if ready is None:
                cyclic = [r for r in remaining if self._reaches(r, r, set(remaining))]
                raise TemplateError(f"Template format error: Circular dependency between resources: "
                                    f"[{', '.join(cyclic or remaining)}]")
            done.append(ready)
            remaining.remove(ready)
        return done

    def _reaches(self, start: str, target: str, within: set[str]) -> bool:
        seen: set[str] = set()
        todo = [d for d in self.dependencies[start] if d in within]
        while todo:
            node = todo.pop()
            if node == target:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(d for d in self.dependencies[node] if d in within)
        return False

    def dependents(self, logical_id: str) -> list[str]:
        return [k for k, deps in self.dependencies.items() if logical_id in deps]

    # ---------------------------------------------------------------------- values
    def properties(self, logical_id: str, lookup: Lookup) -> dict[str, Any]:
        """The resource's Properties resolved (NoValue removed), without ServiceToken, scalars as
        strings (what CloudFormation sends a custom resource)."""
        props = {k: v for k, v in (self.resources[logical_id].get("Properties") or {}).items() if k != "ServiceToken"}
        resolved = self.resolve(props, lookup, f"{logical_id}.Properties")
        return stringify(resolved)

    def outputs(self, lookup: Lookup) -> dict[str, dict[str, Any]]:
        return {name: self.output(name, lookup) for name in self.outputs_defs}

    def output(self, name: str, lookup: Lookup) -> dict[str, Any]:
        """One output: {"Value": str, "Description"?: str, "ExportName"?: str}."""
        output = self.outputs_defs[name]
        if "Value" not in output:
            raise TemplateError(f"Template format error: Output {name} is malformed: Value is required")
        value = self.resolve(output["Value"], lookup, f"Outputs.{name}.Value")
        if isinstance(value, list):
            value = ",".join(_as_string(v, f"Outputs.{name}.Value") for v in value)
        entry: dict[str, Any] = {"Value": _as_string(value, f"Outputs.{name}.Value")}
        if "Description" in output:
            entry["Description"] = self.resolve(output["Description"], lookup, f"Outputs.{name}.Description")
        export = output.get("Export")
        if isinstance(export, dict) and "Name" in export:
            entry["ExportName"] = self.resolve(export["Name"], lookup, f"Outputs.{name}.Export.Name")
        return entry

    def resolve(self, value: Any, lookup: Lookup, where: str = "template") -> Any:
        """`value` with every intrinsic function evaluated; AWS::NoValue items removed."""
        found = _intrinsic(value)
        if found:
            key, arg = found
            return getattr(self, "_fn_" + key.replace("Fn::", "").lower())(arg, lookup, where)
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                resolved = self.resolve(v, lookup, f"{where}.{k}")
                if resolved is not NO_VALUE:
                    out[k] = resolved
            return out
        if isinstance(value, list):
            items = (self.resolve(v, lookup, f"{where}[{i}]") for i, v in enumerate(value))
            return [v for v in items if v is not NO_VALUE]
        return value

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            if self.on_warning:
                self.on_warning(message)

    def _ref(self, name: str, lookup: Lookup, where: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        pseudo = {
            "AWS::AccountId": self.stack.account_id, "AWS::NotificationARNs": [], "AWS::Partition": self.stack.partition,
            "AWS::Region": self.stack.region, "AWS::StackId": self.stack.stack_id, "AWS::StackName": self.stack.name,
            "AWS::URLSuffix": self.stack.url_suffix,
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name not in self.resources:
            raise TemplateError(f"{where}: Unresolved resource dependencies [{name}]")
        if not is_custom(self.resources[name]["Type"]):
            placeholder = PLACEHOLDER_PREFIX + name
            self._warn(f"{where}: Ref {name} -> {placeholder!r} ({self.resources[name]['Type']} is not created by simulate)")
            return placeholder
        created = lookup(name)
        if created is None:
            raise TemplateError(f"{where}: {name} has not been created")
        return created.physical_id

    def _getatt(self, logical_id: str, attribute: str, lookup: Lookup, where: str) -> Any:
        if logical_id not in self.resources:
            raise TemplateError(f"{where}: Unresolved resource dependencies [{logical_id}]")
        rtype = self.resources[logical_id]["Type"]
        if not is_custom(rtype):
            placeholder = f"{PLACEHOLDER_PREFIX}{logical_id}.{attribute}"
            self._warn(f"{where}: Fn::GetAtt {logical_id}.{attribute} -> {placeholder!r} ({rtype} is not created by simulate)")
            return placeholder
        created = lookup(logical_id)
        if created is None:
            raise TemplateError(f"{where}: {logical_id} has not been created")
        data = created.data or {}
        if attribute not in data:
            raise AttributeMissing(logical_id, attribute)
        return data[attribute]

    @staticmethod
    def _getatt_args(arg: Any, where: str) -> tuple[str, Any]:
        if isinstance(arg, str):
            logical_id, dot, attribute = arg.partition(".")
            if dot and logical_id and attribute:
                return logical_id, attribute
        elif isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str):
            return arg[0], arg[1]
        raise TemplateError(f"{where}: Fn::GetAtt takes [LogicalId, Attribute]")

    @staticmethod
    def _sub_args(arg: Any, where: str) -> tuple[str, dict[str, Any]]:
        if isinstance(arg, str):
            return arg, {}
        if isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str) and isinstance(arg[1], dict):
            return arg[0], arg[1]
        raise TemplateError(f"{where}: Fn::Sub takes a string, or [string, {{variables}}]")

    # --- the functions, one method each (named after the function, lower case)
    def _fn_ref(self, arg: Any, lookup: Lookup, where: str) -> Any:
        if not isinstance(arg, str):
            raise TemplateError(f"{where}: Ref takes a name")
        return self._ref(arg, lookup, where)

    def _fn_condition(self, arg: Any, lookup: Lookup, where: str) -> bool:
        return self.condition(str(arg))

    def _fn_getatt(self, arg: Any, lookup: Lookup, where: str) -> Any:
        logical_id, attribute = self._getatt_args(arg, where)
        attribute = _as_string(self.resolve(attribute, lookup, where), f"{where} (Fn::GetAtt attribute)")
        return self._getatt(logical_id, attribute, lookup, where)

    def _fn_sub(self, arg: Any, lookup: Lookup, where: str) -> str:
        text, variables = self._sub_args(arg, where)
        values = {k: self.resolve(v, lookup, f"{where}.{k}") for k, v in variables.items()}

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in values:
                value = values[name]
            else:
                head, dot, attribute = name.partition(".")
                if dot and head in self.all_resources:
                    value = self._getatt(head, attribute, lookup, where)
                else:
                    value = self._ref(name, lookup, where)
            return _as_string(value, f"{where}: Fn::Sub variable ${{{name}}}")

        return _SUB_VARIABLE.sub(substitute, text)

    def _fn_join(self, arg: Any, lookup: Lookup, where: str) -> str:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Join takes [delimiter, [values]]")
        delimiter = _as_string(self.resolve(arg[0], lookup, where), f"{where} (Fn::Join delimiter)")
        items = self.resolve(arg[1], lookup, where)
        if not isinstance(items, list):
            raise TemplateError(f"{where}: Fn::Join needs a list of values, got {_describe(items)}")
        return delimiter.join(_as_string(v, f"{where} (Fn::Join item)") for v in items)

    def _fn_select(self, arg: Any, lookup: Lookup, where: str) -> Any:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Select takes [index, [values]]")
        index = self.resolve(arg[0], lookup, where)
        items = self.resolve(arg[1], lookup, where)
        try:
            index = int(index)
        except (TypeError, ValueError):
            raise TemplateError(f"{where}: Fn::Select index must be a number, got {_describe(index)}") from None
        if not isinstance(items, list):
            raise TemplateError(f"{where}: Fn::Select needs a list, got {_describe(items)}")
        if not 0 <= index < len(items):
            raise TemplateError(f"{where}: Fn::Select index {index} is out of bounds (list of {len(items)})")
        return items[index]

    def _fn_if(self, arg: Any, lookup: Lookup, where: str) -> Any:
        if not isinstance(arg, list) or len(arg) != 3 or not isinstance(arg[0], str):
            raise TemplateError(f"{where}: Fn::If takes [condition name, value if true, value if false]")
        return self.resolve(arg[1] if self.condition(arg[0]) else arg[2], lookup, where)

    def _fn_equals(self, arg: Any, lookup: Lookup, where: str) -> bool:
        return self._condition_value({"Fn::Equals": arg}, where)

    def _fn_not(self, arg: Any, lookup: Lookup, where: str) -> bool:
        return self._condition_value({"Fn::Not": arg}, where)

    def _fn_and(self, arg: Any, lookup: Lookup, where: str) -> bool:
        return self._condition_value({"Fn::And": arg}, where)

    def _fn_or(self, arg: Any, lookup: Lookup, where: str) -> bool:
        return self._condition_value({"Fn::Or": arg}, where)

    def _fn_findinmap(self, arg: Any, lookup: Lookup, where: str) -> Any:
        if not isinstance(arg, list) or len(arg) != 3:
            raise TemplateError(f"{where}: Fn::FindInMap takes [MapName, TopLevelKey, SecondLevelKey]")
        name, top, second = (_as_string(self.resolve(v, lookup, where), f"{where} (Fn::FindInMap key)") for v in arg)
        try:
            return self.mappings[name][top][second]
        except (KeyError, TypeError):
            raise TemplateError(f"{where}: Fn::FindInMap - Key '{second}' not found in Mapping '{name}' "
                                f"under '{top}'" if name in self.mappings else
                                f"{where}: Fn::FindInMap - Mapping named '{name}' is not present") from None

    def _fn_base64(self, arg: Any, lookup: Lookup, where: str) -> str:
        text = _as_string(self.resolve(arg, lookup, where), f"{where} (Fn::Base64)")
        return base64.b64encode(text.encode()).decode()

    def _fn_split(self, arg: Any, lookup: Lookup, where: str) -> list[str]:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Split takes [delimiter, string]")
        delimiter = _as_string(self.resolve(arg[0], lookup, where), f"{where} (Fn::Split delimiter)")
        text = _as_string(self.resolve(arg[1], lookup, where), f"{where} (Fn::Split source)")
        return text.split(delimiter)

    def _fn_getazs(self, arg: Any, lookup: Lookup, where: str) -> list[str]:
        region = self.resolve(arg, lookup, where) or self.stack.region
        return [f"{region}{zone}" for zone in "abc"]

    def _fn_importvalue(self, arg: Any, lookup: Lookup, where: str) -> str:
        name = _as_string(self.resolve(arg, lookup, where), f"{where} (Fn::ImportValue)")
        placeholder = f"{PLACEHOLDER_PREFIX}import-{name}"
        self._warn(f"{where}: Fn::ImportValue {name} -> {placeholder!r} (simulate has no other stacks to import from)")
        return placeholder

    def _fn_cidr(self, arg: Any, lookup: Lookup, where: str) -> list[str]:
        if not isinstance(arg, list) or len(arg) != 3:
            raise TemplateError(f"{where}: Fn::Cidr takes [ipBlock, count, cidrBits]")
        block, count, bits = (self.resolve(v, lookup, where) for v in arg)
        try:
            network = ipaddress.ip_network(str(block), strict=False)
            prefix = network.max_prefixlen - int(bits)
            subnets = network.subnets(new_prefix=prefix)
            return [str(next(subnets)) for _ in range(int(count))]
        except (ValueError, StopIteration) as exc:
            raise TemplateError(f"{where}: Fn::Cidr {_describe([block, count, bits])}: {exc or 'too many subnets'}") from None

    def _unsupported(self, name: str, where: str) -> Any:
        raise TemplateError(f"{where}: {name} needs a Transform, which simulate does not process")

    def _fn_transform(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::Transform", where)

    def _fn_tojsonstring(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::ToJsonString", where)

    def _fn_length(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::Length", where)

    # ------------------------------------------------------------------ resource attributes
    def policy(self, logical_id: str, name: str) -> str:
        """DeletionPolicy / UpdateReplacePolicy of a resource (default Delete)."""
        value = self.all_resources.get(logical_id, {}).get(name, "Delete")
        return str(self.resolve(value, lambda _: None, f"{logical_id}.{name}"))


def _depends_on(resource: Mapping[str, Any], logical_id: str) -> list[str]:
    value = resource.get("DependsOn", [])
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TemplateError(f"Template format error: {logical_id}.DependsOn must be a name or a list of names")
    return names


def _comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, (bool, int, float)):
        return stringify(value)
    return value


def parse_parameters(values: Iterable[str]) -> dict[str, str]:
    """["Key=Value", ...] (also "ParameterKey=K,ParameterValue=V", as the aws CLI takes them)."""
    result: dict[str, str] = {}
    for item in values:
        match = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", item)
        key, sep, value = (match.group(1), "=", match.group(2)) if match else item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        result[key.strip()] = value
    return result

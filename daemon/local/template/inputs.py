"""A template's inputs: Parameters (defaults, overrides, their constraints), `--parameter` values,
and Conditions (Fn::Equals / Not / And / Or over parameters and mappings)."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .values import (
    PLACEHOLDER_PREFIX,
    SUB_VARIABLE,
    ResourceView,
    TemplateError,
    as_string,
    intrinsic,
    is_custom,
    stringify,
)


class Inputs:
    """The Parameters and Conditions half of a Template (see document.Template)."""

    doc: Mapping[str, Any]
    all_resources: dict[str, Any]
    notes: list[str]
    _condition_defs: dict[str, Any]
    _conditions: dict[str, bool]

    if TYPE_CHECKING:

        def _section(self, name: str) -> dict[str, Any]: ...
        def resolve(self, value: Any, lookup: Any, where: str = "template") -> Any: ...

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
                    raw = ",".join(as_string(v, f"Parameter {name}") for v in raw)
            elif name not in outside_service_tokens:
                values[name] = PLACEHOLDER_PREFIX + name
                self.notes.append(
                    f"parameter {name} has no value, but it only feeds a ServiceToken, which simulate "
                    "replaces: left unset"
                )
                continue
            else:
                missing.append(name)
                continue
            values[name] = self._parameter_value(name, spec, as_string(raw, f"Parameter {name}"))
        if missing:
            raise TemplateError(
                f"Parameters: [{', '.join(missing)}] must have values (give them with --parameter NAME=VALUE)"
            )
        return values

    @staticmethod
    def _parameter_value(name: str, spec: Mapping[str, Any], value: str) -> Any:
        ptype = str(spec.get("Type", "String"))
        is_list = ptype == "CommaDelimitedList" or ptype.startswith("List<")
        items = [v.strip() for v in value.split(",")] if is_list else [value]
        allowed = spec.get("AllowedValues")
        if allowed is not None:
            allowed_strings = [as_string(v, f"Parameter {name} AllowedValues") for v in allowed]
            if any(item not in allowed_strings for item in items):
                raise TemplateError(f"Parameter '{name}' must be one of AllowedValues ({', '.join(allowed_strings)})")
        pattern = spec.get("AllowedPattern")
        if pattern is not None and any(re.fullmatch(str(pattern), item) is None for item in items):
            raise TemplateError(
                spec.get("ConstraintDescription")
                and f"Parameter '{name}' failed to satisfy constraint: {spec['ConstraintDescription']}"
                or f"Parameter '{name}' must match pattern {pattern}"
            )
        for bound, holds in (("MinLength", operator.ge), ("MaxLength", operator.le)):
            if bound in spec and any(not holds(len(item), int(spec[bound])) for item in items):
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
        for section in ("Conditions", "Outputs"):
            _mentioned(self.doc.get(section), names)
        for resource in self.all_resources.values():
            for key, value in resource.items():
                if (
                    key == "Properties"
                    and skip_service_tokens
                    and is_custom(resource["Type"])
                    and isinstance(value, dict)
                ):
                    _mentioned({k: v for k, v in value.items() if k != "ServiceToken"}, names)
                else:
                    _mentioned(value, names)
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
        found = intrinsic(value)
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
            return bool(comparable(a) == comparable(b))
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


def comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [comparable(v) for v in value]
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


def _mentioned(value: Any, names: set[str]) -> None:
    """Add to `names` each name a Ref / Sub mentions in `value`."""
    found = intrinsic(value)
    if found:
        key, arg = found
        if key == "Ref" and isinstance(arg, str):
            names.add(arg)
        elif key == "Fn::Sub":
            text = arg[0] if isinstance(arg, list) and arg else arg
            if isinstance(text, str):
                names.update(v.split(".")[0] for v in SUB_VARIABLE.findall(text) if not v.startswith("!"))
            _mentioned(arg, names)
            return
    if isinstance(value, dict):
        for v in value.values():
            _mentioned(v, names)
    elif isinstance(value, list):
        for v in value:
            _mentioned(v, names)

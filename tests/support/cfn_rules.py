"""A CloudFormation Rules evaluator for tests: a template's own Rules section, run against parameter
values and a fake account's subnets, as CloudFormation checks them before a stack operation.

Only what deploy/ templates use: Ref, Fn::Not / And / Or / Equals, Fn::Contains,
Fn::EachMemberEquals, Fn::EachMemberIn, Fn::ValueOf and Fn::ValueOfAll on AWS::EC2::Subnet::Id
(attributes AvailabilityZone and VpcId). Any other function, attribute or parameter type raises
`Unsupported`, so a template that starts using one fails its tests instead of passing unchecked.
A rule whose RuleCondition is false is skipped, as CloudFormation skips it.

Parameter values are what an operator passes: strings, defaults from the template; a
CommaDelimitedList or List<...> is split on commas with each member space-trimmed, so a
CommaDelimitedList's "" is [""], as in CloudFormation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SUBNET = "AWS::EC2::Subnet::Id"
SUBNET_ATTRIBUTES = {"AvailabilityZone": "availability_zone", "VpcId": "vpc_id"}


class Unsupported(NotImplementedError):
    """The template uses a rule function, attribute or parameter type this evaluator does not model."""


class RejectedParameters(ValueError):
    """CloudFormation would refuse the parameter values before any rule runs (e.g. no such subnet)."""


@dataclass(frozen=True)
class Subnet:
    """A subnet of the fake account: what Fn::ValueOf can read of it."""

    availability_zone: str
    vpc_id: str


@dataclass(frozen=True)
class Failure:
    """One assertion that does not hold: its rule and its AssertDescription."""

    rule: str
    description: str


def parameter_values(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str | list[str]]:
    """Each declared parameter's value (given, else its Default), lists split as CloudFormation does."""
    declared = template.get("Parameters", {})
    unknown = set(given) - set(declared)
    if unknown:
        raise RejectedParameters(f"parameters {sorted(unknown)} do not exist in the template")
    values: dict[str, str | list[str]] = {}
    for name, spec in declared.items():
        if name in given:
            raw = given[name]
        elif "Default" in spec:
            default = spec["Default"]
            raw = ",".join(map(str, default)) if isinstance(default, list) else str(default)
        else:
            raise RejectedParameters(f"parameter {name} must have a value")
        ptype = spec["Type"]
        values[name] = [v.strip() for v in raw.split(",")] if _is_list(ptype) else raw
    return values


def failed_assertions(
    template: Mapping[str, Any], given: Mapping[str, str], subnets: Mapping[str, Subnet]
) -> list[Failure]:
    """Every assertion of the template's Rules that fails under these values (empty: the stack may go on)."""
    evaluator = _Evaluator(template, parameter_values(template, given), subnets)
    failures = []
    for name, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not evaluator.boolean(rule["RuleCondition"], f"{name}.RuleCondition"):
            continue
        for i, assertion in enumerate(rule["Assertions"]):
            if not evaluator.boolean(assertion["Assert"], f"{name}.Assertions[{i}]"):
                failures.append(Failure(name, assertion.get("AssertDescription", "")))
    return failures


def _is_list(ptype: str) -> bool:
    return ptype == "CommaDelimitedList" or ptype.startswith("List<")


class _Evaluator:
    def __init__(
        self, template: Mapping[str, Any], values: Mapping[str, str | list[str]], subnets: Mapping[str, Subnet]
    ) -> None:
        self.types = {name: spec["Type"] for name, spec in template.get("Parameters", {}).items()}
        self.values = values
        self.subnets = subnets
        for name, ptype in self.types.items():
            if ptype in (SUBNET, f"List<{SUBNET}>"):
                ids = values[name] if isinstance(values[name], list) else [values[name]]
                missing = [i for i in ids if i not in subnets]
                if missing:  # CloudFormation checks AWS-specific parameter values exist, before the rules
                    raise RejectedParameters(f"parameter {name}: no such subnet {missing}")

    def boolean(self, value: Any, where: str) -> bool:
        result = self.value(value, where)
        if not isinstance(result, bool):
            raise Unsupported(f"{where}: {value!r} is not a condition")
        return result

    def value(self, value: Any, where: str) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return [self.value(v, where) for v in value]
        if not (isinstance(value, dict) and len(value) == 1):
            raise Unsupported(f"{where}: {value!r}")
        [(key, arg)] = value.items()
        method = getattr(self, "_" + key.replace("::", "_").lower(), None)
        if method is None:
            raise Unsupported(f"{where}: {key} is not a rule function this evaluator models")
        return method(arg, where)

    def _ref(self, arg: Any, where: str) -> Any:
        if arg not in self.values:
            raise Unsupported(f"{where}: Ref {arg!r} is not a parameter")
        return self.values[arg]

    def _fn_not(self, arg: Any, where: str) -> bool:
        [condition] = arg
        return not self.boolean(condition, where)

    def _fn_and(self, arg: Any, where: str) -> bool:
        assert 2 <= len(arg) <= 10, f"{where}: Fn::And takes 2 to 10 conditions"
        return all([self.boolean(c, where) for c in arg])

    def _fn_or(self, arg: Any, where: str) -> bool:
        assert 2 <= len(arg) <= 10, f"{where}: Fn::Or takes 2 to 10 conditions"
        return any([self.boolean(c, where) for c in arg])

    def _fn_equals(self, arg: Any, where: str) -> bool:
        a, b = (self.value(v, where) for v in arg)
        return bool(a == b)

    def _fn_contains(self, arg: Any, where: str) -> bool:
        items, item = self._list_and_string(arg, where)
        return item in items

    def _fn_eachmemberequals(self, arg: Any, where: str) -> bool:
        items, item = self._list_and_string(arg, where)
        return all(member == item for member in items)

    def _fn_eachmemberin(self, arg: Any, where: str) -> bool:
        check, match = (self.value(v, where) for v in arg)
        assert isinstance(check, list) and isinstance(match, list), f"{where}: Fn::EachMemberIn takes two lists"
        return all(member in match for member in check)

    def _fn_valueof(self, arg: Any, where: str) -> Any:
        name, attribute = arg
        assert isinstance(name, str) and isinstance(attribute, str), f"{where}: Fn::ValueOf takes literals only"
        ptype = self.types.get(name)
        if ptype not in (SUBNET, f"List<{SUBNET}>"):
            raise Unsupported(f"{where}: Fn::ValueOf of {name} ({ptype})")
        value = self.values[name]
        if isinstance(value, list):
            return [self._attribute(v, attribute, where) for v in value]
        return self._attribute(value, attribute, where)

    def _fn_valueofall(self, arg: Any, where: str) -> list[str]:
        ptype, attribute = arg
        if ptype != SUBNET:
            raise Unsupported(f"{where}: Fn::ValueOfAll of {ptype}")
        if f"List<{SUBNET}>" in self.types.values():
            raise Unsupported(f"{where}: Fn::ValueOfAll beside a List<{SUBNET}> parameter")
        names = [name for name, t in self.types.items() if t == SUBNET]
        return [self._attribute(str(self.values[name]), attribute, where) for name in names]

    def _attribute(self, subnet_id: str, attribute: str, where: str) -> str:
        if attribute not in SUBNET_ATTRIBUTES:
            raise Unsupported(f"{where}: subnet attribute {attribute}")
        value: str = getattr(self.subnets[subnet_id], SUBNET_ATTRIBUTES[attribute])
        return value

    def _list_and_string(self, arg: Any, where: str) -> tuple[list[Any], Any]:
        items, item = (self.value(v, where) for v in arg)
        assert isinstance(items, list) and isinstance(item, str), f"{where}: takes [list_of_strings, string]"
        return items, item

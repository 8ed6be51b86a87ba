"""The intrinsic functions: `resolve()` of Ref / Fn::GetAtt / Fn::Sub / Fn::Join / Fn::Select /
Fn::If / Fn::Split / Fn::FindInMap / Fn::Cidr / ... against the custom resources created so far."""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .values import (
    NO_VALUE,
    PLACEHOLDER_PREFIX,
    SUB_VARIABLE,
    AttributeMissing,
    Lookup,
    StackInfo,
    TemplateError,
    as_string,
    describe,
    intrinsic,
    is_custom,
)


class Intrinsics:
    """The resolving half of a Template (see document.Template): one method per function."""

    stack: StackInfo
    on_warning: Callable[[str], object] | None
    _warned: set[str]
    mappings: dict[str, Any]
    all_resources: dict[str, Any]
    resources: dict[str, Any]
    parameters: dict[str, Any]

    if TYPE_CHECKING:

        def condition(self, name: str, _stack: tuple[str, ...] = ()) -> bool: ...
        def _condition_value(self, value: Any, where: str, stack: tuple[str, ...] = ()) -> bool: ...

    def resolve(self, value: Any, lookup: Lookup, where: str = "template") -> Any:
        """`value` with every intrinsic function evaluated; AWS::NoValue items removed."""
        found = intrinsic(value)
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
            "AWS::AccountId": self.stack.account_id,
            "AWS::NotificationARNs": [],
            "AWS::Partition": self.stack.partition,
            "AWS::Region": self.stack.region,
            "AWS::StackId": self.stack.stack_id,
            "AWS::StackName": self.stack.name,
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
            self._warn(
                f"{where}: Ref {name} -> {placeholder!r} ({self.resources[name]['Type']} is not created by simulate)"
            )
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
            self._warn(
                f"{where}: Fn::GetAtt {logical_id}.{attribute} -> {placeholder!r} ({rtype} is not created by simulate)"
            )
            return placeholder
        created = lookup(logical_id)
        if created is None:
            raise TemplateError(f"{where}: {logical_id} has not been created")
        data = created.data or {}
        if attribute not in data:
            raise AttributeMissing(logical_id, attribute, sorted(map(str, data)))
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
        attribute = as_string(self.resolve(attribute, lookup, where), f"{where} (Fn::GetAtt attribute)")
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
            return as_string(value, f"{where}: Fn::Sub variable ${{{name}}}")

        return SUB_VARIABLE.sub(substitute, text)

    def _fn_join(self, arg: Any, lookup: Lookup, where: str) -> str:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Join takes [delimiter, [values]]")
        delimiter = as_string(self.resolve(arg[0], lookup, where), f"{where} (Fn::Join delimiter)")
        items = self.resolve(arg[1], lookup, where)
        if not isinstance(items, list):
            raise TemplateError(f"{where}: Fn::Join needs a list of values, got {describe(items)}")
        return delimiter.join(as_string(v, f"{where} (Fn::Join item)") for v in items)

    def _fn_select(self, arg: Any, lookup: Lookup, where: str) -> Any:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Select takes [index, [values]]")
        index = self.resolve(arg[0], lookup, where)
        items = self.resolve(arg[1], lookup, where)
        try:
            index = int(index)
        except (TypeError, ValueError):
            raise TemplateError(f"{where}: Fn::Select index must be a number, got {describe(index)}") from None
        if not isinstance(items, list):
            raise TemplateError(f"{where}: Fn::Select needs a list, got {describe(items)}")
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
        name, top, second = (as_string(self.resolve(v, lookup, where), f"{where} (Fn::FindInMap key)") for v in arg)
        try:
            return self.mappings[name][top][second]
        except (KeyError, TypeError):
            raise TemplateError(
                f"{where}: Fn::FindInMap - Key '{second}' not found in Mapping '{name}' under '{top}'"
                if name in self.mappings
                else f"{where}: Fn::FindInMap - Mapping named '{name}' is not present"
            ) from None

    def _fn_base64(self, arg: Any, lookup: Lookup, where: str) -> str:
        text = as_string(self.resolve(arg, lookup, where), f"{where} (Fn::Base64)")
        return base64.b64encode(text.encode()).decode()

    def _fn_split(self, arg: Any, lookup: Lookup, where: str) -> list[str]:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: Fn::Split takes [delimiter, string]")
        delimiter = as_string(self.resolve(arg[0], lookup, where), f"{where} (Fn::Split delimiter)")
        text = as_string(self.resolve(arg[1], lookup, where), f"{where} (Fn::Split source)")
        return text.split(delimiter)

    def _fn_getazs(self, arg: Any, lookup: Lookup, where: str) -> list[str]:
        region = self.resolve(arg, lookup, where) or self.stack.region
        return [f"{region}{zone}" for zone in "abc"]

    def _fn_importvalue(self, arg: Any, lookup: Lookup, where: str) -> str:
        name = as_string(self.resolve(arg, lookup, where), f"{where} (Fn::ImportValue)")
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
            raise TemplateError(
                f"{where}: Fn::Cidr {describe([block, count, bits])}: {exc or 'too many subnets'}"
            ) from None

    def _unsupported(self, name: str, where: str) -> Any:
        raise TemplateError(f"{where}: {name} needs a Transform, which simulate does not process")

    def _fn_transform(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::Transform", where)

    def _fn_tojsonstring(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::ToJsonString", where)

    def _fn_length(self, arg: Any, lookup: Lookup, where: str) -> Any:
        return self._unsupported("Fn::Length", where)

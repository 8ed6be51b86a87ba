"""The template object: one template under one set of parameter values, what exists, in which
order, and the values (properties, outputs, policies) CloudFormation would send and show."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .dependencies import Dependencies
from .inputs import Inputs
from .intrinsics import Intrinsics
from .values import PLACEHOLDER_PREFIX, Lookup, StackInfo, TemplateError, as_string, is_custom, stringify


class Template(Inputs, Dependencies, Intrinsics):
    """One template under one set of parameter values: what exists, in which order, and values."""

    def __init__(
        self,
        doc: Mapping[str, Any],
        parameters: Mapping[str, str] | None = None,
        stack: StackInfo | None = None,
        on_warning: Callable[[str], object] | None = None,
    ):
        self.doc = doc
        self.stack = stack or StackInfo.new("simulated-stack")
        self.on_warning = on_warning
        self._warned: set[str] = set()
        self.notes: list[str] = []  # said once, before anything happens
        if "Transform" in doc:
            raise TemplateError(
                "the template has a Transform (e.g. AWS::Serverless or AWS::LanguageExtensions); "
                "simulate reads plain templates only: process it first (e.g. sam build / sam validate)"
            )
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
        self.outputs_defs = {
            k: v for k, v in self._section("Outputs").items() if isinstance(v, dict) and self._exists(v, f"output {k}")
        }
        self._validate_references()
        self.dependencies = {k: self._dependencies_of(k) for k in self.resources}
        self.order = self._topological_order()
        self.custom = [k for k in self.order if is_custom(self.resources[k]["Type"])]
        for logical_id in self.order:
            rtype = self.resources[logical_id]["Type"]
            if not is_custom(rtype):
                self.notes.append(
                    f"{logical_id} ({rtype}) is not a custom resource: simulate does not create it; "
                    f"a Ref or Fn::GetAtt to it resolves to a placeholder ({PLACEHOLDER_PREFIX}...)"
                )

    # ---------------------------------------------------------------------- sections
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

    # ---------------------------------------------------------------------- values
    def properties(self, logical_id: str, lookup: Lookup) -> dict[str, Any]:
        """The resource's Properties resolved (NoValue removed), without ServiceToken, scalars as
        strings (what CloudFormation sends a custom resource)."""
        props = {k: v for k, v in (self.resources[logical_id].get("Properties") or {}).items() if k != "ServiceToken"}
        resolved = self.resolve(props, lookup, f"{logical_id}.Properties")
        strings: dict[str, Any] = stringify(resolved)
        return strings

    def outputs(self, lookup: Lookup) -> dict[str, dict[str, Any]]:
        return {name: self.output(name, lookup) for name in self.outputs_defs}

    def output(self, name: str, lookup: Lookup) -> dict[str, Any]:
        """One output: {"Value": str, "Description"?: str, "ExportName"?: str}."""
        output = self.outputs_defs[name]
        if "Value" not in output:
            raise TemplateError(f"Template format error: Output {name} is malformed: Value is required")
        value = self.resolve(output["Value"], lookup, f"Outputs.{name}.Value")
        if isinstance(value, list):
            value = ",".join(as_string(v, f"Outputs.{name}.Value") for v in value)
        entry: dict[str, Any] = {"Value": as_string(value, f"Outputs.{name}.Value")}
        if "Description" in output:
            entry["Description"] = self.resolve(output["Description"], lookup, f"Outputs.{name}.Description")
        export = output.get("Export")
        if isinstance(export, dict) and "Name" in export:
            entry["ExportName"] = self.resolve(export["Name"], lookup, f"Outputs.{name}.Export.Name")
        return entry

    # ------------------------------------------------------------------ resource attributes
    def policy(self, logical_id: str, name: str) -> str:
        """DeletionPolicy / UpdateReplacePolicy of a resource (default Delete)."""
        value = self.all_resources.get(logical_id, {}).get(name, "Delete")
        return str(self.resolve(value, lambda _: None, f"{logical_id}.{name}"))

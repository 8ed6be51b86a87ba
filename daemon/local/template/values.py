"""The vocabulary of templates: errors, pseudo parameters, AWS::NoValue, the stack's identity, and
the small value rules (what an intrinsic looks like, scalars as CloudFormation's strings)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import InputError

CUSTOM_RESOURCE_TYPE = "AWS::CloudFormation::CustomResource"
PSEUDO_PARAMETERS = (
    "AWS::AccountId",
    "AWS::NotificationARNs",
    "AWS::NoValue",
    "AWS::Partition",
    "AWS::Region",
    "AWS::StackId",
    "AWS::StackName",
    "AWS::URLSuffix",
)
PLACEHOLDER_PREFIX = "placeholder-"


class TemplateError(InputError, ValueError):
    """The template cannot be used as it stands (CloudFormation would refuse it too)."""


class AttributeMissing(TemplateError):
    """Fn::GetAtt names an attribute the custom resource's response did not return."""

    def __init__(self, logical_id: str, attribute: str, returned: list[str] | None = None):
        keys = ", ".join(returned) if returned else ""
        said = f"its answer's Data has {keys}" if keys else "its answer has no Data"
        super().__init__(f"{logical_id} returned no attribute {attribute!r} ({said})")
        self.logical_id, self.attribute = logical_id, attribute


def is_custom(resource_type: str) -> bool:
    return resource_type == CUSTOM_RESOURCE_TYPE or resource_type.startswith("Custom::")


class _NoValue:
    """AWS::NoValue: removes the property (or list item) it is the value of."""

    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE = _NoValue()


class ResourceView(Protocol):
    """What resolving needs from a created custom resource (read-only: attributes or properties)."""

    @property
    def physical_id(self) -> str: ...

    @property
    def data(self) -> Mapping[str, Any]: ...


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
    def new(cls, name: str, region: str = "us-east-1", account_id: str = "123456789012") -> StackInfo:
        partition = cls(name, "", region, account_id).partition
        return cls(
            name,
            f"arn:{partition}:cloudformation:{region}:{account_id}:stack/{name}/{uuid.uuid4()}",
            region,
            account_id,
        )


SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")
FUNCTIONS = (  # the Fn:: intrinsic functions a template may use (short form: !Name)
    "GetAtt",
    "Sub",
    "Join",
    "Select",
    "If",
    "Equals",
    "Not",
    "And",
    "Or",
    "FindInMap",
    "Base64",
    "Split",
    "GetAZs",
    "ImportValue",
    "Cidr",
    "Transform",
    "ToJsonString",
    "Length",
)
INTRINSICS = {"Ref", "Condition"} | {f"Fn::{n}" for n in FUNCTIONS}


def intrinsic(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key in INTRINSICS:
            return key, arg
    return None


def as_string(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TemplateError(f"{where}: expected a string, got {describe(value)}")


def describe(value: Any) -> str:
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

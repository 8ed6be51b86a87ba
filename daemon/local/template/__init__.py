"""CloudFormation templates for `cfn-provider simulate`: load, resolve, order.

- `load(path)` / `loads(text)` (loading.py): YAML or JSON, the short-form intrinsics (`!Ref`,
  `!GetAtt`, `!Sub`, ...) turned into their long form (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`, ...).
- `Template(doc, parameters, stack)` (document.py): Parameters (defaults, overrides, their
  constraints), pseudo parameters, Conditions, Mappings (inputs.py); the resources that exist under
  those conditions; their dependency order (Ref, GetAtt, Sub and DependsOn; a cycle is an error,
  worded as CloudFormation words it; dependencies.py); and `resolve()` of Ref / Fn::GetAtt /
  Fn::Sub / Fn::Join / Fn::Select / Fn::If / Fn::Split / ... against the custom resources created
  so far (intrinsics.py).
- values.py: the errors, pseudo parameters, AWS::NoValue, StackInfo and the scalar rules.

Only custom resources (`AWS::CloudFormation::CustomResource`, `Custom::*`) are simulated.
A Ref or GetAtt to any other resource resolves to a placeholder string, with a warning.
"""

from __future__ import annotations

from .document import Template
from .inputs import parse_parameters
from .loading import load, loads
from .values import (
    CUSTOM_RESOURCE_TYPE,
    NO_VALUE,
    PLACEHOLDER_PREFIX,
    PSEUDO_PARAMETERS,
    AttributeMissing,
    Lookup,
    ResourceView,
    StackInfo,
    TemplateError,
    is_custom,
    stringify,
)

__all__ = [
    "CUSTOM_RESOURCE_TYPE",
    "NO_VALUE",
    "PLACEHOLDER_PREFIX",
    "PSEUDO_PARAMETERS",
    "AttributeMissing",
    "Lookup",
    "ResourceView",
    "StackInfo",
    "Template",
    "TemplateError",
    "is_custom",
    "load",
    "loads",
    "parse_parameters",
    "stringify",
]

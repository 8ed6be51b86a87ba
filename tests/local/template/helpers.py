"""Helpers for the template tests: a stack, created resources, and one-line template / resolve."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cfn_provider.local.template import StackInfo, Template, loads

STACK = StackInfo("demo", "arn:aws:cloudformation:eu-west-1:111122223333:stack/demo/0000", "eu-west-1", "111122223333")


@dataclass
class Made:
    physical_id: str
    data: dict[str, Any] = field(default_factory=dict)


def template(text: str, parameters: dict[str, str] | None = None, warnings: list[str] | None = None) -> Template:
    return Template(loads(text), parameters, STACK, on_warning=(warnings.append if warnings is not None else None))


def resolve(t: Template, value: Any, made: dict[str, Made] | None = None) -> Any:
    return t.resolve(value, (made or {}).get)


# a Ref and a GetAtt to names the template does not define (indented, as the tests write templates)
UNDEFINED = """\
    Resources:
      Thing:
        Type: Custom::Echo
        Properties:
          ServiceToken: !Ref ServiceTokn
          Peer: !GetAtt Thingy.Url
"""

"""Custom::Echo: returns its ResourceProperties as Data.

Useful to try a provider end to end, and as the smallest example of the handler contract.

    Thing:
      Type: Custom::Echo
      Properties:
        ServiceToken: !Ref ProviderTopicArn
        Name: my-thing          # optional: becomes the PhysicalResourceId; changing it replaces the resource
        Colour: blue            # anything else comes back: !GetAtt Thing.Colour
        FailWith: "some reason" # optional: fail the request with this Reason (to try failure paths)

ServiceToken and ServiceTimeout are CloudFormation's own and are not echoed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cfn_provider.errors import HandlerFailure

_RESERVED = ("ServiceToken", "ServiceTimeout", "Name", "FailWith")


class FailedOnPurpose(HandlerFailure, RuntimeError):
    """FailWith: the Reason is the message alone (cfn_provider.pipeline.raised)."""

    reason_is_message = True


def _answer(event: Mapping[str, Any]) -> dict[str, Any]:
    props = event.get("ResourceProperties") or {}
    if props.get("FailWith"):
        raise FailedOnPurpose(str(props["FailWith"]))
    result: dict[str, Any] = {"Data": {k: v for k, v in props.items() if k not in _RESERVED}}
    if props.get("Name"):
        result["PhysicalResourceId"] = str(props["Name"])
    return result


def create(event: Mapping[str, Any]) -> dict[str, Any]:
    return _answer(event)


def update(event: Mapping[str, Any]) -> dict[str, Any]:
    return _answer(event)


def delete(event: Mapping[str, Any]) -> None:
    return None  # nothing to clean up

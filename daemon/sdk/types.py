"""Typed views of the handler contract: the request a handler receives and the mapping it may return.

They only describe the plain contract (docs/handlers.md) for type checkers and editors; nothing
at run time changes. A handler still receives the daemon's read-only dict, and may go on reading
it as a plain mapping:

    from cfn_provider import Context, CustomResourceRequest, HandlerResult

    def create(event: CustomResourceRequest, context: Context) -> HandlerResult:
        size = int(event["ResourceProperties"]["Size"])   # CloudFormation sends strings
        return {"PhysicalResourceId": f"thing-{size}", "Data": {"Size": size}}

Keys CloudFormation sends for every request type are required; `PhysicalResourceId` (Update and
Delete) and `OldResourceProperties` (Update) are not, so read them after checking `RequestType`
or with `.get`. ROS (Alibaba Cloud) requests carry the same keys and a few of their own
(`IntranetResponseURL`, `RegionId`, ...), listed here as optional.
"""

# No `from __future__ import annotations`: Python 3.11 tells NotRequired keys apart only from
# evaluated annotations (CustomResourceRequest.__optional_keys__, for tools that read them).
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["CustomResourceRequest", "HandlerResult"]


class CustomResourceRequest(TypedDict):
    """A custom-resource request as the handler receives it (read-only: `dict(event)` copies it)."""

    RequestType: Literal["Create", "Update", "Delete"]
    ResponseURL: str
    StackId: str
    RequestId: str
    LogicalResourceId: str
    ResourceType: str
    # The template's Properties, ServiceToken (and ServiceTimeout, when set) among them; every scalar
    # arrives as a string. Read-only, as the whole request is.
    ResourceProperties: Mapping[str, Any]
    OldResourceProperties: NotRequired[Mapping[str, Any]]  # Update only: the properties before it
    PhysicalResourceId: NotRequired[str]  # Update and Delete: the id the resource answered with
    ServiceToken: NotRequired[str]
    # ROS only
    IntranetResponseURL: NotRequired[str]
    StackName: NotRequired[str]
    ResourceOwnerId: NotRequired[str]
    CallerId: NotRequired[str]
    RegionId: NotRequired[str]


class HandlerResult(TypedDict, total=False):
    """What an action may return as a mapping (it may also return a str id, or None)."""

    PhysicalResourceId: str  # a new one on Update means replacement (CloudFormation then deletes the old)
    Data: Mapping[str, Any]  # the attributes `!GetAtt` reads
    NoEcho: bool  # mask Data in CloudFormation's output (CloudFormation only)

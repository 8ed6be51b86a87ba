"""Alibaba Cloud ROS: its dialect of the custom-resource protocol, and which URL answers it.

ROS speaks CloudFormation's protocol with differences (docs/ros.md): requests add
IntranetResponseURL, StackName, ResourceOwnerId, CallerId and RegionId, and StackId is a plain
id; the answer is POSTed as application/json with a GMT Date header; PhysicalResourceId is at
most 255 bytes and never changes on Update (ROS cannot replace a resource); there is no NoEcho;
the resource's timeout is `Timeout` (default 60 s, at most 43200 s).

ROS sends only the template's `Parameters` as ResourceProperties, so the daemon sees a
`Timeout` only when the template repeats it there; otherwise it keeps to the 60 s default,
which answers early rather than late.

A request is ROS's because its transport is (MNS, the HTTP listener), never because of what it
carries: a ROS-only field in a request on SNS/SQS changes nothing (docs/security.md, "The
transport decides the dialect"), and an ARN StackId on MNS is a ROS request's StackId like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, get_args

from ..trust.urls import ALIYUN_HOSTS
from .base import CLOUDFORMATION, Dialect

ROS = Dialect(
    name="ros",
    method="POST",
    content_type="application/json",
    dated=True,
    max_physical_id=255,
    max_resource_type=68,
    timeout_property="Timeout",
    default_timeout=60,
    max_timeout=43200,
    no_echo=False,
    replaces_on_update=False,
    response_hosts=ALIYUN_HOSTS,
    stack_name_field="StackName",
)
DIALECTS = {d.name: d for d in (CLOUDFORMATION, ROS)}  # by name: how a stored request names its dialect
UrlMode = Literal["intranet", "public", "auto"]  # --ros-response-url (ResponseUrlChoice)
URL_MODES: tuple[UrlMode, ...] = get_args(UrlMode)
_DMI = ("/sys/class/dmi/id/sys_vendor", "/sys/class/dmi/id/product_name")


def inside_alibaba_cloud(dmi_files: tuple[str, ...] = _DMI) -> bool:
    """True on an Alibaba Cloud ECS instance (its DMI vendor / product name say so)."""
    for path in dmi_files:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if "Alibaba Cloud" in text or "Aliyun" in text:
            return True
    return False


class Answerable(Protocol):
    """What choosing a response URL reads of a request (cfn_provider.pipeline.request.Request has it)."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def response_url(self) -> str: ...

    @property
    def intranet_response_url(self) -> str: ...


@dataclass(frozen=True)
class ResponseUrlChoice:
    """Which of a ROS request's URLs to answer on (--ros-response-url), in the order to try.

    intranet: IntranetResponseURL (ResponseURL when it has none); public: ResponseURL;
    auto: inside Alibaba Cloud the intranet URL first, then the public one on connection
    errors; elsewhere the public one only."""

    mode: UrlMode = "auto"
    inside_cloud: bool = False

    def urls(self, request: Answerable) -> list[str]:
        if request.dialect is not ROS or self.mode == "public":
            return [request.response_url]
        public, intranet = request.response_url, request.intranet_response_url
        if not intranet:
            return [public]
        if self.mode == "intranet":
            return [intranet]
        return [intranet, public] if self.inside_cloud else [public]


DEFAULT_URL_CHOICE = ResponseUrlChoice()  # auto, outside Alibaba Cloud: the public ResponseURL (frozen: safe to share)


def replacement_refused(old_id: str, new_id: str) -> str:
    """The FAILED reason for a handler that returned a new id on Update."""
    return (
        f"ROS cannot replace a custom resource: on Update the handler returned PhysicalResourceId "
        f"{new_id[:100]!r}, but it must stay {old_id[:100]!r}. Update the resource in place (return None "
        "or its id); to replace it, give it a new logical id in the template."
    )

"""The dialects of the custom-resource protocol: what differs between CloudFormation and ROS.

The transport decides a request's dialect, never the request: SNS/SQS carries CloudFormation's,
MNS (and the HTTP listener) ROS's; the worker is built with its transport's and hands it to
cfn_provider.pipeline.request.parse. A parsed request carries it, and the rest of the pipeline
reads every difference from it: how the answer is sent, the id and timeout limits, whether
NoEcho and replacement exist, and which hosts a ResponseURL may name. A field that only the
other dialect has changes none of this: it is ignored (and named in the log).
The CloudFormation values are the daemon's original behaviour, unchanged.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass

from ..trust.urls import S3_HOSTS, HostRule


@dataclass(frozen=True)
class Dialect:
    name: str  # in every log line of a message
    method: str  # how the response is sent to its URL
    content_type: str  # the response's Content-Type ("" for S3: the presigned signature covers it)
    dated: bool  # send a GMT Date header with the response
    max_physical_id: int  # bytes of PhysicalResourceId (as JSON text)
    max_resource_type: int | None  # characters of ResourceType (None: not checked)
    timeout_property: str  # the ResourceProperties key holding the resource's timeout
    default_timeout: int  # seconds, when the property is absent or unreadable
    max_timeout: int
    no_echo: bool  # the response may carry NoEcho
    replaces_on_update: bool  # a new PhysicalResourceId on Update is a replacement (else refused)
    response_hosts: HostRule  # ResponseURL hosts allowed without --allow-response-url
    stack_name_field: str | None = None  # request field naming the stack (else taken from StackId)
    ignored_fields: tuple[str, ...] = ()  # top-level fields only another dialect has: never read

    def headers(self) -> dict[str, str]:
        """Headers of one delivery attempt (the Date is that attempt's)."""
        headers = {"Content-Type": self.content_type}
        if self.dated:
            headers["Date"] = email.utils.formatdate(usegmt=True)
        return headers


ROS_FIELDS = ("IntranetResponseURL", "StackName", "ResourceOwnerId", "CallerId", "RegionId")  # what ROS adds

CLOUDFORMATION = Dialect(
    name="cloudformation",
    method="PUT",
    content_type="",
    dated=False,
    max_physical_id=1024,
    max_resource_type=None,
    timeout_property="ServiceTimeout",
    default_timeout=3600,
    max_timeout=3600,
    no_echo=True,
    replaces_on_update=True,
    response_hosts=S3_HOSTS,
    ignored_fields=ROS_FIELDS,
)

"""`cfn-provider local-invoke` and `cfn-provider event`: one request event through a handler on this
machine, with no stack, queue or daemon (as `sam local invoke -e` and `sam local generate-event`).

The event is read as the daemon reads a request (cfn_provider.pipeline.request.parse), routed by
the same --handler options, and answered by the daemon's own code (cfn_provider.pipeline.handling:
the handler under its ServiceTimeout, a `lambda:` function in its own process answering its
loopback URL), and the response body the daemon would PUT is printed instead. The event's
ResponseURL is never contacted.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, cast

from ..errors import StartupError
from ..functions.function import LambdaFunction
from ..functions.host import FunctionHost
from ..metrics import Metrics
from ..pipeline.cleanup import TimedOutCreates
from ..pipeline.handling import Handling
from ..pipeline.request import NotARequest, Request, parse
from ..pipeline.router import Router
from ..progress import InProgress

if TYPE_CHECKING:
    from ..stores.base import Store

REGION, ACCOUNT = "us-east-1", "123456789012"
STACK_NAME = "cfn-provider-local"
REQUEST_TYPES = ("create", "update", "delete")


class EventError(StartupError):
    """The event cannot be read or made (`cfn-provider: <why>`, exit 2)."""


def read_event(text: str, where: str) -> Request:
    """The request in `text` (from `where`: a file name or stdin), as the daemon parses it; an
    EventError when it is not JSON or not a request (its missing fields named)."""
    try:
        request = parse(text)
    except NotARequest as exc:
        raise EventError(f"{where}: {exc}") from None
    if request.problems:
        raise EventError(f"{where}: not a request CloudFormation would send: {'; '.join(request.problems)}")
    return request


async def answer(
    request: Request,
    handlers: Sequence[tuple[str, Any]],
    handler_paths: Sequence[str],
    functions: Mapping[str, Any],
) -> dict[str, Any]:
    """The response body the daemon would PUT for `request` (a long-running action's first step:
    its InProgress, as a dict with `Status` IN_PROGRESS)."""
    router = Router(handlers, functions=functions, handler_paths=handler_paths)
    route = router.route(request.resource_type)
    async with AsyncExitStack() as stack:
        if route is not None and isinstance(route.handler(), LambdaFunction):
            await stack.enter_async_context(FunctionHost())
        executor = stack.enter_context(ThreadPoolExecutor(max_workers=1, thread_name_prefix="handler"))
        timed_out = TimedOutCreates(cast("Store", _NoRecords()))
        handling = Handling(router, executor, None, Metrics(), timed_out, lambda: False)
        deadline = time.time() + request.service_timeout
        result = await handling.answer(request, deadline)
    if isinstance(result, InProgress):
        return {"Status": "IN_PROGRESS", "Reason": "a long-running action: the daemon would poll it"}
    body: dict[str, Any] = json.loads(result.body)
    return body


class _NoRecords:
    """The store of a run with none: no request was ever answered here (so a Delete carrying a
    timed-out marker is answered SUCCESS without the handler, as for a marker this daemon never gave)."""

    async def get(self, _key: str) -> None:
        return None


def run(request: Request, handlers: Sequence[tuple[str, Any]], paths: Sequence[str], fns: Mapping[str, Any]) -> Any:
    return asyncio.run(answer(request, handlers, paths, fns))


def make_event(
    request_type: str,
    resource_type: str,
    properties: Mapping[str, Any],
    old_properties: Mapping[str, Any] | None = None,
    physical_id: str | None = None,
    logical_id: str = "Resource",
    service_timeout: int | None = None,
) -> dict[str, Any]:
    """A request event as CloudFormation sends one (what a Lambda-backed custom resource receives),
    for a stack that does not exist: the ResponseURL is a placeholder local-invoke never contacts."""
    rtype = request_type.capitalize()
    request_id = str(uuid.uuid4())
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT}:cfn-provider"
    props: dict[str, Any] = {"ServiceToken": topic, **properties}
    if service_timeout is not None:
        props["ServiceTimeout"] = str(service_timeout)
    event: dict[str, Any] = {
        "RequestType": rtype,
        "ServiceToken": topic,
        "ResponseURL": f"https://cloudformation-custom-resource-response-{REGION.replace('-', '')}"
        f".s3.amazonaws.com/local/{request_id}",
        "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK_NAME}/{uuid.uuid4()}",
        "RequestId": request_id,
        "LogicalResourceId": logical_id,
        "ResourceType": resource_type,
        "ResourceProperties": props,
    }
    if rtype != "Create":
        event["PhysicalResourceId"] = physical_id or f"{STACK_NAME}-{logical_id}"
    if rtype == "Update":
        event["OldResourceProperties"] = {"ServiceToken": topic, **(old_properties or {})}
    return event

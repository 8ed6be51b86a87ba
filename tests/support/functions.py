"""Helpers for tests of `lambda:` functions called without the queue: write a function's folder,
load it the way the daemon does (the router, with its settings), answer a request the way the
worker does (runner.call, then response.success or response.failure) and read the body."""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

from cfn_provider.functions.settings import parse_options
from cfn_provider.pipeline import response as responses
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.router import Router
from cfn_provider.pipeline.runner import Context, HandlerTimeout, call

REPO = Path(__file__).resolve().parents[2]
STACK_ID = "arn:aws:cloudformation:eu-west-1:123456789012:stack/my-stack/5b8e2c10-1111-2222-3333-444455556666"
SIGNED_URL = (
    "https://cloudformation-custom-resource-response-euwest1.s3.eu-west-1.amazonaws.com/key"
    "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=deadbeefcafe"
)


def event_for(kind: str = "Create", rtype: str = "Custom::Thing", **props: Any) -> dict[str, Any]:
    doc = {
        "RequestType": kind,
        "ServiceToken": "arn:aws:sns:eu-west-1:123456789012:cfn-provider",
        "ResponseURL": SIGNED_URL,
        "StackId": STACK_ID,
        "RequestId": str(uuid.uuid4()),
        "LogicalResourceId": "Thing",
        "ResourceType": rtype,
        "ResourceProperties": {"Name": "n1", **props},
    }
    if kind != "Create":
        doc["PhysicalResourceId"] = "existing-id"
    if kind == "Update":
        doc["OldResourceProperties"] = {"Name": "old"}
    return doc


def write_function(folder: Path, source: str, module: str = "index", files: dict[str, str] | None = None) -> Path:
    """A function's folder: `module`.py with `source`, and any other files (relative path -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    for name, text in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def load(target: str, rtype: str = "Custom::Thing", *settings: str) -> Any:
    """The handler the daemon serves for `rtype` = `lambda:target`, with `TYPE=SETTING=VALUE` settings."""
    functions = parse_options([f"{rtype}={s}" for s in settings])
    router = Router([(rtype, "lambda:" + target)], use_entry_points=False, functions=functions)
    return router.route(rtype).handler()


def load_folder(folder: Path, target: str = "index.handler", rtype: str = "Custom::Thing", *settings: str) -> Any:
    return load(target, rtype, f"code={folder}", *settings)


async def answer(handler: Any, doc: dict[str, Any], executor: Any, budget: float = 30.0) -> dict[str, Any]:
    """The body CloudFormation would get for `doc` (as the worker builds it)."""
    request = parse(json.dumps(doc))
    context = Context(request, time.monotonic() + budget)
    try:
        result = await call(handler, request, context, executor)
    except HandlerTimeout as exc:
        resp = responses.cut_short(request, str(exc))
    except Exception as exc:  # noqa: BLE001 - as the worker does
        resp = responses.failure(request, str(exc) or type(exc).__name__)
    else:
        resp = responses.success(request, result)
    return json.loads(resp.body)


async def raw_call(handler: Any, doc: dict[str, Any], executor: Any, budget: float = 30.0, progress: Any = None) -> Any:
    """The handler's own result (InProgress, a mapping) for `doc`; a poll when `progress` is given."""
    request = parse(json.dumps(doc))
    context = Context(request, time.monotonic() + budget)
    if progress is None:
        return await call(handler, request, context, executor)
    return await getattr(handler, "poll_" + doc["RequestType"].lower())(request.wire, context, progress)

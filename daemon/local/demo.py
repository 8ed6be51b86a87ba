"""`cfn-provider demo`: a scripted stack lifecycle against the embedded emulator."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import click

from .. import logs
from ..config import Settings
from ..service import Service
from ..trust.urls import redact
from .emulator import Emulator, Provider, Stack, apply_env

DEMO_HANDLERS = (("Custom::Echo", None),)  # the built-in Custom::Echo: the only handler the demo serves


@dataclass
class Step:
    title: str
    request: dict[str, Any]
    expect_status: str
    expect_id: str | None = None  # None: any id; otherwise exact, or "marker" for the failed-Create marker


def _steps(stack: Stack) -> list[Step]:
    a = {"Name": "thing-a", "Colour": "blue"}
    a2 = {"Name": "thing-a", "Colour": "green"}
    b = {"Name": "thing-b", "Colour": "green"}
    broken = {"FailWith": "the demo asked this Create to fail"}
    return [
        Step("Create", stack.request("Create", "Thing", properties=a), "SUCCESS", "thing-a"),
        Step(
            "Update (in place: Colour changes)",
            stack.request("Update", "Thing", properties=a2, old_properties=a, physical_id="thing-a"),
            "SUCCESS",
            "thing-a",
        ),
        Step(
            "Update with replacement (Name changes, so the handler returns a new id)",
            stack.request("Update", "Thing", properties=b, old_properties=a2, physical_id="thing-a"),
            "SUCCESS",
            "thing-b",
        ),
        Step(
            "Delete of the replaced resource (CloudFormation's cleanup phase)",
            stack.request("Delete", "Thing", properties=a2, physical_id="thing-a"),
            "SUCCESS",
            "thing-a",
        ),
        Step("Delete", stack.request("Delete", "Thing", properties=b, physical_id="thing-b"), "SUCCESS", "thing-b"),
        Step(
            "Create that fails (the handler raises)",
            stack.request("Create", "Broken", properties=broken),
            "FAILED",
            "marker",
        ),
    ]


def _show_request(n: int, step: Step) -> None:
    req = dict(step.request)
    req["ResponseURL"] = redact(req["ResponseURL"])
    req["ResourceProperties"] = {k: v for k, v in req["ResourceProperties"].items() if k != "ServiceToken"}
    click.secho(f"\n[{n}] {step.title}", bold=True)
    click.echo(
        "  -> published to SNS: "
        + json.dumps(
            {
                k: req[k]
                for k in (
                    "RequestType",
                    "ResourceType",
                    "LogicalResourceId",
                    "PhysicalResourceId",
                    "ResourceProperties",
                    "ResponseURL",
                )
                if k in req
            }
        )
    )


def _check(step: Step, resp: dict[str, Any] | None) -> bool:
    if resp is None:
        click.secho("  <- no response in S3 within 30 s", fg="red")
        return False
    click.echo("  <- read back from S3: " + json.dumps(resp))
    ok = resp.get("Status") == step.expect_status
    if step.expect_id == "marker":
        ok = ok and resp.get("PhysicalResourceId", "").startswith("cfn-provider-failed-create-")
    elif step.expect_id is not None:
        ok = ok and resp.get("PhysicalResourceId") == step.expect_id
    click.secho(f"  {'ok' if ok else 'UNEXPECTED'}: {resp.get('Status')}", fg="green" if ok else "red")
    return ok


async def _script(stack: Stack) -> bool:
    ok = True
    steps = _steps(stack)
    for n, step in enumerate(steps, 1):
        _show_request(n, step)
        await asyncio.to_thread(stack.publish, step.request)
        ok = _check(step, await asyncio.to_thread(stack.response, step.request)) and ok
    # CloudFormation rolls the failed Create back with a Delete of the id it was given.
    failed = await asyncio.to_thread(stack.response, steps[-1].request, 0)
    marker = (failed or {}).get("PhysicalResourceId", "missing")
    rollback = Step(
        "Rollback Delete of the failed Create (answered without calling the handler)",
        stack.request("Delete", "Broken", properties={"FailWith": "x"}, physical_id=marker),
        "SUCCESS",
        marker,
    )
    _show_request(len(steps) + 1, rollback)
    await asyncio.to_thread(stack.publish, rollback.request)
    return _check(rollback, await asyncio.to_thread(stack.response, rollback.request)) and ok


def run_demo(show_logs: bool = False) -> int:
    logs.configure("console" if sys.stderr.isatty() else "json", "info" if show_logs else "error", stream=sys.stderr)
    click.secho("Starting the embedded AWS emulator (moto) on 127.0.0.1 ...", bold=True)
    emulator = Emulator()
    apply_env(emulator)
    try:
        provider = Provider.create(emulator, name="cfn-provider-demo")
        click.echo(
            f"  topic (the ServiceToken): {provider.topic_arn}\n  queue: {provider.queue_url}\n"
            f"  bucket for responses: s3://{provider.bucket}"
        )
        click.secho("  signature verification is OFF for the demo: the emulator does not sign like SNS", fg="yellow")
        with tempfile.TemporaryDirectory(prefix="cfn-provider-demo-") as state_dir:
            settings = Settings(
                queue_url=provider.queue_url,
                topic_arns=(provider.topic_arn,),
                state=f"sqlite://{state_dir}/state.db",
                verify_signatures=False,
                allow_response_urls=(emulator.endpoint + "/",),
                wait_seconds=1,
                handlers=DEMO_HANDLERS,
            )
            ok = asyncio.run(_demo(settings, Stack(provider, name="demo-stack")))
    finally:
        emulator.stop()
    click.secho(
        "\nEvery request got the answer expected." if ok else "\nSome answers were not as expected.",
        fg="green" if ok else "red",
        bold=True,
    )
    return 0 if ok else 1


async def _demo(settings: Settings, stack: Stack) -> bool:
    service = Service(settings)
    click.secho(
        "Starting the daemon (handlers: "
        + ", ".join(r.pattern for r in service.router.routes())
        + ", named by the demo; `run` serves only the handlers you name)",
        bold=True,
    )
    runner = asyncio.create_task(service.run())
    try:
        ok = await _script(stack)
    finally:
        service.stop()
        code = await runner
    return ok and code == 0

"""Handlers for the simulate tests (served by the daemon simulate runs on its own thread).

- `recorded`: Custom::Echo's behaviour (properties back as Data, Name as the id, FailWith fails),
  recording every request it gets in `requests`, so a test can read the wire.
- `ssm_thing`: an SSM parameter per resource (see _SsmThing), for the stack emulator tests.
- `slow`: Create takes CreateSeconds, either blocking the daemon's event loop (Block: "true",
  an async handler calling time.sleep: the daemon itself cannot answer until it returns) or in
  the thread pool; Update and Delete answer at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from cfn_provider.handlers import echo

requests: list[dict[str, Any]] = []


class _Recorded:
    def _record(self, event: Mapping[str, Any]) -> None:
        requests.append(dict(event))

    def create(self, event: Mapping[str, Any]) -> Any:
        self._record(event)
        return echo.create(event)

    def update(self, event: Mapping[str, Any]) -> Any:
        self._record(event)
        return echo.update(event)

    def delete(self, event: Mapping[str, Any]) -> Any:
        self._record(event)
        return echo.delete(event)


recorded = _Recorded()


class _Slow:
    async def create(self, event: Mapping[str, Any]) -> Any:
        props = event["ResourceProperties"]
        seconds = float(props.get("CreateSeconds", 0))
        if props.get("Block") == "true":
            time.sleep(seconds)  # noqa: ASYNC251 - the point: a handler that blocks the daemon's loop
        else:
            await asyncio.sleep(seconds)
        return {"PhysicalResourceId": f"slow-{event['LogicalResourceId']}"}

    async def update(self, event: Mapping[str, Any]) -> Any:
        return None

    async def delete(self, event: Mapping[str, Any]) -> Any:
        requests.append(dict(event))
        return None


slow = _Slow()


class _SsmThing:
    """Custom::SsmThing: `create` (and `update`) puts the SSM parameter /things/<logical id>, its value
    the property Value, or the value of the (seeded) parameter FromParameter names; `delete` deletes
    it, and fails when it is not there: a Delete that must find what the Create made."""

    def create(self, event: Mapping[str, Any]) -> Any:
        import boto3

        props, ssm = event["ResourceProperties"], boto3.client("ssm")
        value = (
            ssm.get_parameter(Name=props["FromParameter"])["Parameter"]["Value"]
            if "FromParameter" in props
            else props.get("Value", "x")
        )
        name = f"/things/{event['LogicalResourceId']}"
        ssm.put_parameter(Name=name, Value=value, Type="String", Overwrite=True)
        return {"PhysicalResourceId": name, "Data": {"Value": value}}

    update = create

    def delete(self, event: Mapping[str, Any]) -> Any:
        import boto3

        boto3.client("ssm").delete_parameter(Name=event["PhysicalResourceId"])  # ParameterNotFound: gone


ssm_thing = _SsmThing()

"""A counting proxy on 127.0.0.1 in front of a local DynamoDB (dynalite): every call, by operation, with
the capacity it consumed, without the daemon asking for it.

The daemon's store does not send ReturnConsumedCapacity (nothing in production reads it). This
proxy adds `"ReturnConsumedCapacity": "TOTAL"` to each call that accepts it, reads the units from
the answer, and takes them out again (recomputing botocore's x-amz-crc32 check) before the daemon
sees it: the daemon's calls and what it reads back are the same as without the proxy. dynalite does
not verify request signatures, so the rewritten body passes; it sizes items as DynamoDB does (the
larger of before and after for a write, 1 KB write / 4 KB read units, halved for an eventually
consistent read), except a read that finds nothing, which dynalite reports as 0 units and DynamoDB
bills as one item's read (Call.billed_units).

A write whose condition fails is billed by DynamoDB too (a write unit at least), but dynalite answers
it without units: it is counted as `failed` and priced at 1 WRU. Index writes (a write that puts an
item into the sparse `polls` index) are not in dynalite's TOTAL; the scenario's Creates never do.

    with CapacityProxy(dynalite.endpoint) as proxy:   # proxy.endpoint -> AWS_ENDPOINT_URL_DYNAMODB
        ...
        proxy.calls_between(t0, t1)                   # [Call(operation, at, units, error), ...]
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

READS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
_HOP_BY_HOP = ("host", "content-length", "transfer-encoding", "connection", "accept-encoding")


@dataclass
class Call:
    operation: str
    at: float  # time.time() when the request came in
    units: float | None  # consumed capacity units dynalite reported (None: not reported)
    error: str = ""  # the error's __type (e.g. ConditionalCheckFailedException), "" on success
    consistent: bool = False  # a read with ConsistentRead
    key: str = ""  # the item's partition key (`pk`), for a call on one item

    @property
    def is_write(self) -> bool:
        return self.operation in WRITES

    @property
    def is_read(self) -> bool:
        return self.operation in READS

    @property
    def billed_units(self) -> float:
        """What DynamoDB bills: the reported units, but a read at least one item's (1 RRU consistent,
        0.5 eventually consistent: dynalite reports 0 for a Query that finds nothing, DynamoDB bills
        it as a read of up to 4 KB); a failed conditional write, 1 WRU."""
        if self.is_read and not self.error:
            return max(self.units or 0.0, 1.0 if self.consistent else 0.5)
        if self.units is not None:
            return self.units
        return 1.0 if self.is_write and self.error.endswith("ConditionalCheckFailedException") else 0.0


def consumed_units(answer: dict[str, Any]) -> float | None:
    """CapacityUnits of an answer's ConsumedCapacity (a list for the batch and transaction calls)."""
    consumed = answer.get("ConsumedCapacity")
    if consumed is None:
        return None
    items = consumed if isinstance(consumed, list) else [consumed]
    return float(sum(c.get("CapacityUnits", 0.0) for c in items))


class CapacityProxy:
    """The proxy, served by aiohttp on a thread of its own."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dynamodb-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CapacityProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def calls_between(self, since: float = 0.0, until: float = float("inf")) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if since <= c.at < until]

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        at, body = time.time(), await request.read()
        operation = request.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        added, consistent, key = False, False, ""
        if operation in READS + WRITES:
            sent = json.loads(body)
            consistent = bool(sent.get("ConsistentRead"))
            key = str(sent.get("Key", {}).get("pk", {}).get("S", ""))
            if sent.get("ReturnConsumedCapacity", "NONE") == "NONE":
                sent["ReturnConsumedCapacity"], added = "TOTAL", True
                body = json.dumps(sent).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        assert self._session is not None
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as resp:
            answer, status = await resp.read(), resp.status
            out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
        units, error = None, ""
        if operation in READS + WRITES:
            parsed = json.loads(answer or b"{}")
            if status == 200:
                units = consumed_units(parsed)
                if added and "ConsumedCapacity" in parsed:  # the daemon gets what it would have got
                    del parsed["ConsumedCapacity"]
                    answer = json.dumps(parsed).encode()
                    out_headers["x-amz-crc32"] = str(zlib.crc32(answer))
            else:
                error = str(parsed.get("__type", status)).rsplit("#", 1)[-1]
        with self._lock:
            self.calls.append(Call(operation or request.method, at, units, error, consistent, key))
        return web.Response(body=answer, status=status, headers=out_headers)

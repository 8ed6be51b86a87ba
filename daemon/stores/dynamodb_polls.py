"""The DynamoDB store's long-running actions (cfn_provider.stores.dynamodb): POLLING records and
the sparse index `polls` that lists them, by shard, for the poll scheduler.

    save_progress UpdateItem state POLLING, progress, next_poll, poll_shard, lease 0 (and scrub_at for
                  a NoEcho progress); condition: same token, CLAIMED, or POLLING under the step's live
                  lease (a retry that was applied is recognised by its progress)
    park          UpdateItem lease 0, REMOVE next_poll and poll_shard (out of the index for good);
                  condition: same token, RESPONSE_READY or a held POLLING
    due_polls     Query the index (poll_shard, next_poll <= now) per shard, page by page past entries
                  whose lease lives (DynamoDB applies Limit before the filter), at most DUE_PAGES pages
    take_poll     UpdateItem owner/token/lease, next_poll = lease end; condition: POLLING (or a polled
                  answer not yet sent: it keeps poll_shard until mark_sent), due (unless `early`), lease lapsed
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..trust import retention
from .base import CLAIMED, POLLING, RESPONSE_READY, Record, _parked_by, _progress_saved_by
from .dynamodb_items import HELD, KEY_ATTRIBUTE, NEXT_POLL_ATTRIBUTE, POLL_INDEX, POLL_SHARDS, shard
from .dynamodb_items import LAPSED as _LAPSED
from .dynamodb_items import names as _names
from .dynamodb_items import number as _n
from .dynamodb_items import record as _record

DUE_PAGES, DUE_PAGE_SIZE = 8, 25  # due_polls reads at most this many pages of at least this many items per shard


class PollTransitions:
    """The POLLING transitions of DynamoDBStore, on its client (`_call`, `_conditional`, ...)."""

    clock: Callable[[], float]
    _due: dict[str, float]  # key -> scrub_at, for the NoEcho bodies and progress this process stored
    _call: Callable[..., Awaitable[dict[str, Any]]]
    _conditional: Callable[..., Awaitable[tuple[bool, dict[str, Any]]]]
    _in_the_way: Callable[[str, dict[str, Any]], Awaitable[Record | None]]
    _key: Callable[[str], dict[str, Any]]

    async def save_progress(
        self, key: str, token: str, progress: str, next_poll: float, request: str | None = None
    ) -> bool:
        now = self.clock()
        scrub_at = retention.progress_scrub_at(progress, now)  # NoEcho progress: kept in clear for the window only
        values = {
            ":polling": {"S": POLLING},
            ":claimed": {"S": CLAIMED},
            ":token": {"S": token},
            ":progress": {"S": progress},
            ":next": _n(next_poll),
            ":shard": {"S": shard(key)},
            ":zero": _n(0),
            ":now": _n(now),
        }
        update = "SET #state = :polling, #progress = :progress, #next = :next, #shard = :shard, #lease = :zero"
        if scrub_at is not None:
            update, values[":scrub"] = update + ", #scrub = :scrub", _n(scrub_at)
        if request is not None:
            update, values[":request"] = update + ", #request = :request", {"S": request}
        if scrub_at is None:
            update += " REMOVE #scrub"  # nothing to scrub in this progress (the one it replaces is gone)
        ok, resp = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression=update,
            ConditionExpression=HELD,
            ExpressionAttributeNames=_names(
                "#state",
                "#progress",
                "#next",
                "#shard",
                "#lease",
                "#token",
                "#scrub",
                *(["#request"] if request is not None else []),
            ),
            ExpressionAttributeValues=values,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        ok = ok or _progress_saved_by(await self._in_the_way(key, resp), token, progress, next_poll)  # an earlier try
        if ok and scrub_at is not None:
            self._due[key] = scrub_at
        return ok

    async def park(self, key: str, token: str) -> bool:
        """RESPONSE_READY (or a held POLLING) under this token: no lease, and out of the `polls` index for good."""
        ok, resp = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET #lease = :zero REMOVE #next, #shard",
            ConditionExpression="#token = :token AND (#state = :ready OR (#state = :polling AND #lease > :now))",
            ExpressionAttributeNames=_names("#lease", "#next", "#shard", "#token", "#state"),
            ExpressionAttributeValues={
                ":zero": _n(0),
                ":token": {"S": token},
                ":ready": {"S": RESPONSE_READY},
                ":polling": {"S": POLLING},
                ":now": _n(self.clock()),
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return ok or _parked_by(await self._in_the_way(key, resp), token)  # an earlier try was applied

    async def due_polls(self, now: float, limit: int) -> list[str]:
        """The due keys, oldest first. DynamoDB applies a query's Limit before its filter, so a
        shard's first page may hold only polls that are not free (a step running, an answer being
        delivered): each shard is read page by page until it gave `limit` due keys, up to DUE_PAGES
        pages (a parked answer leaves the index, so only live leases stand in the way)."""
        due: list[tuple[float, str]] = []
        for part in range(POLL_SHARDS):
            found, start = 0, None
            for _ in range(DUE_PAGES):
                resp = await self._call(
                    "query",
                    IndexName=POLL_INDEX,
                    Limit=max(limit, DUE_PAGE_SIZE),
                    KeyConditionExpression="#shard = :shard AND #next <= :now",
                    FilterExpression=f"#expires > :now AND {_LAPSED}",
                    ExpressionAttributeNames=_names("#shard", "#next", "#expires", "#lease"),
                    ExpressionAttributeValues={":shard": {"S": str(part)}, ":now": _n(now)},
                    **({"ExclusiveStartKey": start} if start else {}),
                )
                items = resp.get("Items", [])
                due += [(float(item[NEXT_POLL_ATTRIBUTE]["N"]), item[KEY_ATTRIBUTE]["S"]) for item in items]
                found, start = found + len(items), resp.get("LastEvaluatedKey")
                if found >= limit or not start:
                    break
        return [key for _, key in sorted(due)[:limit]]

    async def take_poll(
        self, key: str, owner: str, lease_seconds: float, *, token: str, early: bool = False
    ) -> Record | None:
        """`early`: due or not (the operator ending it: `cfn-provider answer --force`)."""
        now = self.clock()
        due = "" if early else "#next <= :now AND "
        ok, resp = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET #owner = :owner, #token = :token, #lease = :lease, #next = :lease",
            ConditionExpression=f"#state IN (:polling, :ready) AND {due}{_LAPSED} AND #expires > :now",
            ExpressionAttributeNames=_names("#owner", "#token", "#lease", "#next", "#state", "#expires"),
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":token": {"S": token},
                ":lease": _n(now + lease_seconds),
                ":polling": {"S": POLLING},
                ":ready": {"S": RESPONSE_READY},
                ":now": _n(now),
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        record = _record(resp.get("Attributes")) if ok else await self._in_the_way(key, resp)
        taken = record is not None and record.state in (POLLING, RESPONSE_READY) and record.token == token
        return record if taken else None

"""The idempotency store on DynamoDB (fleet mode: `--state dynamodb://TABLE`).

The same contract as `SQLiteStore` (see daemon/stores/sqlite.py): every transition is ONE conditional
write on the item whose partition key `pk` is the store key, so any number of daemons on any
number of hosts can share a table.

    claim         UpdateItem, condition: absent, expired, or (URL digest not answered, `sent_digests`)
                  CLAIMED under a lapsed lease or a stored FAILED for another URL digest under no
                  live lease. ReturnValues=ALL_OLD gives what was taken over; on a failed condition
                  ReturnValuesOnConditionCheckFailure=ALL_OLD gives what stood in the way, and when
                  that carries this attempt's own token the claim was applied by an earlier try.
    extend        UpdateItem lease_until, condition: same token, CLAIMED or RESPONSE_READY (or a held POLLING)
    save_response UpdateItem body/status, condition: same token, still CLAIMED (or already saved
                  by this token: an earlier try was applied)
    mark_sent     UpdateItem state/url_digest, ADD to the `sent_digests` string set, condition:
                  RESPONSE_READY stored by this token or under no live lease; else only the ADD
    release       DeleteItem, condition: same token, still CLAIMED, no URL answered yet; else
                  UpdateItem lease_until = 0 (the record of answered URLs stays)
    get           GetItem with ConsistentRead
    scrub         GetItem, then UpdateItem body (without Data) and scrub_at = 0, condition: the same
                  body, still due (cfn_provider.trust.retention: NoEcho Data leaves the table after the window)
    save_progress UpdateItem state POLLING, progress, next_poll, poll_shard, lease 0; condition: same
                  token, CLAIMED or POLLING (applied twice: the same item)
    due_polls     Query the sparse index `polls` (poll_shard, next_poll <= now), one per shard
    take_poll     UpdateItem owner/token/lease, next_poll = lease end; condition: POLLING (or a polled
                  answer not yet sent: it keeps poll_shard until mark_sent), due, lease lapsed
    own_stack     UpdateItem `principal` on the item `owner_key(StackId)` (no TTL: it never expires),
                  condition: absent; on a failed condition the owner is read from what stood in the way

A table has no sweep the daemon's role may run (no Scan), so a body is scrubbed by the daemon
that stored it (`scrub_due`, from its housekeeping, for the keys it saved), or by whichever daemon
next meets the record past its window (`scrub`, from the worker). A body whose daemon died inside
the window and whose request never comes back stays until the TTL deletes the item: the record's
`scrub_at` still tells every reader it is past the window, so it is never re-sent.

Every write names the claim attempt's `token` (see daemon/stores/sqlite.py): botocore's own retries
repeat a call with identical parameters, and the worker retries after connection errors, so
each write either is idempotent or recognises its own earlier application.

Expiry is decided by the numeric `expires_at` (as in SQLite), so an item that DynamoDB's TTL
sweeper has not yet removed is already "as if absent". `ttl` (epoch seconds) is the table's
TTL attribute, so expired items are eventually deleted for free. Times come from this host's
clock (`clock`): the fleet's clocks must agree to well within a lease (NTP).

The table (pk: S hash key, TTL on `ttl`) is created by `cfn-provider bootstrap
--dynamodb-table NAME`, never implicitly here: the daemon's role needs only GetItem,
UpdateItem and DeleteItem on it, and Query on its index `polls`: sparse (only a waiting
request's item has `poll_shard`), so a look reads the due keys and nothing else.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from ..errors import StartupError
from ..trust import retention
from .base import CLAIMED, DEFAULT_TTL, POLLING, RESPONSE_READY, SENT, Claim, Record, StoreConfigError, _saved_by
from .dynamodb_items import HELD, KEY_ATTRIBUTE
from .dynamodb_items import LAPSED as _LAPSED
from .dynamodb_items import names as _names
from .dynamodb_items import number as _n
from .dynamodb_items import record as _record
from .dynamodb_owners import own_stack
from .dynamodb_polls import PollTransitions

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")

_CLAIM_UPDATE = (
    "SET #state = :claimed, #owner = :owner, #token = :token, #lease = :lease, #digest = :digest, "
    "#expires = :expires, #ttl = :ttl REMOVE #status, #body, #scrub, #progress, #next, #shard"
)
_CLAIM_CONDITION = (
    "attribute_not_exists(#pk)"
    " OR #expires <= :now"
    " OR (NOT contains(#sent, :digest) AND ("
    f"(#state = :claimed AND {_LAPSED})"
    f" OR (#state <> :claimed AND #status = :failed AND #digest <> :digest AND {_LAPSED})))"
)
_OWNED_CLAIM = "#token = :token AND #state = :claimed"


class TableNotFound(StartupError, RuntimeError):
    """The table does not exist (in this region/account): it is created by `bootstrap`, not here. The
    operator's to fix (the store named is not there), whenever it is found."""


def table_from_url(url: str) -> str:
    """`dynamodb://TABLE` -> TABLE."""
    table = url[len("dynamodb://") :] if url.startswith("dynamodb://") else ""
    if not _TABLE_NAME.match(table):
        raise StoreConfigError(f"{url!r}: use dynamodb://TABLE, where TABLE is 3-255 of A-Z a-z 0-9 _ . -")
    return table


def _default_region() -> str | None:
    """AWS_REGION, else botocore's own (AWS_DEFAULT_REGION, the profile's region)."""
    import botocore.session

    return os.environ.get("AWS_REGION") or botocore.session.get_session().get_config_variable("region")


class DynamoDBStore(PollTransitions):
    """A DynamoDB table through aiobotocore; region and endpoint follow botocore's usual settings
    (AWS_REGION / AWS_DEFAULT_REGION / profile, AWS_ENDPOINT_URL[_DYNAMODB])."""

    def __init__(
        self,
        table: str,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
        region: str | None = None,
        session: Any = None,
    ):
        if not _TABLE_NAME.match(table):
            raise StoreConfigError(f"{table!r} is not a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)")
        self.table, self.ttl, self.clock = table, ttl, clock
        self.region = region or _default_region()
        if session is None and not self.region:
            raise StoreConfigError(
                f"dynamodb://{table}: no AWS region configured; set AWS_REGION or "
                "AWS_DEFAULT_REGION (or a region in the AWS profile)"
            )
        self._session = session
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._opening: asyncio.Lock | None = None
        self._closed = False
        self._due: dict[str, float] = {}  # key -> scrub_at, for the NoEcho bodies this process stored

    # ------------------------------------------------------------------ the client
    async def _get_client(self) -> Any:
        """The client, created on first use inside the running loop (it is bound to that loop)."""
        if self._client is not None:
            return self._client
        if self._closed:
            raise RuntimeError("DynamoDBStore is closed")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._client is None:
                import aiobotocore.session
                from botocore.config import Config

                session = self._session or aiobotocore.session.get_session()
                stack = AsyncExitStack()
                config = Config(
                    retries={"mode": "standard", "max_attempts": 5},
                    connect_timeout=5,
                    read_timeout=10,
                    max_pool_connections=64,
                )  # one request per in-flight message
                self._client = await stack.enter_async_context(
                    session.create_client("dynamodb", region_name=self.region, config=config)
                )
                self._stack = stack
        return self._client

    async def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        client = await self._get_client()
        try:
            response: dict[str, Any] = await getattr(client, operation)(TableName=self.table, **params)
            return response
        except client.exceptions.ResourceNotFoundException as exc:
            raise TableNotFound(
                f"DynamoDB table {self.table!r} not found ({exc}); create it with "
                f"`cfn-provider bootstrap --dynamodb-table {self.table}`"
            ) from None

    async def _conditional(self, operation: str, **params: Any) -> tuple[bool, dict[str, Any]]:
        """(True, response) when the condition held; (False, error response) when it did not."""
        client = await self._get_client()
        try:
            return True, await self._call(operation, **params)
        except client.exceptions.ConditionalCheckFailedException as exc:
            return False, exc.response

    async def _in_the_way(self, key: str, resp: dict[str, Any]) -> Record | None:
        """The item a failed condition returned (ReturnValuesOnConditionCheckFailure=ALL_OLD), or
        a consistent read of it where the endpoint does not return it."""
        if "Item" in resp:
            return _record(resp["Item"])
        return await self.get(key)

    @staticmethod
    def _key(key: str) -> dict[str, Any]:
        return {KEY_ATTRIBUTE: {"S": key}}

    # ------------------------------------------------------------------ a stack's owner
    async def own_stack(self, stack_id: str, principal: str) -> str:
        return await own_stack(self, stack_id, principal)

    # ------------------------------------------------------------------ claim: the lock
    async def claim(
        self, key: str, owner: str, url_digest: str, lease_seconds: float, *, token: str, request: str | None = None
    ) -> Claim:
        now = self.clock()
        expires_at = now + self.ttl
        update, names, request_value = _CLAIM_UPDATE, ["#request"] if request is not None else [], {}
        if request is not None:  # the request's JSON; a claim without one keeps what is stored
            update = update.replace(" REMOVE", ", #request = :request REMOVE")
            request_value = {":request": {"S": request}}
        acquired, resp = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression=update,
            ConditionExpression=_CLAIM_CONDITION,
            ExpressionAttributeNames=_names(
                "#pk",
                "#state",
                "#owner",
                "#token",
                "#lease",
                "#digest",
                "#expires",
                "#ttl",
                "#status",
                "#body",
                "#scrub",
                "#sent",
                "#progress",
                "#next",
                "#shard",
                *names,
            ),
            ExpressionAttributeValues={
                ":claimed": {"S": CLAIMED},
                ":owner": {"S": owner},
                ":token": {"S": token},
                ":lease": _n(now + lease_seconds),
                ":digest": {"S": url_digest},
                ":expires": _n(expires_at),
                ":ttl": {"N": str(math.ceil(expires_at))},
                ":now": _n(now),
                ":failed": {"S": "FAILED"},
                **request_value,
            },
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        before = _record(resp.get("Attributes")) if acquired else await self._in_the_way(key, resp)
        if before is not None and before.expires_at <= now:
            before = None  # expired: as if absent
        if before is not None and before.token == token:
            return Claim(True, None)  # this attempt's own claim, applied by an earlier try
        return Claim(acquired, before)

    # ------------------------------------------------------------------ the other transitions
    async def extend(self, key: str, token: str, lease_seconds: float) -> bool:
        now = self.clock()  # a poll step's lease only while held: a late beat never retakes a let-go one
        ok, _ = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET #lease = :lease",
            ConditionExpression=(
                "#token = :token AND (#state IN (:claimed, :ready) OR (#state = :polling AND #lease > :now))"
            ),
            ExpressionAttributeNames=_names("#lease", "#token", "#state"),
            ExpressionAttributeValues={
                ":lease": _n(now + lease_seconds),
                ":token": {"S": token},
                ":claimed": {"S": CLAIMED},
                ":ready": {"S": RESPONSE_READY},
                ":polling": {"S": POLLING},
                ":now": _n(now),
            },
        )
        return ok

    async def save_response(self, key: str, token: str, status: str, body: bytes) -> bool:
        now = self.clock()
        scrub_at = retention.scrub_at(body, now)
        scrubbing = {":scrub": _n(scrub_at)} if scrub_at is not None else {}
        ok, resp = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET #state = :ready, #status = :status, #body = :body"
            + (", #scrub = :scrub" if scrubbing else ""),  # else a NoEcho progress's stays
            ConditionExpression=HELD,
            ExpressionAttributeNames=_names(
                "#state", "#status", "#body", "#token", "#lease", *(["#scrub"] if scrubbing else [])
            ),
            ExpressionAttributeValues={
                ":ready": {"S": RESPONSE_READY},
                ":status": {"S": status},
                ":body": {"B": bytes(body)},
                ":token": {"S": token},
                ":now": _n(now),
                ":claimed": {"S": CLAIMED},
                ":polling": {"S": POLLING},
                **scrubbing,
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if not ok:
            record = await self._in_the_way(key, resp)  # an earlier try of this very write may have been applied
            ok = _saved_by(record, token, body)
        if ok and scrub_at is not None:
            self._due[key] = scrub_at
        return ok

    async def mark_sent(self, key: str, url_digest: str, token: str | None = None) -> None:
        values = {
            ":sent": {"S": SENT},
            ":digest": {"S": url_digest},
            ":digests": {"SS": [url_digest]},
            ":ready": {"S": RESPONSE_READY},
            ":now": _n(self.clock()),
        }
        mine = _LAPSED
        if token is not None:
            mine, values[":token"] = f"(#token = :token OR {_LAPSED})", {"S": token}
        moved, _ = await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET #state = :sent, #digest = :digest ADD #sent :digests REMOVE #lease, #next, #shard",
            ConditionExpression=f"#state IN (:ready, :sent) AND {mine}",
            ExpressionAttributeNames=_names(
                "#state", "#digest", "#sent", "#lease", "#next", "#shard", *(["#token"] if token else [])
            ),
            ExpressionAttributeValues=values,
        )
        if not moved:  # someone else's claim or delivery: only remember that this URL is answered
            await self._conditional(
                "update_item",
                Key=self._key(key),
                UpdateExpression="ADD #sent :digests",
                ConditionExpression="attribute_exists(#pk)",
                ExpressionAttributeNames=_names("#sent", "#pk"),
                ExpressionAttributeValues={":digests": {"SS": [url_digest]}},
            )

    async def release(self, key: str, token: str) -> None:
        names = _names("#token", "#state")
        values = {":token": {"S": token}, ":claimed": {"S": CLAIMED}}
        deleted, resp = await self._conditional(
            "delete_item",
            Key=self._key(key),
            ConditionExpression=f"{_OWNED_CLAIM} AND attribute_not_exists(#sent)",
            ExpressionAttributeNames={**names, **_names("#sent")},
            ExpressionAttributeValues=values,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if deleted:
            return
        record = await self._in_the_way(key, resp)
        if record is not None and record.token == token and record.state == CLAIMED:  # URLs already answered
            await self._conditional(
                "update_item",
                Key=self._key(key),
                UpdateExpression="SET #lease = :zero",
                ConditionExpression=_OWNED_CLAIM,
                ExpressionAttributeNames={**names, **_names("#lease")},
                ExpressionAttributeValues={**values, ":zero": _n(0)},
            )

    async def get(self, key: str) -> Record | None:
        resp = await self._call("get_item", Key=self._key(key), ConsistentRead=True)
        return _record(resp.get("Item"))

    async def scrub(self, key: str) -> None:
        """Take the NoEcho Data out of `key`'s body, and the handler's part out of its NoEcho
        progress, if their window has passed (see cfn_provider.trust.retention)."""
        now = self.clock()
        record = await self.get(key)
        if record is None or not (record.body or record.progress) or not record.scrub_at or record.scrub_at > now:
            return
        sets, conditions = ["#scrub = :done"], ["#scrub = :due"]
        values: dict[str, Any] = {":done": _n(retention.SCRUBBED), ":due": _n(record.scrub_at)}
        if record.body:
            sets.append("#body = :scrubbed")
            conditions.append("#body = :body")
            values.update({":scrubbed": {"B": retention.scrub(record.body)}, ":body": {"B": record.body}})
        if record.progress:
            sets.append("#progress = :bookkeeping")
            conditions.append("#progress = :progress")
            values.update(
                {":bookkeeping": {"S": retention.scrub_progress(record.progress)}, ":progress": {"S": record.progress}}
            )
        await self._conditional(
            "update_item",
            Key=self._key(key),
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeNames=_names(
                "#scrub", *(["#body"] if record.body else []), *(["#progress"] if record.progress else [])
            ),
            ExpressionAttributeValues=values,
        )

    async def scrub_due(self) -> int:
        """Scrub the bodies (and progress) this process stored whose window has passed; how many were due."""
        now = self.clock()
        due = [key for key, at in self._due.items() if at <= now]
        for key in due:
            await self.scrub(key)
            self._due.pop(key, None)
        return len(due)

    async def close(self) -> None:
        self._closed = True
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

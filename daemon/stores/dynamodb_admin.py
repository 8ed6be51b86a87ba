"""The operator's view of a DynamoDB store: listing its records with a Scan.

Used by `cfn-provider requests` and `cfn-provider answer` only, never by the daemon: the daemon's
role (deploy/provider.yaml) has GetItem, UpdateItem and DeleteItem on the table and no Scan, so a
compromised daemon cannot read every stored answer at once. The operator running these commands
needs dynamodb:Scan on the table besides.
"""

from __future__ import annotations

from typing import Any

from .base import Record
from .dynamodb import DynamoDBStore
from .dynamodb_items import names as _names
from .dynamodb_items import number as _n
from .dynamodb_items import record as _record


class DynamoDBAdminStore(DynamoDBStore):
    """A DynamoDBStore that can also list its records (the `Listing` protocol)."""

    async def list_records(self, since: float | None = None) -> list[Record]:
        """Every unexpired item (claimed at or after `since`, if given), a Scan of consistent reads,
        page after page; the newest claim first."""
        oldest = since + self.ttl if since is not None else 0.0
        params: dict[str, Any] = dict(
            FilterExpression="#expires > :now AND #expires >= :oldest",
            ExpressionAttributeNames=_names("#expires"),
            ExpressionAttributeValues={":now": _n(self.clock()), ":oldest": _n(oldest)},
            ConsistentRead=True,
        )
        records: list[Record] = []
        while True:
            page = await self._call("scan", **params)
            records += [r for r in map(_record, page.get("Items", [])) if r is not None]
            if not page.get("LastEvaluatedKey"):
                break
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(records, key=lambda r: r.expires_at, reverse=True)

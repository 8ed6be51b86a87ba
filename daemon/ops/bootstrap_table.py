"""`cfn-provider bootstrap`'s DynamoDB step: the fleet-mode table, created or adopted (its key checked,
its poll index and TTL setting added when missing)."""

from __future__ import annotations

from typing import Any

from .bootstrap_changes import CREATED, EXISTS, UPDATED, BootstrapError, Change

TTL_ATTRIBUTE, KEY_ATTRIBUTE = "ttl", "pk"  # as daemon/stores/dynamodb_items.py names them
POLL_INDEX = "polls"  # as daemon/stores/dynamodb.py queries it: the sparse index of waiting polls
_POLL_ATTRIBUTES = [
    {"AttributeName": "poll_shard", "AttributeType": "S"},
    {"AttributeName": "next_poll", "AttributeType": "N"},
]
_POLL_INDEX_SPEC = {
    "IndexName": POLL_INDEX,
    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["expires_at", "lease_until"]},
    "KeySchema": [
        {"AttributeName": "poll_shard", "KeyType": "HASH"},
        {"AttributeName": "next_poll", "KeyType": "RANGE"},
    ],
}


def ensure_table(dynamodb: Any, table: str, dry_run: bool = False) -> Change:
    """The fleet-mode table: `pk` (S) hash key, on-demand billing, TTL on `ttl`, and the sparse
    index `polls` (poll_shard S, next_poll N; with expires_at and lease_until) of requests waiting for a poll.

    An existing table is adopted when its key is `pk` (S); only its TTL setting and the index are
    ever changed (a table from before long-running actions gets the index added).
    """
    try:
        desc = dynamodb.describe_table(TableName=table)["Table"]
    except dynamodb.exceptions.ResourceNotFoundException:
        return _create(dynamodb, table, dry_run)
    _check_key(table, desc)
    index_added = _ensure_index(dynamodb, table, desc, dry_run)
    return _ensure_ttl(dynamodb, table, dry_run, index_added)


def _create(dynamodb: Any, table: str, dry_run: bool) -> Change:
    if not dry_run:
        dynamodb.create_table(
            TableName=table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}, *_POLL_ATTRIBUTES],
            KeySchema=[{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[_POLL_INDEX_SPEC],
            Tags=[{"Key": "created-by", "Value": "cfn-provider bootstrap"}],
        )
        dynamodb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        dynamodb.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
        )
    return Change(
        "dynamodb table",
        table,
        CREATED,
        f"key {KEY_ATTRIBUTE} (S), on-demand, TTL on {TTL_ATTRIBUTE}, index {POLL_INDEX}",
    )


def _check_key(table: str, desc: dict[str, Any]) -> None:
    """An existing table is adopted only when its one key is `pk` (S)."""
    keys = [(k["AttributeName"], k["KeyType"]) for k in desc["KeySchema"]]
    types = {a["AttributeName"]: a["AttributeType"] for a in desc.get("AttributeDefinitions", [])}
    if keys != [(KEY_ATTRIBUTE, "HASH")] or types.get(KEY_ATTRIBUTE) != "S":
        raise BootstrapError(
            f"DynamoDB table {table} exists with key {keys}; fleet mode needs a table whose only "
            f"key is {KEY_ATTRIBUTE} (S): choose another --dynamodb-table name"
        )


def _ensure_index(dynamodb: Any, table: str, desc: dict[str, Any], dry_run: bool) -> Change | None:
    """The poll index added to a table from before long-running actions (the change), or None."""
    if any(i.get("IndexName") == POLL_INDEX for i in desc.get("GlobalSecondaryIndexes", [])):
        return None
    if not dry_run:
        dynamodb.update_table(
            TableName=table,
            AttributeDefinitions=_POLL_ATTRIBUTES,
            GlobalSecondaryIndexUpdates=[{"Create": _POLL_INDEX_SPEC}],
        )
    return Change("dynamodb table", table, UPDATED, f"index {POLL_INDEX} added (long-running actions)")


def _ensure_ttl(dynamodb: Any, table: str, dry_run: bool, index_added: Change | None) -> Change:
    """TTL on `ttl`, turned on when off; the table's one Change (naming the index when it was added)."""
    ttl = dynamodb.describe_time_to_live(TableName=table).get("TimeToLiveDescription", {})
    status, attribute = ttl.get("TimeToLiveStatus", "DISABLED"), ttl.get("AttributeName")
    if status in ("ENABLED", "ENABLING") and attribute == TTL_ATTRIBUTE:
        return index_added or Change("dynamodb table", table, EXISTS, f"TTL on {TTL_ATTRIBUTE}, index {POLL_INDEX}")
    if status in ("ENABLED", "ENABLING"):
        raise BootstrapError(
            f"DynamoDB table {table} has TTL on {attribute!r}; fleet mode expires records through "
            f"{TTL_ATTRIBUTE!r}: choose another --dynamodb-table name"
        )
    if status == "DISABLING":
        raise BootstrapError(f"DynamoDB table {table}: TTL is being disabled; run bootstrap again in an hour")
    if not dry_run:
        dynamodb.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
        )
    return Change(
        "dynamodb table",
        table,
        UPDATED,
        f"TTL turned on for {TTL_ATTRIBUTE}" + (f", index {POLL_INDEX} added" if index_added else ""),
    )

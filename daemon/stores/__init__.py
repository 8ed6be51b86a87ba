"""The idempotency stores: the contract (base), SQLite (one host) and DynamoDB (a fleet)."""

from __future__ import annotations

from pathlib import Path

from .base import DEFAULT_TTL, Store, StoreConfigError


def open_store(url: str, ttl: float = DEFAULT_TTL, region: str | None = None) -> Store:
    """`sqlite:///abs/path.db` (the default) or, with fleet mode, `dynamodb://TABLE`."""
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if not path.startswith("/"):
            raise StoreConfigError(f"{url!r}: use an absolute path, e.g. sqlite:///var/lib/cfn-provider/state.db")
        from .sqlite import SQLiteStore

        return SQLiteStore(Path(path), ttl=ttl)
    if url.startswith("dynamodb://"):
        from .dynamodb import DynamoDBStore, table_from_url  # aiobotocore is loaded only for fleet mode

        return DynamoDBStore(table_from_url(url), ttl=ttl, region=region)  # region: `run --region`, else botocore's
    raise StoreConfigError(f"{url!r}: state must be sqlite:///PATH or dynamodb://TABLE")

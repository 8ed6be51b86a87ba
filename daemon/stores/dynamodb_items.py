"""How the DynamoDB store writes a record: attribute names and their placeholders, the item
read back as a Record, and the shards of the sparse index that lists waiting polls."""

from __future__ import annotations

import hashlib
from typing import Any

from .base import CLAIMED, Record, State

TTL_ATTRIBUTE = "ttl"
KEY_ATTRIBUTE = "pk"
POLL_INDEX, SHARD_ATTRIBUTE, NEXT_POLL_ATTRIBUTE = "polls", "poll_shard", "next_poll"  # the sparse index
POLL_SHARDS = 4
LAPSED = "(attribute_not_exists(#lease) OR #lease <= :now)"  # no live lease (condition and filter)
# A POLLING record takes its step's writes only while the step holds its lease (see base: the transition table).
HELD = "#token = :token AND (#state = :claimed OR (#state = :polling AND #lease > :now))"

# Every attribute by placeholder: STATE, OWNER, STATUS and TTL are DynamoDB reserved words.
NAMES = {
    "#pk": KEY_ATTRIBUTE,
    "#state": "state",
    "#owner": "owner",
    "#lease": "lease_until",
    "#digest": "url_digest",
    "#status": "status",
    "#body": "body",
    "#expires": "expires_at",
    "#sent": "sent_digests",
    "#ttl": TTL_ATTRIBUTE,
    "#scrub": "scrub_at",
    "#token": "token",
    "#request": "request",
    "#progress": "progress",
    "#next": NEXT_POLL_ATTRIBUTE,
    "#shard": SHARD_ATTRIBUTE,
}


def names(*placeholders: str) -> dict[str, str]:
    return {p: NAMES[p] for p in placeholders}


def number(value: float) -> dict[str, str]:
    return {"N": repr(float(value))}


def record(item: dict[str, Any] | None) -> Record | None:
    """A DynamoDB item (low-level attribute values) as a Record; None for no item."""
    if not item or KEY_ATTRIBUTE not in item:
        return None

    def s(name: str) -> str | None:
        return item[name]["S"] if name in item and "S" in item[name] else None

    def n(name: str) -> float | None:
        return float(item[name]["N"]) if name in item and "N" in item[name] else None

    body = item.get("body", {}).get("B")
    return Record(
        key=item[KEY_ATTRIBUTE]["S"],
        state=State(s("state") or CLAIMED),
        owner=s("owner"),
        lease_until=n("lease_until"),
        url_digest=s("url_digest") or "",
        status=s("status"),
        body=bytes(body) if body is not None else None,
        expires_at=n("expires_at") or 0.0,
        sent_digests=" ".join(sorted(item.get("sent_digests", {}).get("SS", []))),
        scrub_at=n("scrub_at"),
        token=s("token"),
        request=s("request"),
        progress=s("progress"),
        next_poll=n(NEXT_POLL_ATTRIBUTE),
    )


def shard(key: str) -> str:
    """The index shard a waiting request's key is listed under."""
    return str(int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % POLL_SHARDS)

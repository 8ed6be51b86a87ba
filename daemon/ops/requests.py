"""`cfn-provider requests`: what the provider is doing right now, read from the idempotency store.

Each record becomes one row: its state (CLAIMED: in flight; RESPONSE_READY: answered but the PUT not
yet confirmed; SENT: answered), the request's stack, logical id and type (from the request the
claim stored; a record written before requests were stored shows only its ids), who holds it and
for how long, its age, and the stored answer's status and Reason.

Redacted as the logs are: a ResponseURL shows no query string (its presigned credentials), and
no Data of a stored body is shown at all (NoEcho or not), nor anything a handler put in a long-running
request's progress (only how many polls ran, its deadline and size); Reasons and PhysicalResourceIds are.

A row is a dict (`describe`): `--json` prints the dicts, the table prints `COLUMNS` of them. A
new record field is shown by adding it to `describe` and, for the table, a (header, key) pair to
`COLUMNS`; fields a Record may lack (`progress`, `next_poll` of a polling request) are read with
getattr, so they appear once the store has them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ..dialects.base import Dialect
from ..logs import redact_text
from ..pipeline.request import stack_name_from_id, stored_parts
from ..stores.base import CLAIMED, POLLING, RESPONSE_READY, SENT, Listing, Record, State, StoreConfigError, claimed_at
from ..trust.tenants import DEFAULT as DEFAULT_PRINCIPAL
from ..trust.urls import redact

# --state-is accepts the store's states (any case) and these words for them
WORDS: dict[State, str] = {CLAIMED: "in-flight", RESPONSE_READY: "unconfirmed", POLLING: "polling", SENT: "answered"}
ALIASES = {word: state for state, word in WORDS.items()}
STATES_HELP = ", ".join(f"{state} ({word})" for state, word in WORDS.items())
_ORDER: dict[State, int] = {CLAIMED: 0, RESPONSE_READY: 2, SENT: 3}  # any other state (POLLING) sorts between, at 1
COLUMNS = [
    ("STATE", "state"),
    ("STACK", "stack"),
    ("LOGICAL ID", "logical_id"),
    ("TYPE", "request_type"),
    ("REQUEST ID", "request_id"),
    ("OWNER", "owner"),
    ("LEASE LEFT", "lease_left"),
    ("AGE", "age"),
    ("NEXT POLL", "next_poll_in"),
    ("STATUS", "status"),
    ("REASON", "reason"),
]
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
REASON_WIDTH = 80


def open_listing(url: str, region: str | None = None) -> Listing:
    """The store at `url` (as `run --state` names it), able to list its records."""
    if url.startswith("dynamodb://"):
        from ..stores.dynamodb import table_from_url
        from ..stores.dynamodb_admin import DynamoDBAdminStore

        return DynamoDBAdminStore(table_from_url(url), region=region)
    from ..stores import open_store
    from ..stores.sqlite import SQLiteStore

    store = open_store(existing(url))
    assert isinstance(store, SQLiteStore)  # dynamodb:// returned above; open_store gives SQLite or raises
    return store


def existing(url: str) -> str:
    """`url`, refused (StoreConfigError) when it names a SQLite file that does not exist: an operator
    command reads the daemon's store, it never makes a new, empty one."""
    from pathlib import Path

    if url.startswith("sqlite://") and not Path(url[len("sqlite://") :]).is_file():
        raise StoreConfigError(f"no state file at {url[len('sqlite://') :]}: give the daemon's --state")
    return url


def parse_duration(text: str) -> float:
    """'24h', '30m', '2d', '90s' or '90' -> seconds; ValueError otherwise."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 30m, 24h or 2d")
    return float(m[1]) * _UNITS[m[2]]


def state_names(values: Iterable[str]) -> set[State]:
    """--state-is values as store states ('in-flight' -> CLAIMED, 'sent' -> SENT); ValueError for
    a value that names no state (a typo would otherwise list nothing, as if nothing were there)."""
    names = set()
    for value in values:
        name = ALIASES.get(value.lower(), value.upper().replace("-", "_"))
        if name not in WORDS:
            raise ValueError(f"{value!r} is not a state: use one of {STATES_HELP}")
        names.add(State(name))
    return names


def key_tenant(key: str) -> str:
    """The tenant (principal) a store key names: its third item, or `default` (cfn_provider.trust.tenants)."""
    try:
        parts = json.loads(key)
    except ValueError:
        return DEFAULT_PRINCIPAL
    return str(parts[2]) if isinstance(parts, list) and len(parts) > 2 else DEFAULT_PRINCIPAL


def key_ids(key: str) -> tuple[str, str]:
    """(StackId, RequestId) from a store key (cfn_provider.pipeline.request.idempotency_key)."""
    try:
        stack_id, request_id = json.loads(key)[:2]  # a third item: the principal (not the default)
        return str(stack_id), str(request_id)
    except (ValueError, TypeError):
        return key, ""


def _json_object(text: str | bytes | None) -> dict[str, Any]:
    """`text` as a JSON object ({} when there is none, or it is not one)."""
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def stored_request(record: Record) -> tuple[dict[str, Any], Dialect | None]:
    """The request the claim stored ({} when none was, or it is not a JSON object), and the dialect
    it was stored under (None for a record written before dialects were stored)."""
    try:
        doc, dialect = stored_parts(record.request) if record.request else ({}, None)
    except (ValueError, RecursionError):  # NotARequest (an unknown dialect) is a ValueError too
        return {}, None
    return (doc if isinstance(doc, dict) else {}), dialect


def _body(record: Record) -> dict[str, Any]:
    return _json_object(record.body)


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def describe(record: Record, ttl: float, now: float) -> dict[str, Any]:
    """One record as a row: redacted, no Data, times as seconds from `now` and ISO 8601 UTC."""
    (request, dialect), body = stored_request(record), _body(record)
    name_field = dialect.stack_name_field if dialect else "StackName"  # ROS names its stack; CloudFormation's ARN does
    stack_id, request_id = key_ids(record.key)

    def text(name: str) -> str | None:
        value = request.get(name)
        return value if isinstance(value, str) else None

    since = claimed_at(record, ttl)
    url = text("ResponseURL")
    reason = body.get("Reason")
    row: dict[str, Any] = {
        "state": record.state,
        "stack": (text(name_field) if name_field else None) or stack_name_from_id(stack_id),
        "dialect": dialect.name if dialect else None,
        "stack_id": stack_id,
        "logical_id": text("LogicalResourceId"),
        "resource_type": text("ResourceType"),
        "request_type": text("RequestType"),
        "request_id": request_id,
        "tenant": key_tenant(record.key),
        "owner": record.owner,
        "lease_left": (
            round(record.lease_until - now, 1) if record.state != SENT and record.lease_until else None
        ),  # 0: a poll waiting, unheld
        "age": round(now - since, 1),
        "claimed_at": _iso(since),
        "status": record.status,
        "reason": redact_text(reason) if isinstance(reason, str) and reason else None,
        "physical_id": body.get("PhysicalResourceId") if isinstance(body.get("PhysicalResourceId"), str) else None,
        "response_url": redact(url) if url else None,
        "answered_urls": len(record.sent_digests.split()),
        "request_stored": record.request is not None,
    }
    next_poll = getattr(record, "next_poll", None)  # a polling request's fields, once the store has them
    if next_poll is not None:
        row.update(next_poll_at=_iso(next_poll), next_poll_in=round(next_poll - now, 1))
    progress = getattr(record, "progress", None)
    if progress is not None:
        row.update(_progress(progress))
    return row


def _progress(text: str) -> dict[str, Any]:
    """What a polling request's stored progress may show: how far it got, never what the handler
    put in it (a bookmark, or Data it will hide: crhelper keeps helper.Data there)."""
    from ..pipeline.poll_steps import PollState

    shown: dict[str, Any] = {"progress_bytes": len(text.encode())}
    try:
        state = PollState.loads(text)
    except (ValueError, TypeError, KeyError, AttributeError):
        return shown
    shown.update(polls=state.polls, deadline_at=_iso(state.deadline), progress_no_echo=state.no_echo)
    if state.physical_id:
        shown["polling_physical_id"] = state.physical_id
    return shown


def select(
    rows: list[dict[str, Any]],
    *,
    stack: str | None = None,
    logical_id: str | None = None,
    states: set[State] | None = None,
) -> list[dict[str, Any]]:
    """The rows matching every filter given (stack: its name or id), in flight first, newest first."""
    kept = [
        r
        for r in rows
        if (stack is None or stack in (r["stack"], r["stack_id"]))
        and (logical_id is None or r["logical_id"] == logical_id)
        and (not states or r["state"] in states)
    ]
    return sorted(kept, key=lambda r: (_ORDER.get(r["state"], 1), r["age"]))


async def list_requests(store: Listing, window: float | None, now: float | None = None) -> list[dict[str, Any]]:
    """Every record claimed within the last `window` seconds (all when None), described."""
    now = time.time() if now is None else now
    records = await store.list_records(None if window is None else now - window)
    return [describe(r, store.ttl, now) for r in records]


def duration(seconds: float | None) -> str:
    """12s, 3m04s, 2h05m, 3d04h; lapsed leases as 'lapsed'."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "lapsed"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as aligned text lines under a header; columns nobody has a value for are left out."""
    columns = [
        (h, k) for h, k in COLUMNS if k in ("state", "stack", "request_id") or any(r.get(k) is not None for r in rows)
    ]

    def cell(row: dict[str, Any], key: str) -> str:
        value = row.get(key)
        if key in ("lease_left", "age", "next_poll_in"):
            return duration(value)
        if value is None:
            return "-"
        text = " ".join(str(value).split())
        return text if key != "reason" or len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 3] + "..."

    lines = [[h for h, _ in columns]] + [[cell(r, k) for _, k in columns] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]

"""Idempotency store, keyed on StackId + RequestId.

States (docs/architecture.md, "The store interface"; what they guarantee: docs/guarantees.md):
    absent ──claim──> CLAIMED(owner, token, lease) ──save_response──> RESPONSE_READY(body, lease) ──mark_sent──> SENT
                        │                                   ^
                  save_progress                       save_response
                        v                                   │
                      POLLING(request, progress, next_poll) ┘  (take_poll leases it for one poll step;
                        ^──────────save_progress───────────┘    save_progress lets go of the lease again)
One conditional write is the lock: `claim` succeeds only when the key is absent, expired,
CLAIMED under a lapsed lease, or holds a FAILED answer for a different ResponseURL that
nobody holds a live lease on (CloudFormation retrying the operation: a FAILED is re-run, a
SUCCESS is re-sent); never for a ResponseURL already answered. Every ResponseURL answered is
remembered (`mark_sent` records it in every state, `release` never drops it), so a late
duplicate for an answered URL never re-runs. Expiry is derived from `expires_at`, never
stored as a state. The body is stored before the PUT, so a redelivery re-sends it and never
re-runs the handler; while its owner's lease lives the owner is still delivering it, so a
duplicate waits instead of sending it twice. A claim may store the request's JSON (`request`,
kept by a later claim that gives none) for the operator commands (`cfn-provider requests`,
`cfn-provider answer`: cfn_provider.ops).

Every write is safe to retry. A claim carries a `token` unique to that claim attempt, and
every later write of the attempt names it: when a conditional write fails because the
attempt's own earlier try was applied (its answer lost to a timeout or a reset, then retried
by botocore or by the worker), the store recognises its token in the record that stood in
the way and reports success (acquired / saved / extended / sent / released), never another
worker's claim. `extend` and `mark_sent` are idempotent as they stand.

Long-running actions (cfn_provider.progress): `save_progress` moves the attempt's
CLAIMED (or its leased POLLING) record to POLLING with the request, the handler's progress and when
to look next, and lets go of the lease, so no message, slot or lease is held while it waits.
`due_polls` lists the keys whose next poll is due and whose lease is free; `take_poll` leases one to
a new token (one conditional write: one fleet member runs each poll step), after which the step ends
in `save_progress` again or in `save_response`. A polled answer stays due (its `next_poll`, the
lease's end) until `mark_sent`: there is no queue message to bring it back, so when its owner dies
before delivering it, the next `take_poll` delivers the stored body. A claim never takes a POLLING
record over: the request is answered by its polls, so a redelivered message is a duplicate. A
POLLING record takes a step's writes (`save_progress`, `save_response`, `park`) only while that step
holds its lease: once it let go (or the lease lapsed) the step's token writes nothing more, so a
stale write loses to whoever takes the poll next. `park` takes an answer that cannot be delivered
(or progress that cannot be read) out of the due polls for good, with no lease: nothing waits for
it. `take_poll(early=True)` takes a poll before it is due (the operator ending it). Only a stored
answer (RESPONSE_READY) becomes SENT. The whole table, every state against every operation, is
tests/stores/transition_contract.py, run on every store.

Stacks have owners (cfn_provider.trust.tenants: principals): `own_stack(stack_id, principal)` is one
conditional write that makes `principal` the owner of a StackId no principal owns yet, and returns
the owner (the one just written, or the one that was there). An owner record never expires and
never changes; it lives beside the records (SQLite: its own table; DynamoDB: an item whose key,
`owner_key`, cannot be a request's) and is never listed as one.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from ..errors import StartupError


class State(StrEnum):
    """A record's state (the table above). A StrEnum: written (SQLite's `state` column, DynamoDB's
    `state` attribute, `--json`) and printed as its name, the plain string earlier builds stored; a
    stored string reads back as the member (Record converts it)."""

    CLAIMED = "CLAIMED"
    RESPONSE_READY = "RESPONSE_READY"
    SENT = "SENT"
    POLLING = "POLLING"


CLAIMED: Final = State.CLAIMED
RESPONSE_READY: Final = State.RESPONSE_READY
SENT: Final = State.SENT
POLLING: Final = State.POLLING
DEFAULT_TTL = 15 * 24 * 3600  # longer than SQS's maximum retention (14 days)


@dataclass(frozen=True)
class Record:
    key: str
    state: State  # a stored string is converted (ValueError for one that names no state)
    owner: str | None
    lease_until: float | None
    url_digest: str
    status: str | None  # SUCCESS | FAILED once a response is stored
    body: bytes | None
    expires_at: float
    sent_digests: str = ""  # space-separated digests of every ResponseURL already answered
    scrub_at: float | None = None  # when NoEcho Data leaves `body` (cfn_provider.trust.retention); 0 once it has
    token: str | None = None  # the claim attempt that wrote the current claim
    request: str | None = None  # the request's JSON (with its ResponseURL): written at claim, kept while polled
    progress: str | None = None  # POLLING: the poll state's JSON (cfn_provider.intake.poll_scheduler)
    next_poll: float | None = None  # POLLING: when the next poll step is due (epoch seconds)

    def __post_init__(self) -> None:
        if type(self.state) is not State:  # as read: the stored string
            object.__setattr__(self, "state", State(self.state))

    def answered(self, url_digest: str) -> bool:
        return url_digest in self.sent_digests.split()

    def leased(self, now: float) -> bool:
        """Someone holds a live lease: a claim in progress, or a stored answer being delivered."""
        return self.state != SENT and self.lease_until is not None and self.lease_until > now


@dataclass(frozen=True)
class Claim:
    acquired: bool
    record: Record | None  # what stood in the way (not acquired) or what was taken over


class Store(Protocol):
    """`token` names one claim attempt (new_token()); `owner` (the daemon) is for people to read."""

    async def claim(
        self, key: str, owner: str, url_digest: str, lease_seconds: float, *, token: str, request: str | None = None
    ) -> Claim: ...
    async def extend(self, key: str, token: str, lease_seconds: float) -> bool: ...
    async def save_response(self, key: str, token: str, status: str, body: bytes) -> bool: ...
    async def mark_sent(self, key: str, url_digest: str, token: str | None = None) -> None: ...
    async def release(self, key: str, token: str) -> None: ...
    async def save_progress(
        self, key: str, token: str, progress: str, next_poll: float, request: str | None = None
    ) -> bool: ...
    async def due_polls(self, now: float, limit: int) -> list[str]: ...
    async def take_poll(
        self, key: str, owner: str, lease_seconds: float, *, token: str, early: bool = False
    ) -> Record | None: ...
    async def park(self, key: str, token: str) -> bool: ...
    async def get(self, key: str) -> Record | None: ...
    async def own_stack(self, stack_id: str, principal: str) -> str: ...
    async def scrub(self, key: str) -> None: ...
    async def scrub_due(self) -> int: ...
    async def close(self) -> None: ...


class Listing(Store, Protocol):
    """A store an operator can list (`cfn-provider requests`): the SQLite store, and DynamoDB through
    cfn_provider.stores.dynamodb_admin (a Scan, which the daemon's own role is not granted)."""

    ttl: float

    async def list_records(self, since: float | None = None) -> list[Record]:
        """Every unexpired record, or those claimed at or after `since` (epoch seconds)."""
        ...


def claimed_at(record: Record, ttl: float) -> float:
    """When the record's latest claim was written (a claim sets expires_at to its time + ttl)."""
    return record.expires_at - ttl


def url_digest(url: str) -> str:
    """How a record names a ResponseURL (`url_digest`, `sent_digests`): its SHA-256, never the URL."""
    return hashlib.sha256(url.encode()).hexdigest()


def owner_key(stack_id: str) -> str:
    """The key of a stack's owner record where it shares a table with the records (DynamoDB): a
    request's key is a JSON list, so this one (not one) can never be a request's."""
    return "stack-owner " + stack_id


def new_token() -> str:
    """A token for one claim attempt: every retry of the attempt's writes carries the same one."""
    return uuid.uuid4().hex


_THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "TransactionConflictException",
        "LimitExceededException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


_SQLITE_TRANSIENT = frozenset({5, 6, 10, 13})  # SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL (primary codes)


def transient(exc: BaseException) -> bool:
    """A store call that failed this way may have been applied or not, and is worth retrying
    (with the same token): a connection error or timeout, throttling, a 5xx; a locked SQLite
    file, a full disk or an I/O error (space is freed, a disk comes back: a full disk is an
    outage to wait out, not a reason to give up on a completed handler's answer)."""
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in _SQLITE_TRANSIENT
        return any(word in str(exc) for word in ("locked", "busy", "disk is full", "disk I/O error"))
    try:
        import botocore.exceptions as bce
    except ImportError:  # pragma: no cover - botocore comes with aiobotocore
        return False
    if isinstance(exc, (bce.ConnectionError, bce.HTTPClientError)):
        return True
    if isinstance(exc, bce.ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _THROTTLED or status >= 500
    return False


def _saved_by(record: Record | None, token: str, body: bytes) -> bool:
    """After a conditional save failed: had this attempt's earlier try stored this very body?"""
    return record is not None and record.token == token and record.state != CLAIMED and record.body == bytes(body)


def _progress_saved_by(record: Record | None, token: str, progress: str, next_poll: float) -> bool:
    """After a conditional save_progress failed: had this attempt's earlier try stored this very progress?"""
    return (
        record is not None
        and record.token == token
        and record.state == POLLING
        and record.progress == progress
        and record.next_poll is not None
        and abs(record.next_poll - next_poll) < 1e-6
    )


def _parked_by(record: Record | None, token: str) -> bool:
    """After a conditional park failed: had this attempt's earlier try parked the record?"""
    return (
        record is not None
        and record.token == token
        and record.state in (POLLING, RESPONSE_READY)
        and record.next_poll is None
        and not record.lease_until
    )


class StoreConfigError(StartupError, ValueError):
    """The --state URL cannot be used: not a store this daemon knows, or not as written (the message says why)."""

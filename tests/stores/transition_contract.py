"""The store's state machine as ONE table (state x operation -> what it returns, the state it leaves),
run as a contract on every store: imported by tests/stores/test_sqlite.py and test_dynamodb.py (SQLite;
DynamoDB on moto and, with CFN_TEST_DYNAMODB_URL, on dynalite) like contract.py.

Each row is a state a request's record can be in; each column an operation; each cell

    [+|-|=]STATE[*]     + the operation returned true (acquired, saved, extended, taken, parked),
                        - it returned false / None, = it returns nothing (mark_sent, release);
                        STATE is the state it leaves: 0 (absent), C (CLAIMED), R (RESPONSE_READY),
                        P (POLLING), S (SENT); * the record is listed as a due poll later on.

Every cell runs on a fresh key brought to the row's state by the calls a daemon makes; the
record's token is then "h" (the holder's) and its ResponseURL digest A. The operations:

    claim A / claim B    another attempt (token "o") claims, for URL A (a copy) or URL B (CloudFormation retrying)
    extend               extend by the holder (its heartbeat)
    save_response        the holder stores BODY (SUCCESS): the same body as a stored SUCCESS, so a retry
    save_progress        the holder stores new progress
    mark_sent A          the holder marks URL A sent; mark_sent B: a replay (no token) marks URL B sent
    release              the holder gives its claim up
    take_poll            another daemon takes a due poll (token "o")
    park                 the holder parks an answer it cannot deliver (or progress it cannot read): no
                         lease, never due again

A poll step holds its POLLING record only while its lease lives: once `save_progress` let go of it
(or it lapsed) the step's token writes nothing more there, so a stale write (a cancelled step's
progress, a late answer) loses to whoever takes the poll next.
"""

from __future__ import annotations

import pytest

from cfn_provider.stores.base import CLAIMED, POLLING, RESPONSE_READY, SENT
from tests.stores.contract import LEASE, URL_A, URL_B

BODY = b'{"Status":"SUCCESS"}'
FAILED_BODY = b'{"Status":"FAILED"}'
OPERATIONS = (
    "claim A",
    "claim B",
    "extend",
    "save_response",
    "save_progress",
    "mark_sent A",
    "mark_sent B",
    "release",
    "take_poll",
    "park",
)
TABLE = """
state               | claim A | claim B | extend | save_response | save_progress | mark_sent A | mark_sent B | release | take_poll | park
absent              | +C      | +C      | -0     | -0            | -0            | =0          | =0          | =0      | -0        | -0
claimed             | -C      | -C      | +C     | +R            | +P*           | =C          | =C          | =0      | -C        | -C
claimed-lapsed      | +C      | +C      | +C     | +R            | +P*           | =C          | =C          | =0      | -C        | -C
ready               | -R      | -R      | +R     | +R            | -R            | =S          | =R          | =R      | -R        | +R
ready-lapsed        | -R      | -R      | +R     | +R            | -R            | =S          | =S          | =R      | -R        | +R
ready-failed        | -R      | -R      | +R     | -R            | -R            | =S          | =R          | =R      | -R        | +R
ready-failed-lapsed | -R      | +C      | +R     | -R            | -R            | =S          | =S          | =R      | -R        | +R
polling             | -P*     | -P*     | -P*    | -P*           | -P*           | =P*         | =P*         | =P*     | -P*       | -P*
polling-due         | -P*     | -P*     | -P*    | -P*           | -P*           | =P*         | =P*         | =P*     | +P*       | -P*
stepping            | -P*     | -P*     | +P*    | +R*           | +P*           | =P*         | =P*         | =P*     | -P*       | +P
stepping-lapsed     | -P*     | -P*     | -P*    | -P*           | -P*           | =P*         | =P*         | =P*     | +P*       | -P*
polled-ready        | -R*     | -R*     | +R*    | +R*           | -R*           | =S          | =R*         | =R*     | -R*       | +R
polled-ready-lapsed | -R*     | -R*     | +R*    | +R*           | -R*           | =S          | =S          | =R*     | +R*       | +R
parked-polling      | -P      | -P      | -P     | -P            | -P            | =P          | =P          | =P      | -P        | +P
parked-ready        | -R      | -R      | +R     | +R            | -R            | =S          | =S          | =R      | -R        | +R
sent                | -S      | -S      | -S     | +S            | -S            | =S          | =S          | =S      | -S        | -S
sent-failed         | -S      | +C      | -S     | -S            | -S            | =S          | =S          | =S      | -S        | -S
"""
STATES = {"0": None, "C": CLAIMED, "R": RESPONSE_READY, "P": POLLING, "S": SENT}


def _rows() -> dict[str, dict[str, str]]:
    header, *lines = [line for line in TABLE.strip().splitlines()]
    columns = [c.strip() for c in header.split("|")]
    assert tuple(columns[1:]) == OPERATIONS
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.split("|")]
        rows[cells[0]] = dict(zip(OPERATIONS, cells[1:], strict=True))
    return rows


ROWS = _rows()


async def bring(store, clock, key: str, state: str) -> None:
    """`key` in `state`, by the calls a daemon makes; the holder's token is "h", its URL A."""
    lapsed = state.endswith("-lapsed")
    base = state.removesuffix("-lapsed")
    if base == "absent":
        return
    if base in ("claimed", "ready", "ready-failed", "sent", "sent-failed"):
        assert (await store.claim(key, "holder", URL_A, LEASE, token="h")).acquired
        if base != "claimed":
            failed = base.endswith("failed")
            assert await store.save_response(
                key, "h", "FAILED" if failed else "SUCCESS", FAILED_BODY if failed else BODY
            )
        if base.startswith("sent"):
            await store.mark_sent(key, URL_A, "h")
    elif base in ("polling", "polling-due"):
        assert (await store.claim(key, "holder", URL_A, LEASE, token="h")).acquired
        assert await store.save_progress(key, "h", '{"n":0}', clock.now + 10, '{"RequestType":"Create"}')
        if base == "polling-due":
            clock.advance(10)
    else:  # a poll step holds it: stepping, polled-ready, parked-*
        assert (await store.claim(key, "worker", URL_A, LEASE, token="c")).acquired
        assert await store.save_progress(key, "c", '{"n":0}', clock.now + 1, '{"RequestType":"Create"}')
        clock.advance(1)
        assert await store.take_poll(key, "holder", LEASE, token="h") is not None
        if base in ("polled-ready", "parked-ready"):
            assert await store.save_response(key, "h", "SUCCESS", BODY)
        if base.startswith("parked"):
            assert await store.park(key, "h")
    if lapsed:
        clock.advance(LEASE + 1)


async def operate(store, clock, key: str, operation: str) -> object:
    if operation in ("claim A", "claim B"):
        digest = URL_A if operation == "claim A" else URL_B
        return (await store.claim(key, "other", digest, LEASE, token="o")).acquired
    if operation == "extend":
        return await store.extend(key, "h", LEASE)
    if operation == "save_response":
        return await store.save_response(key, "h", "SUCCESS", BODY)
    if operation == "save_progress":
        return await store.save_progress(key, "h", '{"n":9}', clock.now + 5)
    if operation == "mark_sent A":
        return await store.mark_sent(key, URL_A, "h")
    if operation == "mark_sent B":
        return await store.mark_sent(key, URL_B)
    if operation == "release":
        return await store.release(key, "h")
    if operation == "take_poll":
        return await store.take_poll(key, "other", LEASE, token="o") is not None
    if operation == "park":
        return await store.park(key, "h")
    raise AssertionError(operation)


async def observed(store, clock, key: str, operation: str, returned: object) -> str:
    """What happened, in the table's notation."""
    sign = "=" if operation in ("mark_sent A", "mark_sent B", "release") else ("+" if returned else "-")
    if sign == "=":
        assert returned is None, f"{operation} returns nothing"
    record = await store.get(key)
    state = next(code for code, name in STATES.items() if name == (record.state if record else None))
    due = key in await store.due_polls(clock.now + 3 * LEASE, 100)
    return f"{sign}{state}{'*' if due else ''}"


@pytest.mark.parametrize("state", list(ROWS))
async def test_every_operation_in_every_state_does_what_the_transition_table_says(store, clock, state):
    wrong = []
    for n, operation in enumerate(OPERATIONS):
        key = f"transition|{state}|{n}"
        await bring(store, clock, key, state)
        returned = await operate(store, clock, key, operation)
        seen = await observed(store, clock, key, operation, returned)
        if seen != ROWS[state][operation]:
            wrong.append(f"{operation}: expected {ROWS[state][operation]}, got {seen}")
    assert not wrong, f"in state {state}: " + "; ".join(wrong)

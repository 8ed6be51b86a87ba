"""cfn_provider.stores.dynamodb: the fleet-mode store on a real DynamoDB API (moto's server, over HTTP).

The behavioural cases are the shared Store contract (tests/stores/contract.py), the same
ones SQLiteStore passes; each test gets a fresh table made by `bootstrap`'s own table step.
The cases below are about the table's items and `open_store`.

moto's DynamoDB is not atomic under concurrency (tests/support/moto_dynamodb.py serialises it).
With CFN_TEST_DYNAMODB_URL set (e.g. http://127.0.0.1:4567 for a local `dynalite`, an
independent in-memory implementation from npm), the tables live there instead, unserialised.
"""

from __future__ import annotations

import inspect
import math
import os
import time
import uuid

import pytest

from cfn_provider.local.emulator import Emulator
from cfn_provider.ops.bootstrap import ensure_table
from cfn_provider.stores import open_store
from cfn_provider.stores.base import State, StoreConfigError
from cfn_provider.stores.dynamodb import DynamoDBStore, TableNotFound
from cfn_provider.stores.dynamodb_admin import DynamoDBAdminStore
from tests.stores.contract import *  # noqa: F401,F403 - the Store contract cases
from tests.stores.contract import KEY, LEASE, TTL, URL_A, URL_B, Clock, answered
from tests.stores.polling_contract import *  # noqa: F401,F403 - the POLLING cases
from tests.stores.transition_contract import *  # noqa: F401,F403 - the transition table
from tests.support.dynalite import make_table
from tests.support.moto_dynamodb import make_dynamodb_writes_atomic


@pytest.fixture
def clock() -> Clock:
    return Clock(float(int(time.time())))  # near the real time, as a real table's TTL sweeper expects


OTHER_DYNAMODB = os.environ.get("CFN_TEST_DYNAMODB_URL")


@pytest.fixture
def dynamodb(emulator: Emulator, monkeypatch):
    """A DynamoDB client (boto3) on the endpoint the stores under test use too."""
    if not OTHER_DYNAMODB:
        make_dynamodb_writes_atomic()
        return emulator.client("dynamodb")
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", OTHER_DYNAMODB)
    return boto3.client(
        "dynamodb",
        endpoint_url=OTHER_DYNAMODB,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def table(dynamodb):
    client = dynamodb
    name = f"cfn-state-{uuid.uuid4().hex[:12]}"
    if OTHER_DYNAMODB:  # bootstrap's table (key and `polls` index); dynalite has no UpdateTimeToLive
        make_table(client, name)
    else:
        assert ensure_table(client, name).action == "created"
    yield name
    client.delete_table(TableName=name)


@pytest.fixture
async def store(table, clock):
    s = DynamoDBStore(table, ttl=TTL, clock=clock)
    yield s
    await s.close()


@pytest.fixture
def make_store(table, clock):
    """More DynamoDBStores (each its own client) on the same table."""
    return lambda: DynamoDBStore(table, ttl=TTL, clock=clock)


@pytest.fixture
async def listing(table, clock):
    """The operator's store on the same table: it lists with a Scan (the daemon's store cannot)."""
    s = DynamoDBAdminStore(table, ttl=TTL, clock=clock)
    yield s
    await s.close()


def test_default_ttl_outlives_sqs_retention():
    assert inspect.signature(DynamoDBStore).parameters["ttl"].default > 14 * 24 * 3600


# --- the items --------------------------------------------------------------------------


async def test_item_is_keyed_on_pk_with_a_ttl_and_a_binary_body(store, table, clock, dynamodb):
    await answered(store, body=b'{"Status":"SUCCESS"}')
    await store.mark_sent(KEY, URL_A, token="w1")
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": KEY}}, ConsistentRead=True)["Item"]
    assert item["ttl"] == {"N": str(math.ceil(clock.now + TTL))}  # epoch seconds, for DynamoDB's TTL
    assert float(item["expires_at"]["N"]) == pytest.approx(clock.now + TTL)
    assert item["body"] == {"B": b'{"Status":"SUCCESS"}'}
    assert item["sent_digests"] == {"SS": [URL_A]}
    assert item["state"] == {"S": "SENT"} and "lease_until" not in item


async def test_an_item_with_a_plain_state_string_reads_back_as_the_state(store, table, clock, dynamodb):
    """`state` is the plain name earlier builds wrote (State is a StrEnum): their items, in every
    state, read back with State members and keep working; the store writes plain names too."""
    for state in State:
        dynamodb.put_item(
            TableName=table,
            Item={
                "pk": {"S": f"{KEY}-{state.value}"},
                "state": {"S": state.value},
                "owner": {"S": "old-daemon"},
                "lease_until": {"N": "0"},
                "url_digest": {"S": URL_A},
                "expires_at": {"N": repr(clock.now + TTL)},
                "ttl": {"N": str(math.ceil(clock.now + TTL))},
                **(
                    {"status": {"S": "SUCCESS"}, "body": {"B": b"{}"}}
                    if state in (State.RESPONSE_READY, State.SENT)
                    else {}
                ),
            },
        )
        record = await store.get(f"{KEY}-{state.value}")
        assert record is not None and record.state is state
    assert (await store.claim(f"{KEY}-CLAIMED", "w1", URL_A, LEASE, token="w1")).acquired  # its lease lapsed
    await store.mark_sent(f"{KEY}-RESPONSE_READY", URL_A)
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": f"{KEY}-RESPONSE_READY"}}, ConsistentRead=True)["Item"]
    assert item["state"] == {"S": "SENT"}
    assert (await store.get(f"{KEY}-RESPONSE_READY")).state is State.SENT


async def test_answered_urls_accumulate_in_a_string_set(store, table, dynamodb):
    await answered(store, status="FAILED")
    await store.mark_sent(KEY, URL_A, token="w1")
    await store.mark_sent(KEY, URL_A, token="w1")  # twice: still once in the set
    assert (await store.claim(KEY, "w2", URL_B, LEASE, token="w2")).acquired
    assert await store.save_response(KEY, "w2", "FAILED", b"again")
    await store.mark_sent(KEY, URL_B, token="w2")
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": KEY}}, ConsistentRead=True)["Item"]
    assert sorted(item["sent_digests"]["SS"]) == [URL_A, URL_B]
    record = await store.get(KEY)
    assert record.answered(URL_A) and record.answered(URL_B) and not record.answered("digest-of-url-c")


async def test_a_missing_table_is_reported_with_the_bootstrap_hint(dynamodb, clock):
    s = DynamoDBStore("cfn-state-does-not-exist", ttl=TTL, clock=clock)
    try:
        with pytest.raises(TableNotFound, match="cfn-provider bootstrap --dynamodb-table cfn-state-does-not-exist"):
            await s.claim(KEY, "w1", URL_A, LEASE, token="w1")
    finally:
        await s.close()


async def test_close_closes_the_client_and_is_idempotent(store):
    assert (await store.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.get(KEY)


def test_no_region_anywhere_is_a_config_error(monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(StoreConfigError, match="region"):
        DynamoDBStore("cfn-state")


def test_open_store_gives_the_dynamodb_store_its_region(monkeypatch, tmp_path):
    """The service passes `run --region` here, so it is the store's region too, not only the queue's."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    assert open_store("dynamodb://cfn-state", region="eu-west-3").region == "eu-west-3"
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    assert open_store("dynamodb://cfn-state", region="eu-west-3").region == "eu-west-3"  # the flag wins
    assert open_store("dynamodb://cfn-state").region == "us-east-2"


# --- open_store -------------------------------------------------------------------------


async def test_open_store_dynamodb_table(table):
    s = open_store(f"dynamodb://{table}")
    try:
        assert isinstance(s, DynamoDBStore) and s.table == table
        assert (await s.claim(KEY, "w1", URL_A, LEASE, token="w1")).acquired
        assert (await s.get(KEY)).owner == "w1"
    finally:
        await s.close()


@pytest.mark.parametrize(
    "url", ["dynamodb://", "dynamodb://ab", "dynamodb://a/b", "dynamodb://tab le", "dynamodb://" + "x" * 256]
)
def test_open_store_refuses_bad_table_names(url):
    with pytest.raises(StoreConfigError, match="dynamodb://TABLE"):
        open_store(url)


def test_the_daemons_store_cannot_scan():
    """Listing is the operator's (dynamodb_admin): the daemon's role has no dynamodb:Scan."""
    assert not hasattr(DynamoDBStore, "list_records")
    assert '"scan"' not in inspect.getsource(DynamoDBStore)


async def test_listing_pages_through_a_scan(store, listing, clock):
    """More items than one Scan page holds (1 MB): every one is listed once."""
    big = "x" * 200_000
    for i in range(8):
        assert (await store.claim(f"{KEY}-{i}", "w1", URL_A, LEASE, token=f"t{i}", request=big)).acquired
    records = await listing.list_records()
    assert sorted(r.key for r in records) == sorted(f"{KEY}-{i}" for i in range(8))

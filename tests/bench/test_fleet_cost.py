"""bench.fleet_cost (`make bench`'s `cost` scenario): its counting, on the real daemon against moto and
dynalite for a few requests, the DynamoDB counting proxy on its own, and the dollars it prints."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from bench import cost_report, fleet_cost, prices
from bench.dynamodb_proxy import CapacityProxy
from bench.scenarios import Options
from tests.support.dynalite import Dynalite, DynaliteMissing


@pytest.fixture
def dynalite(tmp_path: Path) -> Iterator[Dynalite]:
    try:
        db = Dynalite(tmp_path / "dynalite.log")
    except DynaliteMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    with db:
        yield db


# ---------------------------------------------------------------------------- the dollars
def test_the_minimum_is_priced_as_its_counts_times_the_list_prices() -> None:
    mp = fleet_cost.priced(prices.MINIMUM)["dollars"]
    assert mp["sqs_receive"] == pytest.approx(0.1 * 0.40)  # one receive per 10 messages, $0.40 per million
    assert mp["sqs_delete"] == pytest.approx(0.1 * 0.40)  # one DeleteMessageBatch per receive
    assert mp["dynamodb_wru"] == pytest.approx(3 * 0.625)  # claim, stored response, SENT mark: 1 WRU each
    assert mp["s3_put"] == pytest.approx(5.0)  # $0.005 per 1,000
    whole = fleet_cost.priced(prices.MINIMUM)
    assert whole["billed"] == pytest.approx(0.04 + 0.04 + 1.875)  # the S3 PUT is CloudFormation's bucket's
    assert whole["with_publish"] == pytest.approx(whole["billed"] + 0.50)


def test_idle_and_lambda_figures_follow_from_the_rates_and_assumptions() -> None:
    assert prices.long_poll_floor_per_month() == 129_600  # 30 days of 20 s long polls
    idle = prices.idle_per_month({"sqs_requests": 1 / 20, "dynamodb_rru": 0.0, "dynamodb_wru": 0.0})
    assert idle["total"] == pytest.approx(129_600 * 0.40 / 1e6)
    fn = prices.lambda_per_million(memory_gb=0.125, seconds=1.0, log_bytes=500)
    assert fn["requests"] == pytest.approx(0.20)
    assert fn["duration"] == pytest.approx(1e6 * 0.125 * 0.0000166667)
    assert fn["logs"] == pytest.approx(0.25)
    assert prices.break_even_requests_per_month(1.0, 3.0, 2.0) == math.inf
    assert prices.break_even_requests_per_month(1.0, 2.0, 3.0) == pytest.approx(1e6)


# ---------------------------------------------------------------------------- the DynamoDB counting proxy
@pytest.mark.emulator  # dynalite: not in `make check`, which installs no DynamoDB
def test_the_proxy_counts_consumed_capacity_the_client_did_not_ask_for(dynalite: Dynalite) -> None:
    dynalite.create_table("cost-proxy")
    with CapacityProxy(dynalite.endpoint) as proxy:
        proxied = boto3.client(
            "dynamodb",
            endpoint_url=proxy.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing-secret",
        )
        big = {"pk": {"S": "k"}, "body": {"S": "x" * 1500}}  # over 1 KB: 2 WRU
        put = proxied.put_item(TableName="cost-proxy", Item=big)
        got = proxied.get_item(TableName="cost-proxy", Key={"pk": {"S": "k"}}, ConsistentRead=True)
        asked = proxied.get_item(TableName="cost-proxy", Key={"pk": {"S": "k"}}, ReturnConsumedCapacity="TOTAL")
        with pytest.raises(proxied.exceptions.ConditionalCheckFailedException):
            proxied.put_item(TableName="cost-proxy", Item=big, ConditionExpression="attribute_not_exists(pk)")
        calls = proxy.calls_between()
    assert "ConsumedCapacity" not in put and "ConsumedCapacity" not in got  # the caller sees what it would
    assert got["Item"] == big
    assert asked["ConsumedCapacity"]["CapacityUnits"] == 0.5  # asked for: passed through
    assert [(c.operation, c.billed_units) for c in calls] == [
        ("PutItem", 2.0),
        ("GetItem", 1.0),
        ("GetItem", 0.5),
        ("PutItem", 1.0),  # a failed condition is billed too
    ]


# ---------------------------------------------------------------------------- the scenario, tiny
@pytest.mark.slow
@pytest.mark.emulator
def test_a_tiny_cost_run_counts_the_daemons_calls_and_prices_them(dynalite: Dynalite, tmp_path: Path) -> None:
    opts = Options(logdir=tmp_path, rounds=1, say=lambda _line: None)
    with CapacityProxy(dynalite.endpoint) as ddb:
        run = fleet_cost.one_round(opts, dynalite, ddb, "cost-1", n=3, idle_s=6.0)  # past one due-poll look (every 5 s)
    assert run["verified"], run["errors"]
    counts = run["per_request"]
    assert counts["s3_put"] == 1.0  # one response each
    assert counts["dynamodb_writes"] >= 3.0  # claim, stored response, SENT mark
    assert counts["dynamodb_wru"] >= counts["dynamodb_writes"]  # at least 1 WRU a write
    assert 0 < counts["sqs_receive"] <= 1.0 and 0 < counts["sqs_delete"] <= 1.0
    assert counts["sns_cert_fetch"] == pytest.approx(1 / 3)  # signatures verified: one fetch, then cached
    steps = counts["wru_claim"] + counts["wru_save"] + counts["wru_mark"]
    assert steps == pytest.approx(counts["dynamodb_wru"])  # the three writes of each request: all its units
    assert run["idle_rates"]["dynamodb_calls_per_minute"] > 0  # the due-poll look, counted while idle
    for key, price in prices.BILLED_BY.items():  # each priced row is its count times its list price
        if price is not None:
            want = counts.get(key, 0.0) * prices.PRICES[price].dollars / prices.PRICES[price].per * 1e6
            assert run["priced"]["dollars"][key] == pytest.approx(want)
    summary = fleet_cost.summarise([run]) | {"requests": 3}
    rows = cost_report.cost_rows(summary)
    assert all(len(row) == 4 for row in rows)
    wru = next(row for row in rows if row[1].strip() == "DynamoDB write request units")
    assert wru[3] == "3.0"  # the minimum column

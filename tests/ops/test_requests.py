"""`cfn-provider requests`: the store's records as an operator reads them, on SQLite and on
DynamoDB (moto over HTTP): in flight with owner and lease, answered but not confirmed, answered
with status and Reason; the filters; redaction (no ResponseURL query string, no Data); and a
request a real daemon answered, listed with its logical id."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from cfn_provider.cli import main
from cfn_provider.dialects.base import CLOUDFORMATION
from cfn_provider.dialects.ros import ROS
from cfn_provider.local.emulator import Stack
from cfn_provider.ops.requests import duration, parse_duration, state_names
from cfn_provider.pipeline.request import idempotency_key, parse, stored_form
from cfn_provider.stores.base import State
from tests.support.aws import wait_until_queue_empty
from tests.support.cli import assert_not_started

STACK_A = "arn:aws:cloudformation:eu-west-1:123456789012:stack/shop/11111111-2222-3333-4444-555555555555"
STACK_B = "arn:aws:cloudformation:eu-west-1:123456789012:stack/blog/66666666-2222-3333-4444-555555555555"
SECRET_QUERY = "X-Amz-Signature=deadbeefsecret"


def wire(stack_id: str, request_id: str, logical_id: str, request_type: str = "Create") -> str:
    return json.dumps(
        {
            "RequestType": request_type,
            "ResourceType": "Custom::Thing",
            "StackId": stack_id,
            "RequestId": request_id,
            "LogicalResourceId": logical_id,
            "ResponseURL": f"https://bucket.s3.amazonaws.com/k?{SECRET_QUERY}",
            "ResourceProperties": {"Size": "1"},
        }
    )


def body(status: str, reason: str = "", **extra: Any) -> bytes:
    return json.dumps({"Status": status, "Reason": reason, "PhysicalResourceId": "pid-1", **extra}).encode()


def populate(in_store) -> None:
    """Four requests: Web in flight (daemon-a), Db answered with NoEcho Data but not confirmed,
    Queue answered FAILED (a Reason naming a presigned URL), Blog's Page answered long ago."""

    async def now(store) -> None:
        await store.claim(
            idempotency_key(STACK_A, "r-web"), "daemon-a", "d1", 600, token="t1", request=wire(STACK_A, "r-web", "Web")
        )
        await store.claim(
            idempotency_key(STACK_A, "r-db"), "daemon-b", "d2", 600, token="t2", request=wire(STACK_A, "r-db", "Db")
        )
        assert await store.save_response(
            idempotency_key(STACK_A, "r-db"),
            "t2",
            "SUCCESS",
            body("SUCCESS", NoEcho=True, Data={"Password": "hunter2"}),
        )
        await store.claim(
            idempotency_key(STACK_A, "r-queue"),
            "daemon-a",
            "d3",
            600,
            token="t3",
            request=wire(STACK_A, "r-queue", "Queue", "Update"),
        )
        assert await store.save_response(
            idempotency_key(STACK_A, "r-queue"),
            "t3",
            "FAILED",
            body("FAILED", f"quota hit at https://api.example.com/x?{SECRET_QUERY}"),
        )
        await store.mark_sent(idempotency_key(STACK_A, "r-queue"), "d3", "t3")

    async def then(store) -> None:
        await store.claim(
            idempotency_key(STACK_B, "r-page"),
            "daemon-c",
            "d4",
            60,
            token="t4",
            request=wire(STACK_B, "r-page", "Page"),
        )
        assert await store.save_response(idempotency_key(STACK_B, "r-page"), "t4", "SUCCESS", body("SUCCESS"))
        await store.mark_sent(idempotency_key(STACK_B, "r-page"), "d4", "t4")

    in_store(then, ago=3 * 3600)
    in_store(now)


def listing(state_url: str, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["requests", "--state", state_url, "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_lists_in_flight_unconfirmed_and_answered_with_what_an_operator_asks(state_url, in_store):
    populate(in_store)
    rows = {r["logical_id"]: r for r in listing(state_url)}
    assert [r["logical_id"] for r in listing(state_url)] == ["Web", "Db", "Queue", "Page"]  # in flight first

    web = rows["Web"]
    assert web["state"] == "CLAIMED" and web["owner"] == "daemon-a" and web["stack"] == "shop"
    assert 590 < web["lease_left"] <= 600 and 0 <= web["age"] < 30
    assert web["request_type"] == "Create" and web["resource_type"] == "Custom::Thing" and web["request_id"] == "r-web"
    assert web["stack_id"] == STACK_A and web["status"] is None

    assert rows["Db"]["state"] == "RESPONSE_READY" and rows["Db"]["status"] == "SUCCESS"
    assert rows["Queue"]["state"] == "SENT" and rows["Queue"]["status"] == "FAILED"
    assert rows["Queue"]["reason"].startswith("quota hit at https://api.example.com/x?<redacted>")
    assert rows["Queue"]["lease_left"] is None and rows["Queue"]["answered_urls"] == 1
    assert rows["Page"]["state"] == "SENT" and 3 * 3600 - 30 < rows["Page"]["age"] < 3 * 3600 + 30


def test_a_long_running_request_shows_its_next_poll_and_how_far_it_got_never_its_progress(state_url, in_store):
    """POLLING: no lease held while it waits; when its next poll is due and how far it has got
    (polls, deadline, size), never what the handler put in its progress (a crhelper function
    keeps helper.Data there, NoEcho or not)."""
    from cfn_provider.pipeline.poll_steps import PollState

    deadline = time.time() + 3000
    state = PollState(
        {"CrHelperData": {"snapshot": "snap-1", "Password": "hunter3"}}, "snap-1-id", deadline, 2, time.time() - 60
    )

    async def polling(store) -> None:
        key = idempotency_key(STACK_A, "r-snap")
        await store.claim(key, "daemon-a", "d9", 600, token="t9", request=wire(STACK_A, "r-snap", "Snapshot"))
        assert await store.save_progress(key, "t9", state.dumps(), time.time() + 120)

    populate(in_store)
    in_store(polling)
    rows = listing(state_url, "--state-is", "polling")
    assert [r["logical_id"] for r in rows] == ["Snapshot"]
    [snap] = rows
    assert snap["state"] == "POLLING" and snap["lease_left"] is None
    assert 100 < snap["next_poll_in"] <= 120 and snap["polls"] == 2 and snap["progress_bytes"] == len(state.dumps())
    assert snap["polling_physical_id"] == "snap-1-id"
    assert snap["deadline_at"] == datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
    assert [r["logical_id"] for r in listing(state_url)][:2] == ["Web", "Snapshot"]  # after in flight
    for args in (["--json"], []):
        result = CliRunner().invoke(main, ["requests", "--state", state_url, *args])
        assert result.exit_code == 0, result.output
        assert "hunter3" not in result.output and "CrHelperData" not in result.output and 'snap-1"' not in result.output


def test_output_is_redacted_as_the_logs_are(state_url, in_store):
    populate(in_store)
    for args in (["--json"], []):
        result = CliRunner().invoke(main, ["requests", "--state", state_url, *args])
        assert result.exit_code == 0, result.output
        assert "hunter2" not in result.output and "Password" not in result.output  # NoEcho Data
        assert SECRET_QUERY not in result.output and "deadbeef" not in result.output  # presigned query strings
        assert "?<redacted>" in result.output


def test_the_table_has_a_line_per_request_under_a_header(state_url, in_store):
    populate(in_store)
    result = CliRunner().invoke(main, ["requests", "--state", state_url])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert header.split()[:3] == ["STATE", "STACK", "LOGICAL"] and "LEASE LEFT" in header and "REASON" in header
    assert len(lines) == 4
    web = next(line for line in lines if " Web " in line)
    assert web.startswith("CLAIMED") and "daemon-a" in web and re.search(r" (9m5\ds|10m00s) ", web)  # lease left


def test_filters_by_stack_name_or_id_logical_id_and_state(state_url, in_store):
    populate(in_store)
    assert {r["logical_id"] for r in listing(state_url, "--stack", "blog")} == {"Page"}
    assert {r["logical_id"] for r in listing(state_url, "--stack", STACK_A)} == {"Web", "Db", "Queue"}
    assert [r["logical_id"] for r in listing(state_url, "--logical-id", "Db")] == ["Db"]
    assert [r["logical_id"] for r in listing(state_url, "--state-is", "in-flight")] == ["Web"]
    assert [r["logical_id"] for r in listing(state_url, "--state-is", "response_ready")] == ["Db"]
    assert {r["logical_id"] for r in listing(state_url, "--state-is", "SENT", "--state-is", "CLAIMED")} == {
        "Web",
        "Queue",
        "Page",
    }
    assert listing(state_url, "--stack", "blog", "--state-is", "CLAIMED") == []


def test_the_recency_window_leaves_out_older_requests(state_url, in_store):
    populate(in_store)
    assert {r["logical_id"] for r in listing(state_url, "--since", "1h")} == {"Web", "Db", "Queue"}
    assert {r["logical_id"] for r in listing(state_url, "--since", "4h")} == {"Web", "Db", "Queue", "Page"}
    assert len(listing(state_url, "--since", "0")) == 4  # everything stored
    result = CliRunner().invoke(main, ["requests", "--state", state_url, "--since", "soon"])
    assert result.exit_code == 2 and "duration" in result.output


def test_a_record_without_a_stored_request_still_shows_its_ids(state_url, in_store):
    """A claim by a daemon from before stored requests: stack and RequestId come from the key."""
    in_store(lambda store: store.claim(idempotency_key(STACK_A, "r-old"), "old-daemon", "d", 60, token="t"))
    [row] = listing(state_url)
    assert row["stack"] == "shop" and row["request_id"] == "r-old" and row["logical_id"] is None
    assert row["request_stored"] is False


def test_each_record_shows_its_dialect_and_names_its_stack_by_that_dialects_rule(state_url, in_store):
    """A CloudFormation request's stack is named by its StackId, whatever StackName it carries; a ROS
    request's by its StackName (issue 21 item 1: the transport's dialect, kept with the request)."""
    ros_id = "7c1f1c38-5d6b-4a34-9f38-2b6f5d0c0d11"
    cfn = parse(json.dumps({**json.loads(wire(STACK_A, "r-cfn", "Web")), "StackName": "victim"}), CLOUDFORMATION)
    ros = parse(json.dumps({**json.loads(wire(ros_id, "r-ros", "Thing")), "StackName": "ros-stack"}), ROS)

    async def claims(store) -> None:
        for request, rid in ((cfn, "r-cfn"), (ros, "r-ros")):
            await store.claim(
                idempotency_key(request.stack_id, rid), "daemon-a", "d", 60, token=rid, request=stored_form(request)
            )

    in_store(claims)
    rows = {r["request_id"]: r for r in listing(state_url)}
    assert (rows["r-cfn"]["stack"], rows["r-cfn"]["dialect"]) == ("shop", "cloudformation")
    assert (rows["r-ros"]["stack"], rows["r-ros"]["dialect"]) == ("ros-stack", "ros")
    assert rows["r-cfn"]["logical_id"] == "Web" and rows["r-ros"]["resource_type"] == "Custom::Thing"


def test_an_empty_store_says_so_and_a_missing_state_file_is_an_error(state_url, tmp_path):
    """A store that is not there is a start-up error, as for `run` (exit 2, one line; exit 1 before issue 24)."""
    result = CliRunner().invoke(main, ["requests", "--state", state_url])
    assert result.exit_code == 0 and result.output.startswith("no requests in")
    missing = tmp_path / "nowhere" / "state.db"
    result = CliRunner().invoke(main, ["requests", "--state", f"sqlite://{missing}"])
    assert_not_started(result, "no state file")
    assert not missing.parent.exists()
    if state_url.startswith("dynamodb://"):
        result = CliRunner().invoke(main, ["requests", "--state", state_url + "-missing"])
        assert_not_started(result, "not found", "cfn-provider bootstrap --dynamodb-table")


async def test_a_request_a_daemon_answered_is_listed_with_its_logical_id(state_url, run_daemon, stack: Stack):
    """Through the real queue: the daemon's claim stores the request, so its ids and type show."""
    await run_daemon(state=state_url)
    request = stack.request("Create", "Answered", properties={"Echo": "x"})
    stack.publish(request)
    assert (await asyncio.to_thread(stack.response, request))["Status"] == "SUCCESS"
    # the daemon's `request` log line comes before the message's delete: once the queue is empty it
    # has been written, and cannot land in the CLI's output below (CliRunner swaps this process's stdout)
    await wait_until_queue_empty(stack.provider)
    for _ in range(50):  # the SENT mark follows the PUT
        rows = await asyncio.to_thread(listing, state_url, "--stack", stack.name)
        if rows and rows[0]["state"] == "SENT":
            break
        await asyncio.sleep(0.1)
    [row] = rows
    assert row["state"] == "SENT" and row["logical_id"] == "Answered" and row["request_type"] == "Create"
    assert row["status"] == "SUCCESS" and row["response_url"].endswith("?<redacted>")
    assert row["request_id"] == request["RequestId"] and row["stack_id"] == stack.stack_id


def test_durations_and_state_words():
    assert parse_duration("24h") == 86400 and parse_duration("90") == 90 and parse_duration("2d") == 172800
    assert [duration(s) for s in (5, 184, 7500, 100000, -3, None)] == ["5s", "3m04s", "2h05m", "1d03h", "lapsed", "-"]
    assert state_names(["in-flight", "unconfirmed", "answered", "sent", "polling"]) == {
        "CLAIMED",
        "RESPONSE_READY",
        "SENT",
        "POLLING",
    }
    assert state_names(["in-flight", "Response-Ready", "SENT"]) == {State.CLAIMED, State.RESPONSE_READY, State.SENT}
    assert all(type(s) is State for s in state_names(["answered", "polling"]))
    with pytest.raises(ValueError, match="'done' is not a state"):
        state_names(["done"])


def test_the_daemons_config_file_names_the_store(state_url, in_store, tmp_path):
    """`--config` reads the daemon's own file: its state is used, its other settings are ignored."""
    populate(in_store)
    config = tmp_path / "daemon.toml"
    config.write_text(
        f'state = "{state_url}"\nqueue-url = "https://sqs.eu-west-1.amazonaws.com/1/q"\n'
        '[handlers]\n"Custom::Thing" = "mypkg.thing"\n'
    )
    result = CliRunner().invoke(main, ["requests", "--config", str(config), "--json", "--logical-id", "Web"])
    assert result.exit_code == 0, result.output
    assert [r["logical_id"] for r in json.loads(result.output)] == ["Web"]


def test_help_lists_every_state_and_an_unknown_one_is_refused(state_url, in_store):
    result = CliRunner().invoke(main, ["requests", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for state, word in (
        ("CLAIMED", "in-flight"),
        ("RESPONSE_READY", "unconfirmed"),
        ("POLLING", "polling"),
        ("SENT", "answered"),
    ):
        assert f"{state} ({word})" in text, text
    populate(in_store)
    result = CliRunner().invoke(main, ["requests", "--state", state_url, "--state-is", "polled"])
    assert result.exit_code == 2 and "'polled' is not a state" in result.output and "POLLING" in result.output
    assert "no requests" not in result.output  # refused, not an empty listing


def test_two_daemons_on_one_host_keep_their_own_default_state(tmp_path, monkeypatch):
    """No --state: each daemon's default store is its own file, named after its queue, and `requests
    --config` reads that daemon's; an install that already has state.db keeps it (the migration)."""
    import cfn_provider.cli as cli
    import cfn_provider.logs
    from tests.ops.conftest import open_at

    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    for name in ("CFN_PROVIDER_STATE", "CFN_PROVIDER_QUEUE_URL", "CFN_PROVIDER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    seen: list[Any] = []
    monkeypatch.setattr(cli, "_serve", lambda settings: seen.append(settings) or 0)
    monkeypatch.setattr(cfn_provider.logs, "configure", lambda *a, **k: None)
    configs = {}
    for name in ("shop", "blog"):
        configs[name] = tmp_path / f"{name}.toml"
        configs[name].write_text(f'queue-url = "https://sqs.eu-west-1.amazonaws.com/123456789012/{name}-provider"\n')
        assert CliRunner().invoke(main, ["run", "--config", str(configs[name])]).exit_code == 0
    shop, blog = (s.state for s in seen)
    assert shop != blog and shop.startswith(f"sqlite://{tmp_path / 'state'}/state-shop-provider-")

    async def one(url: str, stack_id: str) -> None:
        store = open_at(url)
        try:
            await store.claim(
                idempotency_key(stack_id, "r-1"), "d", "u", 600, token="t", request=wire(stack_id, "r-1", "Web")
            )
        finally:
            await store.close()

    asyncio.run(one(shop, STACK_A))
    asyncio.run(one(blog, STACK_B))
    for name, stack in (("shop", STACK_A), ("blog", STACK_B)):
        result = CliRunner().invoke(main, ["requests", "--config", str(configs[name]), "--json"])
        assert result.exit_code == 0, result.output
        assert [r["stack_id"] for r in json.loads(result.output)] == [stack]

    (tmp_path / "state" / "state.db").touch()  # an earlier build's single file: every daemon keeps it
    assert CliRunner().invoke(main, ["run", "--config", str(configs["shop"])]).exit_code == 0
    assert seen[-1].state == f"sqlite://{tmp_path / 'state' / 'state.db'}"

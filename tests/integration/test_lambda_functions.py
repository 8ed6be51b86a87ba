"""Lambda custom-resource functions run unchanged through the real path:
SNS -> SQS -> daemon (`lambda:` handler) -> presigned S3 PUT.

The functions (tests/support/lambda_functions) are written as AWS documents cfnresponse and as
crhelper's README shows; they import `cfnresponse` / `crhelper` and know nothing of the daemon.
crhelper's `@helper.poll_create` is polled by the daemon's scheduler (the poll contract).
"""
from __future__ import annotations

import asyncio
import time

import pytest

from cfn_provider.local.emulator import Provider, Stack
from cfn_provider.pipeline.response import is_failed_create_marker
from tests.support.aws import queue_counts, response_of
from tests.support.daemons import TEST_HANDLERS

FN = "lambda:tests.support.lambda_functions"
LAMBDA_HANDLERS = (
    ("Custom::Greeting", f"{FN}.cfnresponse_function.handler"),
    ("Custom::Secret", f"{FN}.cfnresponse_function.secret_handler"),
    ("Custom::Big", f"{FN}.cfnresponse_function.big_handler"),
    ("Custom::Silent", f"{FN}.cfnresponse_function.silent_handler"),
    ("Custom::Twice", f"{FN}.cfnresponse_function.twice_handler"),
    ("Custom::Crh", f"{FN}.crhelper_function.handler"),
    ("Custom::CrhPoll", f"{FN}.crhelper_polling.handler"),
    ("Custom::CrhSecret", f"{FN}.crhelper_secret.handler"),
)


@pytest.fixture(autouse=True)
def _region(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # as Lambda has it; the adapter would set it for good


@pytest.fixture
async def daemon(run_daemon):
    return await run_daemon(handlers=TEST_HANDLERS + LAMBDA_HANDLERS, concurrency=4, poll_interval=0.5)


async def round_trip(stack: Stack, resource_type: str, logical_id: str, name: str) -> list[dict]:
    """Create, Update (new Name), Delete; returns the three responses."""
    out = []
    create = stack.request("Create", logical_id, resource_type=resource_type, properties={"Name": name})
    stack.publish(create)
    out.append(await response_of(stack, create))
    physical_id = out[-1]["PhysicalResourceId"]
    update = stack.request("Update", logical_id, resource_type=resource_type, properties={"Name": name + "2"},
                           old_properties={"Name": name}, physical_id=physical_id)
    stack.publish(update)
    out.append(await response_of(stack, update))
    delete = stack.request("Delete", logical_id, resource_type=resource_type, properties={"Name": name + "2"},
                           physical_id=out[-1]["PhysicalResourceId"])
    stack.publish(delete)
    out.append(await response_of(stack, delete))
    for resp, req in zip(out, (create, update, delete)):
        assert resp is not None, f"no answer to {req['RequestType']}"
        assert (resp["StackId"], resp["RequestId"], resp["LogicalResourceId"]) == (
            req["StackId"], req["RequestId"], req["LogicalResourceId"])
    return out


async def test_a_cfnresponse_function_serves_a_stack_lifecycle(daemon, stack: Stack) -> None:
    create, update, delete = await round_trip(stack, "Custom::Greeting", "Hello", "ann")
    assert create["Status"] == "SUCCESS" and create["PhysicalResourceId"] == "greeting-ann"
    assert create["Data"]["Greeting"] == "hello ann"
    assert create["Data"]["FunctionArn"].startswith("arn:aws:lambda:us-east-1:123456789012:function:")
    assert 0 < create["Data"]["RemainingMs"] <= 3600 * 1000
    assert "?" not in create["Data"]["ResponseURL"].replace("?<redacted>", "")  # no signature handed out
    assert update["Status"] == "SUCCESS" and update["PhysicalResourceId"] == "greeting-ann2"  # a replacement
    assert delete["Status"] == "SUCCESS" and delete["PhysicalResourceId"] == "greeting-ann2"
    assert "Data" not in delete


async def test_a_crhelper_function_serves_a_stack_lifecycle(daemon, stack: Stack) -> None:
    create, update, delete = await round_trip(stack, "Custom::Crh", "Helped", "bob")
    assert create["Status"] == "SUCCESS" and create["PhysicalResourceId"] == "crh-bob"
    assert create["Data"] == {"Greeting": "hello bob", "RequestId": create["RequestId"]}
    assert update["Status"] == "SUCCESS" and update["PhysicalResourceId"] == "crh-bob"  # crhelper kept the id
    assert update["Data"]["Greeting"] == "hello again bob2"
    assert delete["Status"] == "SUCCESS" and delete["PhysicalResourceId"] == "crh-bob"


async def test_a_failed_crhelper_create_is_rolled_back_without_calling_it(daemon, stack: Stack) -> None:
    create = stack.request("Create", "Helped", resource_type="Custom::Crh", properties={"Name": "x", "Fail": "true"})
    stack.publish(create)
    resp = await response_of(stack, create)
    assert resp["Status"] == "FAILED" and resp["Reason"] == "asked to fail by the template"
    assert is_failed_create_marker(resp["PhysicalResourceId"])
    rollback = stack.request("Delete", "Helped", resource_type="Custom::Crh", physical_id=resp["PhysicalResourceId"])
    stack.publish(rollback)
    assert (await response_of(stack, rollback))["Status"] == "SUCCESS"


async def test_concurrent_requests_to_one_crhelper_function_get_their_own_answers(daemon, stack: Stack) -> None:
    """crhelper keeps the request it serves on its module-level helper: the adapter runs one at a time."""
    requests = [stack.request("Create", f"R{i}", resource_type="Custom::Crh", properties={"Name": f"n{i}"})
                for i in range(4)]
    for req in requests:
        stack.publish(req)
    responses = await asyncio.gather(*(response_of(stack, req, timeout=40) for req in requests))
    for i, (req, resp) in enumerate(zip(requests, responses)):
        assert resp["Status"] == "SUCCESS"
        assert resp["RequestId"] == req["RequestId"] and resp["Data"]["RequestId"] == req["RequestId"]
        assert resp["PhysicalResourceId"] == f"crh-n{i}"


async def test_common_mistakes_get_clear_answers(daemon, stack: Stack) -> None:
    silent = stack.request("Create", "Silent", resource_type="Custom::Silent")
    twice = stack.request("Create", "Twice", resource_type="Custom::Twice")
    big = stack.request("Create", "Big", resource_type="Custom::Big")
    for req in (silent, twice, big):
        stack.publish(req)
    resp = await response_of(stack, silent)
    assert resp["Status"] == "FAILED" and "returned without sending a response" in resp["Reason"]
    resp = await response_of(stack, twice)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "first-id"
    assert resp["Data"] == {"Which": "first"}
    resp = await response_of(stack, big)
    assert resp["Status"] == "FAILED" and "4096" in resp["Reason"] and resp["PhysicalResourceId"] == "big-1"


async def test_a_crhelper_poll_create_is_polled_by_the_daemon_until_it_returns_an_id(
        daemon, stack: Stack, provider: Provider) -> None:
    from tests.support.lambda_functions import crhelper_polling

    request = stack.request("Create", "Snapshot", resource_type="Custom::CrhPoll", properties={"Name": "s1", "Polls": "3"})
    stack.publish(request)
    ran = lambda: [what for what, request_id in crhelper_polling.ran if request_id == request["RequestId"]]  # noqa: E731
    deadline = time.monotonic() + 20
    while "poll_create" not in ran():
        assert time.monotonic() < deadline, "never polled"
        await asyncio.sleep(0.05)
    # between polls the message is gone: the request waits in the store, spending no receive
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)
    resp = await response_of(stack, request, timeout=30)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["PhysicalResourceId"] == "op-s1-ready"  # what the last poll returned
    assert resp["Data"] == {"Started": "s1", "Polls": 3}  # helper.Data, without crhelper's own keys
    assert ran() == ["create", "poll_create", "poll_create", "poll_create"]  # create ran once


async def test_a_raising_crhelper_poll_is_failed_with_the_id_create_returned(daemon, stack: Stack) -> None:
    from tests.support.lambda_functions import crhelper_polling

    request = stack.request("Create", "Broken", resource_type="Custom::CrhPoll",
                            properties={"Name": "b1", "PollRaise": "the snapshot failed"})
    stack.publish(request)
    resp = await response_of(stack, request, timeout=30)
    assert resp["Status"] == "FAILED" and resp["Reason"] == "the snapshot failed"
    assert resp["PhysicalResourceId"] == "op-b1"  # the rollback Delete reaches `delete` with it
    assert [w for w, r in crhelper_polling.ran if r == request["RequestId"]] == ["create", "poll_create"]
    rollback = stack.request("Delete", "Broken", resource_type="Custom::CrhPoll", physical_id="op-b1")
    stack.publish(rollback)
    assert (await response_of(stack, rollback))["Status"] == "SUCCESS"


async def test_a_noecho_crhelper_functions_data_is_never_shown_as_progress_and_leaves_with_the_window(
        daemon, stack: Stack, tmp_path, monkeypatch) -> None:
    """crhelper keeps helper.Data in CrHelperData from poll to poll, so it is stored as progress.
    With helper.NoEcho set: `requests` (table and --json) never shows it while the request polls;
    it is kept in clear only for the replay window, like the NoEcho body; after that the store
    (any daemon that meets the record) takes it out of the progress and the body alike."""
    import json as json_
    import uuid

    from click.testing import CliRunner

    from cfn_provider.cli import main
    from cfn_provider.pipeline.request import idempotency_key
    from cfn_provider.stores.sqlite import SQLiteStore
    from cfn_provider.trust.retention import NOECHO_REPLAY_WINDOW

    secret = "pw-" + uuid.uuid4().hex
    monkeypatch.setenv("CFN_TEST_NOECHO_SECRET", secret)  # what the function makes up and puts in helper.Data
    request = stack.request("Create", "Vault", resource_type="Custom::CrhSecret", properties={"Polls": "3"})
    key = idempotency_key(request["StackId"], request["RequestId"])
    state_url = f"sqlite://{tmp_path}/state.db"
    stack.publish(request)
    store = SQLiteStore(tmp_path / "state.db")
    try:
        deadline = time.monotonic() + 20
        while (record := await store.get(key)) is None or record.state != "POLLING":
            assert time.monotonic() < deadline, "never polled"
            await asyncio.sleep(0.05)
        assert secret in (record.progress or "")  # the poll needs it: kept while the request polls ...
        assert record.scrub_at is not None and record.scrub_at > time.time() + NOECHO_REPLAY_WINDOW - 60  # ... for a while
        for args in (["--json"], []):
            shown = await asyncio.to_thread(CliRunner().invoke, main, ["requests", "--state", state_url, *args])
            assert shown.exit_code == 0 and "Vault" in shown.output, shown.output
            assert secret not in shown.output and "CrHelperData" not in shown.output
        answer = await response_of(stack, request, timeout=30)
        assert answer["Status"] == "SUCCESS" and answer["NoEcho"] is True and answer["Data"] == {"Password": secret}
    finally:
        await store.close()
    later = SQLiteStore(tmp_path / "state.db", clock=lambda: time.time() + NOECHO_REPLAY_WINDOW + 1)
    try:
        await later.scrub(key)  # a daemon that meets the record past the window
        record = await later.get(key)
    finally:
        await later.close()
    assert secret not in (record.progress or "") and secret.encode() not in (record.body or b"")
    assert json_.loads(record.progress)["polls"] == 2 and json_.loads(record.progress)["no_echo"] is True
    for path in tmp_path.glob("state.db*"):
        assert secret.encode() not in path.read_bytes(), path.name


async def test_the_command_line_serves_a_noecho_function_and_logs_keep_its_secret(spawn, stack: Stack) -> None:
    daemon = spawn("lambda", "--handler", f"Custom::Secret={FN}.cfnresponse_function.secret_handler",
                   "--handler", f"Custom::Greeting={FN}.cfnresponse_function.handler", "--log-level", "debug")
    secret = stack.request("Create", "Password", resource_type="Custom::Secret")
    greeting = stack.request("Create", "Hello", resource_type="Custom::Greeting", properties={"Name": "cy"})
    stack.publish(secret)
    stack.publish(greeting)
    resp = await response_of(stack, secret)
    assert resp["Status"] == "SUCCESS" and resp["NoEcho"] is True
    password = resp["Data"]["Password"]
    assert (await response_of(stack, greeting))["Data"]["Greeting"] == "hello cy"
    daemon.stop()
    log = daemon.log_path.read_text()
    assert '"event": "lambda.sent"' in log
    assert password not in log
    assert "X-Amz-Signature" not in log and "Signature=" not in log

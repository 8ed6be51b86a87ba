"""Lambda custom-resource functions run unchanged through the real path:
SNS -> SQS -> daemon (`lambda:` handler, each function in processes of its own) -> presigned S3 PUT.

The functions (tests/support/lambda_functions) are written as AWS documents cfnresponse, as
crhelper's README shows, and as AWS's own examples ship them (a renamed cfnresponse copy, a module
named resource.py, two index.handler functions); they know nothing of the daemon. crhelper's
`@helper.poll_create` is polled by the daemon's scheduler (the poll contract).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cfn_provider.functions.settings import parse_options
from cfn_provider.local.emulator import Provider, Stack
from cfn_provider.pipeline.response import is_failed_create_marker
from tests.support.aws import queue_counts, response_of
from tests.support.daemons import TEST_HANDLERS

FOLDER = Path(__file__).resolve().parents[1] / "support" / "lambda_functions"
FN = "lambda:tests.support.lambda_functions"
LAMBDA_HANDLERS = (
    ("Custom::Greeting", f"{FN}.cfnresponse_function.handler"),
    ("Custom::Secret", f"{FN}.cfnresponse_function.secret_handler"),
    ("Custom::Big", f"{FN}.cfnresponse_function.big_handler"),
    ("Custom::Silent", f"{FN}.cfnresponse_function.silent_handler"),
    ("Custom::Twice", f"{FN}.cfnresponse_function.twice_handler"),
    ("Custom::Crh", f"{FN}.crhelper_function.handler"),
    ("Custom::CrhPoll", f"{FN}.crhelper_polling.handler"),
    ("Custom::Renamed", "lambda:index.handler"),
    ("Custom::S3Objects", "lambda:resource.handler"),
    ("Custom::TwinA", "lambda:index.handler"),
    ("Custom::TwinB", "lambda:index.handler"),
    ("Custom::Quick", "lambda:index.handler"),
    ("Custom::Crash", "lambda:index.handler"),
    ("Custom::Loud", "lambda:index.handler"),
    ("Custom::Hang", "lambda:index.handler"),
    ("Custom::CrhSecret", f"{FN}.crhelper_secret.handler"),
    ("Custom::Hyphen", "lambda:update-iam-role.handler"),
    ("Custom::HangShort", "lambda:index.handler"),
)
FOLDERS = {
    "Custom::Renamed": "renamed",
    "Custom::S3Objects": "objects",
    "Custom::TwinA": "twin_a",
    "Custom::TwinB": "twin_b",
    "Custom::Quick": "quick",
    "Custom::Crash": "crash",
    "Custom::Loud": "loud",
    "Custom::Hang": "hang",
    "Custom::Hyphen": "hyphen",
    "Custom::HangShort": "hang",
}


@pytest.fixture(autouse=True)
def _region(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # as Lambda has it


@pytest.fixture
def serve(run_daemon, tmp_path):
    """`await serve("Custom::Greeting", ...)`: a daemon serving those functions (and the test handlers)."""

    async def start(*types: str, function_env: dict[str, dict[str, str]] | None = None, **overrides):
        settings = [f"{t}=code={FOLDER / FOLDERS[t]}" for t in types if t in FOLDERS]
        settings += [f"{t}=env.{k}={v}" for t, env in (function_env or {}).items() for k, v in env.items()]
        settings += [
            f"Custom::CrhPoll=env.RAN_FILE={tmp_path / 'ran.txt'}",
            "Custom::Loud=env.LOG_LEVEL=DEBUG",
            "Custom::Loud=env.GREETING=hello from the environment",
            "Custom::Hang=concurrency=1",
            "Custom::HangShort=timeout=2",
        ]
        functions = {k: v for k, v in parse_options(settings).items() if k in types}
        handlers = TEST_HANDLERS + tuple(h for h in LAMBDA_HANDLERS if h[0] in types)
        overrides.setdefault("concurrency", 4)
        # the state directory is kept from the functions (docs/security.md): the file they write is beside it
        overrides.setdefault("state", f"sqlite://{tmp_path}/state/state.db")
        (tmp_path / "ran.txt").touch()  # a folder holding the state directory is not theirs to create files in
        return await run_daemon(handlers=handlers, functions=functions, poll_interval=0.5, **overrides)

    return start


def ran(tmp_path: Path, request_id: str) -> list[str]:
    path = tmp_path / "ran.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split()[0] for line in lines if line.split()[1] == request_id]


async def round_trip(stack: Stack, resource_type: str, logical_id: str, name: str) -> list[dict]:
    """Create, Update (new Name), Delete; returns the three responses."""
    out = []
    create = stack.request("Create", logical_id, resource_type=resource_type, properties={"Name": name})
    stack.publish(create)
    out.append(await response_of(stack, create))
    physical_id = out[-1]["PhysicalResourceId"]
    update = stack.request(
        "Update",
        logical_id,
        resource_type=resource_type,
        properties={"Name": name + "2"},
        old_properties={"Name": name},
        physical_id=physical_id,
    )
    stack.publish(update)
    out.append(await response_of(stack, update))
    delete = stack.request(
        "Delete",
        logical_id,
        resource_type=resource_type,
        properties={"Name": name + "2"},
        physical_id=out[-1]["PhysicalResourceId"],
    )
    stack.publish(delete)
    out.append(await response_of(stack, delete))
    for resp, req in zip(out, (create, update, delete), strict=True):
        assert resp is not None, f"no answer to {req['RequestType']}"
        assert (resp["StackId"], resp["RequestId"], resp["LogicalResourceId"]) == (
            req["StackId"],
            req["RequestId"],
            req["LogicalResourceId"],
        )
    return out


async def test_a_cfnresponse_function_serves_a_stack_lifecycle(serve, stack: Stack) -> None:
    await serve("Custom::Greeting")
    create, update, delete = await round_trip(stack, "Custom::Greeting", "Hello", "ann")
    assert create["Status"] == "SUCCESS" and create["PhysicalResourceId"] == "greeting-ann"
    assert create["Data"]["Greeting"] == "hello ann"
    assert create["Data"]["FunctionArn"].startswith("arn:aws:lambda:us-east-1:123456789012:function:")
    assert 0 < create["Data"]["RemainingMs"] <= 3600 * 1000
    # the presigned URL never reaches the function: it answers to the daemon's loopback listener
    assert create["Data"]["ResponseURL"].startswith("https://127.0.0.1:")
    assert create["RequestId"] not in create["Data"]["ResponseURL"]  # nothing of the real URL's path either
    assert update["Status"] == "SUCCESS" and update["PhysicalResourceId"] == "greeting-ann2"  # a replacement
    assert delete["Status"] == "SUCCESS" and delete["PhysicalResourceId"] == "greeting-ann2"
    assert "Data" not in delete


async def test_a_crhelper_function_serves_a_stack_lifecycle(serve, stack: Stack) -> None:
    await serve("Custom::Crh")
    create, update, delete = await round_trip(stack, "Custom::Crh", "Helped", "bob")
    assert create["Status"] == "SUCCESS" and create["PhysicalResourceId"] == "crh-bob"
    assert create["Data"] == {"Greeting": "hello bob", "RequestId": create["RequestId"]}
    assert update["Status"] == "SUCCESS" and update["PhysicalResourceId"] == "crh-bob"  # crhelper kept the id
    assert update["Data"]["Greeting"] == "hello again bob2"
    assert delete["Status"] == "SUCCESS" and delete["PhysicalResourceId"] == "crh-bob"


async def test_a_failed_crhelper_create_is_rolled_back_without_calling_it(serve, stack: Stack) -> None:
    await serve("Custom::Crh")
    create = stack.request("Create", "Helped", resource_type="Custom::Crh", properties={"Name": "x", "Fail": "true"})
    stack.publish(create)
    resp = await response_of(stack, create)
    assert resp["Status"] == "FAILED" and resp["Reason"] == "asked to fail by the template"
    assert is_failed_create_marker(resp["PhysicalResourceId"])
    rollback = stack.request("Delete", "Helped", resource_type="Custom::Crh", physical_id=resp["PhysicalResourceId"])
    stack.publish(rollback)
    assert (await response_of(stack, rollback))["Status"] == "SUCCESS"


async def test_concurrent_requests_to_one_crhelper_function_get_their_own_answers(serve, stack: Stack) -> None:
    """crhelper keeps the request it serves on its module-level helper: one call at a time per process
    (concurrency 1: one process; the requests beyond it wait, or are queued for the poll scheduler)."""
    await serve("Custom::Crh")
    requests = [
        stack.request("Create", f"R{i}", resource_type="Custom::Crh", properties={"Name": f"n{i}"}) for i in range(4)
    ]
    for req in requests:
        stack.publish(req)
    responses = await asyncio.gather(*(response_of(stack, req, timeout=40) for req in requests))
    for i, (req, resp) in enumerate(zip(requests, responses, strict=True)):
        assert resp["Status"] == "SUCCESS"
        assert resp["RequestId"] == req["RequestId"] and resp["Data"]["RequestId"] == req["RequestId"]
        assert resp["PhysicalResourceId"] == f"crh-n{i}"


async def test_common_mistakes_get_clear_answers(serve, stack: Stack) -> None:
    await serve("Custom::Silent", "Custom::Twice", "Custom::Big")
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
    serve, stack: Stack, provider: Provider, tmp_path: Path
) -> None:
    await serve("Custom::CrhPoll")
    request = stack.request(
        "Create", "Snapshot", resource_type="Custom::CrhPoll", properties={"Name": "s1", "Polls": "3"}
    )
    stack.publish(request)
    deadline = time.monotonic() + 20
    while "poll_create" not in ran(tmp_path, request["RequestId"]):
        assert time.monotonic() < deadline, "never polled"
        await asyncio.sleep(0.05)
    # between polls the message is gone: the request waits in the store, spending no receive
    assert queue_counts(provider.emulator.client("sqs"), provider.queue_url) == (0, 0)
    resp = await response_of(stack, request, timeout=30)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["PhysicalResourceId"] == "op-s1-ready"  # what the last poll returned
    assert resp["Data"] == {"Started": "s1", "Polls": 3}  # helper.Data, without crhelper's own keys
    assert ran(tmp_path, request["RequestId"]) == ["create", "poll_create", "poll_create", "poll_create"]  # create once


async def test_a_raising_crhelper_poll_is_failed_with_the_id_create_returned(
    serve, stack: Stack, tmp_path: Path
) -> None:
    await serve("Custom::CrhPoll")
    request = stack.request(
        "Create",
        "Broken",
        resource_type="Custom::CrhPoll",
        properties={"Name": "b1", "PollRaise": "the snapshot failed"},
    )
    stack.publish(request)
    resp = await response_of(stack, request, timeout=30)
    assert resp["Status"] == "FAILED" and resp["Reason"] == "the snapshot failed"
    assert resp["PhysicalResourceId"] == "op-b1"  # the rollback Delete reaches `delete` with it
    assert ran(tmp_path, request["RequestId"]) == ["create", "poll_create"]
    rollback = stack.request("Delete", "Broken", resource_type="Custom::CrhPoll", physical_id="op-b1")
    stack.publish(rollback)
    assert (await response_of(stack, rollback))["Status"] == "SUCCESS"


async def test_a_noecho_crhelper_functions_data_is_never_shown_as_progress_and_leaves_with_the_window(
    serve, stack: Stack, tmp_path
) -> None:
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

    secret = "pw-" + uuid.uuid4().hex  # what the function makes up and puts in helper.Data: its own variable
    await serve("Custom::CrhSecret", function_env={"Custom::CrhSecret": {"CFN_TEST_NOECHO_SECRET": secret}})
    request = stack.request("Create", "Vault", resource_type="Custom::CrhSecret", properties={"Polls": "3"})
    key = idempotency_key(request["StackId"], request["RequestId"])
    state_url = f"sqlite://{tmp_path}/state/state.db"
    stack.publish(request)
    store = SQLiteStore(tmp_path / "state" / "state.db")
    try:
        deadline = time.monotonic() + 20
        while (record := await store.get(key)) is None or record.state != "POLLING":
            assert time.monotonic() < deadline, "never polled"
            await asyncio.sleep(0.05)
        assert secret in (record.progress or "")  # the poll needs it: kept while the request polls ...
        assert (
            record.scrub_at is not None and record.scrub_at > time.time() + NOECHO_REPLAY_WINDOW - 60
        )  # ... for a while
        for args in (["--json"], []):
            shown = await asyncio.to_thread(CliRunner().invoke, main, ["requests", "--state", state_url, *args])
            assert shown.exit_code == 0 and "Vault" in shown.output, shown.output
            assert secret not in shown.output and "CrHelperData" not in shown.output
        answer = await response_of(stack, request, timeout=30)
        assert answer["Status"] == "SUCCESS" and answer["NoEcho"] is True and answer["Data"] == {"Password": secret}
    finally:
        await store.close()
    later = SQLiteStore(tmp_path / "state" / "state.db", clock=lambda: time.time() + NOECHO_REPLAY_WINDOW + 1)
    try:
        await later.scrub(key)  # a daemon that meets the record past the window
        record = await later.get(key)
    finally:
        await later.close()
    assert secret not in (record.progress or "") and secret.encode() not in (record.body or b"")
    assert json_.loads(record.progress)["polls"] == 2 and json_.loads(record.progress)["no_echo"] is True
    for path in (tmp_path / "state").glob("state.db*"):
        assert secret.encode() not in path.read_bytes(), path.name


async def test_the_command_line_serves_a_noecho_function_and_logs_keep_its_secret(spawn, stack: Stack) -> None:
    daemon = spawn(
        "lambda",
        "--handler",
        f"Custom::Secret={FN}.cfnresponse_function.secret_handler",
        "--handler",
        f"Custom::Greeting={FN}.cfnresponse_function.handler",
        "--log-level",
        "debug",
    )
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
    assert '"event":"lambda.sent"' in log
    assert password not in log
    assert "X-Amz-Signature" not in log and "Signature=" not in log
    assert '"event":"function.output"' in log and '"function":"Custom-Greeting"' in log


# --- as AWS's own examples ship them -------------------------------------------------------------


async def test_a_renamed_cfnresponse_copy_answers_with_its_own_urllib_put(serve, stack: Stack) -> None:
    """custom_response.py (AWS's macro examples) PUTs by itself: that PUT is the answer, so the Create
    succeeds and its Delete reaches the function (no failed-Create marker, nothing leaks)."""
    await serve("Custom::Renamed")
    create, update, delete = await round_trip(stack, "Custom::Renamed", "Macro", "m1")
    assert create["Status"] == "SUCCESS" and create["PhysicalResourceId"] == "renamed-m1"
    assert create["Data"] == {"Renamed": "yes m1"}
    assert update["PhysicalResourceId"] == "renamed-m12" and delete["Status"] == "SUCCESS"


async def test_a_function_module_named_resource_and_two_index_handlers_in_one_daemon(serve, stack: Stack) -> None:
    await serve("Custom::S3Objects", "Custom::TwinA", "Custom::TwinB")
    objects = stack.request("Create", "Objects", resource_type="Custom::S3Objects", properties={"Key": "k1"})
    twins = [stack.request("Create", f"Twin{t}", resource_type=f"Custom::Twin{t}") for t in "AB"]
    for req in (objects, *twins):
        stack.publish(req)
    resp = await response_of(stack, objects)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "s3-object-k1"
    assert resp["Data"] == {"Module": "resource"}
    a, b = [await response_of(stack, req) for req in twins]
    assert (a["PhysicalResourceId"], a["Data"], b["PhysicalResourceId"], b["Data"]) == (
        "a-1",
        {"Twin": "a"},
        "b-1",
        {"Twin": "b"},
    )


async def test_a_module_with_hyphens_in_its_name_serves_as_lambda_imports_it(serve, stack: Stack) -> None:
    """A real Quick Start's Handler `update-iam-role.handler`: refused as a module name before; Lambda's
    runtime imports the file update-iam-role.py by that name, and so does the function's process."""
    await serve("Custom::Hyphen")
    request = stack.request("Create", "Role", resource_type="Custom::Hyphen", properties={"RoleName": "r1"})
    stack.publish(request)
    resp = await response_of(stack, request)
    assert resp["Status"] == "SUCCESS", resp
    assert (resp["PhysicalResourceId"], resp["Data"]) == ("updated-r1", {"Module": "update-iam-role"})


async def test_a_function_past_its_own_timeout_is_killed_and_answered_failed_long_before_the_deadline(
    serve, stack: Stack
) -> None:
    """Lambda's Timeout (the template's, as `timeout`): a call still running then is ended and answered
    FAILED saying so, not left to the request's ServiceTimeout; the next call gets a fresh process."""
    await serve("Custom::HangShort")
    hung = stack.request(
        "Create", "Hung", resource_type="Custom::HangShort", properties={"Hang": "yes", "ServiceTimeout": "120"}
    )
    started = time.monotonic()
    stack.publish(hung)
    resp = await response_of(stack, hung, timeout=60)
    assert resp is not None and resp["Status"] == "FAILED", resp
    assert "timed out after 2 s (its timeout setting" in resp["Reason"] and time.monotonic() - started < 60
    fine = stack.request("Create", "Fine", resource_type="Custom::HangShort")
    stack.publish(fine)
    assert (await response_of(stack, fine))["PhysicalResourceId"] == "hang-fine"


async def test_a_1_s_service_timeout_is_answered_success(serve, stack: Stack) -> None:
    """AWS's getfromjson example sets ServiceTimeout 1: the function is called, and answers in time."""
    await serve("Custom::Quick")
    request = stack.request(
        "Create",
        "FromJson",
        resource_type="Custom::Quick",
        properties={"ServiceTimeout": "1", "Json": '{"colour": "blue"}', "Key": "colour"},
    )
    stack.publish(request)
    resp = await response_of(stack, request)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["Data"]["Value"] == "blue" and 0 < resp["Data"]["RemainingMs"] < 1000


async def test_a_function_that_calls_os_exit_fails_only_that_request(serve, stack: Stack) -> None:
    await serve("Custom::Crash", "Custom::Greeting")
    crash = stack.request("Create", "Crash", resource_type="Custom::Crash", properties={"Exit": "3"})
    stack.publish(crash)
    resp = await response_of(stack, crash)
    assert resp["Status"] == "FAILED"
    assert "ended before it answered: its process exited with status 3" in resp["Reason"]
    assert f"request_id={crash['RequestId']}" in resp["Reason"]
    after = stack.request("Create", "Fine", resource_type="Custom::Crash")
    other = stack.request("Create", "Hello", resource_type="Custom::Greeting", properties={"Name": "dee"})
    for req in (after, other):
        stack.publish(req)
    assert (await response_of(stack, after))["PhysicalResourceId"] == "crash-fine"
    assert (await response_of(stack, other))["Data"]["Greeting"] == "hello dee"


async def test_a_function_reading_its_environment_and_setting_the_root_level_leaves_the_daemon_alone(
    serve, stack: Stack
) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    with capture_logs() as logs:
        await serve("Custom::Loud")
        request = stack.request("Create", "Loud", resource_type="Custom::Loud")
        stack.publish(request)
        resp = await response_of(stack, request)
    assert resp["Status"] == "SUCCESS" and resp["Data"] == {"Greeting": "hello from the environment"}
    assert (root.level, list(root.handlers)) == before
    mine = {e["message"]: e for e in logs if e.get("function") == "Custom-Loud" and "message" in e}
    assert mine["info from the function: Create"]["request_id"] == request["RequestId"]
    assert mine["debug from the function"]["log_level"] == "debug"  # the function's level, in its own process


async def test_a_hung_function_cannot_starve_another(serve, stack: Stack, provider: Provider) -> None:
    """Four requests to a function that hangs (concurrency 1) in a daemon with four slots: one runs,
    one waits, the others wait in the store for the poll scheduler; another function answers at once."""
    await serve("Custom::Hang", "Custom::Greeting", grace_period=1.0)
    hung = [
        stack.request(
            "Create", f"Hung{i}", resource_type="Custom::Hang", properties={"Hang": "yes", "ServiceTimeout": "30"}
        )
        for i in range(4)
    ]
    for req in hung:
        stack.publish(req)
    await asyncio.sleep(2.0)
    other = stack.request("Create", "Hello", resource_type="Custom::Greeting", properties={"Name": "eve"})
    started = time.monotonic()
    stack.publish(other)
    resp = await response_of(stack, other, timeout=15)
    assert resp is not None and resp["Data"]["Greeting"] == "hello eve"
    assert time.monotonic() - started < 10
    assert stack.response(hung[0], 0.1) is None  # still hung, not answered


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry.name))
    return found


async def test_sigterm_hands_a_running_call_back_and_ends_the_functions_processes(
    spawn, stack: Stack, provider: Provider
) -> None:
    from tests.support.daemons import stop_gracefully, wait_for_event

    daemon = spawn(
        "stop",
        "--handler",
        "Custom::Hang=lambda:index.handler",
        "--function",
        f"Custom::Hang=code={FOLDER / 'hang'}",
        "--grace-period",
        "1",
    )
    wait_for_event(daemon, event="functions_started")
    assert daemon.proc is not None
    workers = _children(daemon.proc.pid)
    assert workers, "no function process"
    request = stack.request("Create", "Hung", resource_type="Custom::Hang", properties={"Hang": "yes"})
    stack.publish(request)
    sqs = provider.emulator.client("sqs")
    deadline = time.monotonic() + 20
    while queue_counts(sqs, provider.queue_url) != (0, 1):  # received: the call is running
        assert time.monotonic() < deadline, "never received"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    assert await asyncio.to_thread(stop_gracefully, daemon, 30) == 0
    released = [
        e for e in daemon.events() if e.get("event") == "request" and e.get("request_id") == request["RequestId"]
    ]
    assert [e["outcome"] for e in released] == ["released"]  # an hour left: another worker takes it
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()

"""cfn_provider.functions: a `lambda:` function's answer is whatever it PUTs to its ResponseURL.

Each test answers a request the way the worker does (runner.call, then response.success or
response.failure) with a function running in its own process, and reads the body CloudFormation
would get. (These were tests/sdk/test_lambda_adapter.py's, for the in-process adapter; the same
behaviour now comes through the loopback listener.) The runs through the real queue are in
tests/integration/test_lambda_functions.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from structlog.testing import capture_logs

from cfn_provider.functions.function import FunctionFailed, LambdaFunction
from cfn_provider.pipeline import response as responses
from cfn_provider.pipeline.router import HandlerError, parse_handler_option
from tests.support.functions import REPO, SIGNED_URL, answer, event_for, load, load_folder, write_function

FUNCTIONS = "tests.support.lambda_functions"


@pytest.fixture(autouse=True)
def _started(host):
    """Every test here calls functions through a started host."""


# --- registration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        f"{FUNCTIONS}.cfnresponse_function.handler",
        f"{FUNCTIONS}.cfnresponse_function:handler",
        f"{FUNCTIONS.replace('.', '/')}/cfnresponse_function.handler",
    ],
)
def test_lambda_target_forms_load_the_function_from_the_daemons_path(target):
    handler = load(target)
    assert isinstance(handler, LambdaFunction)
    assert (handler.target.module, handler.target.attr) == (f"{FUNCTIONS}.cfnresponse_function", "handler")
    assert handler.target.code == str(REPO)  # where `tests` is found on the daemon's path


def test_handler_option_and_config_table_accept_lambda_targets(tmp_path):
    from cfn_provider.config import load_config_file

    assert parse_handler_option("Custom::X=lambda:index.handler") == ("Custom::X", "lambda:index.handler")
    with pytest.raises(ValueError, match="lambda:MODULE.FUNCTION"):
        parse_handler_option("Custom::X=lambda:handler")
    (tmp_path / "c.toml").write_text('[handlers]\n"Custom::X" = "lambda:index.handler"\n')
    assert load_config_file(tmp_path / "c.toml")["handler"] == ["Custom::X=lambda:index.handler"]


@pytest.mark.parametrize(
    "target, message",
    [
        (f"{FUNCTIONS}.cfnresponse_function.nothing", "has no attribute 'nothing'"),
        (f"{FUNCTIONS}.no_such_module.handler", "No module named"),
        (f"{FUNCTIONS}.cfnresponse_function.logger", "not a function"),
        ("no_such_top_level.handler", "No module named 'no_such_top_level' on the daemon's path"),
    ],
)
def test_a_bad_lambda_target_fails_at_start_up_naming_it(target, message):
    with pytest.raises(HandlerError, match=message) as info:
        load(target)
    assert "lambda:" + target in str(info.value)


def test_an_import_error_in_the_function_fails_the_start_with_its_message(tmp_path):
    folder = write_function(tmp_path / "fn", "import boto4_does_not_exist\ndef handler(e, c):\n    pass\n")
    with pytest.raises(HandlerError, match="No module named 'boto4_does_not_exist'"):
        load_folder(folder)


def test_an_async_function_is_refused_with_the_reason(tmp_path):
    folder = write_function(tmp_path / "fn", "async def handler(event, context):\n    pass\n")
    with pytest.raises(HandlerError, match="calls handlers synchronously"):
        load_folder(folder)


def test_a_code_folder_that_does_not_exist_fails_the_start(tmp_path):
    with pytest.raises(HandlerError, match="does not exist"):
        load("index.handler", "Custom::Thing", f"code={tmp_path / 'missing'}")


def test_loading_a_function_never_imports_it_or_cfnresponse_into_the_daemon(tmp_path):
    """The daemon only looks for the module; the function and `cfnresponse` exist only in its own
    interpreter (nothing named cfnresponse is importable in the daemon's)."""
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        open(__file__ + ".imported-by", "a").write("x")
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """,
    )
    code = textwrap.dedent(f"""
        import importlib.util, sys
        from cfn_provider.pipeline.router import Router
        from cfn_provider.functions.settings import parse_options
        Router([("Custom::X", "lambda:index.handler")], use_entry_points=False,
               functions=parse_options(["Custom::X=code={folder}"]))
        assert "index" not in sys.modules and "cfnresponse" not in sys.modules
        print(importlib.util.find_spec("cfnresponse"))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "eu-west-1"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None"]
    assert (folder / "index.py.imported-by").read_text() == "x"  # once: by the check's own interpreter


# --- answers -------------------------------------------------------------------------------


async def test_cfnresponse_success_becomes_the_answer_with_the_functions_id_and_data(executor):
    handler = load(f"{FUNCTIONS}.cfnresponse_function.handler")
    doc = event_for("Create", Name="ann")
    body = await answer(handler, doc, executor)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == "greeting-ann"
    assert body["Data"]["Greeting"] == "hello ann"
    for key in ("StackId", "RequestId", "LogicalResourceId"):
        assert body[key] == doc[key]


async def test_the_function_gets_a_lambda_event_and_context(executor):
    handler = load(f"{FUNCTIONS}.cfnresponse_function.handler", "Custom::Thing", "log_group=/cfn-provider/thing")
    doc = event_for("Create")
    data = (await answer(handler, doc, executor, budget=20))["Data"]
    assert data["EventKeys"] == sorted(doc)
    assert data["ResponseURL"].startswith("https://127.0.0.1:") and "?<redacted>" not in data["ResponseURL"]
    assert "X-Amz-Signature" not in data["ResponseURL"] and SIGNED_URL.split("?")[0] not in data["ResponseURL"]
    assert 0 < data["RemainingMs"] <= 20_000
    assert data["FunctionName"] == "Custom-Thing"  # from the ResourceType, unless `name` says otherwise
    assert data["FunctionVersion"] == "$LATEST"
    assert data["FunctionArn"] == "arn:aws:lambda:eu-west-1:123456789012:function:Custom-Thing"
    assert data["LogGroup"] == "/cfn-provider/thing"
    assert "/[$LATEST]" in data["LogStream"]
    assert data["MemoryMb"].isdigit()
    assert str(uuid.UUID(data["AwsRequestId"])) == data["AwsRequestId"]


async def test_each_call_gets_a_response_url_of_its_own(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Url": event["ResponseURL"]})
    """,
    )
    handler = load_folder(folder)
    urls = [(await answer(handler, event_for(), executor))["Data"]["Url"] for _ in range(2)]
    assert urls[0] != urls[1]
    assert all(len(url.partition("token=")[2]) >= 40 for url in urls)


async def test_the_event_is_a_plain_mutable_dict(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            event["ResourceProperties"]["Added"] = "yes"   # Lambda events are plain dicts
            event.setdefault("Extra", []).append(1)
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Type": type(event).__name__})
    """,
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Type": "dict"}


async def test_no_physical_id_keeps_the_daemons_rule(tmp_path, executor):
    """cfnresponse sends the log stream's name when given no id; the daemon keeps its own rule."""
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """,
    )
    handler = load_folder(folder)
    create = await answer(handler, event_for("Create"), executor)
    assert create["PhysicalResourceId"].startswith("my-stack-Thing-")
    update = await answer(handler, event_for("Update"), executor)
    assert update["PhysicalResourceId"] == "existing-id"  # not a new log stream name: no replacement


async def test_failed_without_reason_says_where_to_look(executor):
    handler = load(f"{FUNCTIONS}.cfnresponse_function.failing_handler")
    doc = event_for()
    body = await answer(handler, doc, executor)
    assert body["Status"] == "FAILED"
    assert f"request_id={doc['RequestId']}" in body["Reason"] and "cfn-provider log" in body["Reason"]
    assert responses.is_failed_create_marker(body["PhysicalResourceId"])


async def test_returning_without_sending_is_failed_with_a_clear_reason(executor):
    body = await answer(load(f"{FUNCTIONS}.cfnresponse_function.silent_handler"), event_for(), executor)
    assert body["Status"] == "FAILED"
    assert "returned without sending a response" in body["Reason"]


async def test_the_first_answer_is_kept_and_the_second_logged(executor):
    with capture_logs() as logs:
        body = await answer(load(f"{FUNCTIONS}.cfnresponse_function.twice_handler"), event_for(), executor)
        for _ in range(100):  # the second PUT comes after the answer was taken
            if any(e["event"] == "lambda.second_send" for e in logs):
                break
            await asyncio.sleep(0.02)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "first-id"
    assert body["Data"] == {"Which": "first"}
    second = [e for e in logs if e["event"] == "lambda.second_send"]
    assert len(second) == 1 and second[0]["kept"] == "SUCCESS" and second[0]["status"] == "FAILED"
    assert "Which" not in json.dumps([e for e in logs if e["event"].startswith("lambda.")])  # Data is never logged


async def test_a_raising_function_is_failed_with_its_message(executor):
    body = await answer(load(f"{FUNCTIONS}.cfnresponse_function.raising_handler"), event_for(), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "boom: the bucket does not exist"


async def test_raising_after_sending_keeps_what_was_sent(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"A": "1"}, "sent-id")
            raise RuntimeError("after the answer")
    """,
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "sent-id"


async def test_sys_exit_in_a_function_is_a_failed_answer(tmp_path, executor):
    folder = write_function(tmp_path / "fn", "import sys\ndef handler(event, context):\n    sys.exit(3)\n")
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "FAILED" and "sys.exit(3)" in body["Reason"]


async def test_an_unknown_status_or_a_body_that_is_not_json_is_failed(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import urllib.request, cfnresponse
        def handler(event, context):
            if event["ResourceProperties"].get("Garbage"):
                urllib.request.urlopen(urllib.request.Request(event["ResponseURL"], data=b"<ok/>", method="PUT"))
            else:
                cfnresponse.send(event, context, "OK", {})
    """,
    )
    handler = load_folder(folder)
    body = await answer(handler, event_for(), executor)
    assert body["Status"] == "FAILED" and "SUCCESS or FAILED" in body["Reason"]
    body = await answer(handler, event_for(Garbage="1"), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "the function's response body is not JSON"


async def test_noecho_and_the_size_guard_apply(executor):
    secret = await answer(load(f"{FUNCTIONS}.cfnresponse_function.secret_handler"), event_for(), executor)
    assert secret["Status"] == "SUCCESS" and secret["NoEcho"] is True
    assert secret["Data"]["Password"].startswith("s3cr3t-")
    big = await answer(load(f"{FUNCTIONS}.cfnresponse_function.big_handler"), event_for(), executor)
    assert big["Status"] == "FAILED" and "4096" in big["Reason"]
    assert big["PhysicalResourceId"] == "big-1"  # what it created still gets its Delete


async def test_a_send_from_the_functions_own_timer_thread_is_its_answer(tmp_path, executor):
    """AWS's documented pattern: a threading.Timer sends FAILED just before the time runs out."""
    folder = write_function(
        tmp_path / "fn",
        """
        import threading, time, cfnresponse
        def timeout(event, context):
            cfnresponse.send(event, context, cfnresponse.FAILED, {}, reason="about to time out")
        def handler(event, context):
            seconds = context.get_remaining_time_in_millis() / 1000.0 - 0.5
            timer = threading.Timer(seconds, timeout, args=[event, context])
            timer.start()
            try:
                time.sleep(2.0)   # past the timer
            finally:
                timer.cancel()
                cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """,
    )
    body = await answer(load_folder(folder), event_for(), executor, budget=1.0)
    assert body["Status"] == "FAILED" and body["Reason"] == "about to time out"


async def test_a_put_after_the_call_ended_is_refused_and_logged(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import threading, time, urllib.request, urllib.error, cfnresponse
        late = {}
        def put_later(url):
            time.sleep(0.5)
            try:
                urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="PUT"))
            except urllib.error.HTTPError as exc:
                print("late PUT got", exc.code)
        def handler(event, context):
            threading.Thread(target=put_later, args=(event["ResponseURL"],)).start()
    """,
    )
    with capture_logs() as logs:
        body = await answer(load_folder(folder), event_for(), executor)
        for _ in range(150):
            if any(e.get("message") == "late PUT got 403" for e in logs):
                break
            await asyncio.sleep(0.02)
    assert body["Status"] == "FAILED" and "returned without sending" in body["Reason"]
    assert [e["event"] for e in logs if e["event"] == "lambda.late_send"] == ["lambda.late_send"]
    assert any(e.get("message") == "late PUT got 403" for e in logs)


async def test_a_non_string_reason_is_sent_as_text(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.FAILED, None, reason=ValueError("no such zone"))
    """,
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "no such zone"


async def test_a_function_answers_as_soon_as_it_puts_even_if_it_runs_on(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        """
        import time, cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "early")
            time.sleep(3)
    """,
    )
    started = time.monotonic()
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "early"
    assert time.monotonic() - started < 2.5


async def test_a_direct_call_without_the_daemons_context_still_runs(tmp_path):
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Ms": context.get_remaining_time_in_millis()})
    """,
    )
    result = await load_folder(folder).create(event_for())
    assert 800_000 < result["Data"]["Ms"] <= 900_000
    with pytest.raises(FunctionFailed, match="returned without sending"):
        await load(f"{FUNCTIONS}.cfnresponse_function.silent_handler").create(event_for())

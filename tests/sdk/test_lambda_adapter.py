"""cfn_provider.sdk.lambda_adapter: Lambda custom-resource functions (cfnresponse, crhelper) as handlers.

Each test answers a request the way the worker does (runner.call, then response.success, or
response.failure for what the handler raised) and reads the body CloudFormation would get.
The end-to-end runs through the real queue are in tests/integration/test_lambda_functions.py.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cfn_provider.sdk import lambda_adapter

from cfn_provider.pipeline import response as responses
from cfn_provider.pipeline.progress import InProgress, poll_function
from cfn_provider.pipeline.request import parse
from cfn_provider.pipeline.router import HandlerError, Router, parse_handler_option
from cfn_provider.pipeline.runner import Context, HandlerTimeout, call

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = "tests.support.lambda_functions"
STACK_ID = "arn:aws:cloudformation:eu-west-1:123456789012:stack/my-stack/5b8e2c10-1111-2222-3333-444455556666"
SIGNED_URL = ("https://cloudformation-custom-resource-response-euwest1.s3.eu-west-1.amazonaws.com/key"
              "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=deadbeefcafe")
_names = itertools.count()


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="handler-test")
    yield pool
    pool.shutdown(wait=True)


@pytest.fixture(autouse=True)
def _region(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # crhelper makes boto3 clients at import
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # and the adapter would set it once, for good


def event_for(kind: str = "Create", **props: Any) -> dict[str, Any]:
    doc = {
        "RequestType": kind, "ServiceToken": "arn:aws:sns:eu-west-1:123456789012:cfn-provider",
        "ResponseURL": SIGNED_URL, "StackId": STACK_ID, "RequestId": str(uuid.uuid4()),
        "LogicalResourceId": "Thing", "ResourceType": "Custom::Thing", "ResourceProperties": {"Name": "n1", **props},
    }
    if kind != "Create":
        doc["PhysicalResourceId"] = "existing-id"
    if kind == "Update":
        doc["OldResourceProperties"] = {"Name": "old"}
    return doc


def load(target: str) -> Any:
    return Router([("Custom::Thing", "lambda:" + target)], use_entry_points=False).route("Custom::Thing").handler()


def function_module(tmp_path: Path, monkeypatch, source: str) -> str:
    """Write a Lambda function module under a fresh name; returns the name."""
    name = f"lambda_fn_{next(_names)}_{uuid.uuid4().hex[:6]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


async def answer(handler: Any, doc: dict[str, Any], executor, budget: float = 30.0) -> dict[str, Any]:
    request = parse(json.dumps(doc))
    context = Context(request, time.monotonic() + budget)
    try:
        result = await call(handler, request, context, executor)
    except HandlerTimeout as exc:
        resp = responses.failure(request, str(exc))
    except Exception as exc:  # noqa: BLE001 - as the worker does
        resp = responses.failure(request, str(exc) or type(exc).__name__)
    else:
        resp = responses.success(request, result)
    return json.loads(resp.body)


# --- registration ------------------------------------------------------------------------

@pytest.mark.parametrize("target", [f"{FUNCTIONS}.cfnresponse_function.handler",
                                    f"{FUNCTIONS}.cfnresponse_function:handler",
                                    f"{FUNCTIONS.replace('.', '/')}/cfnresponse_function.handler"])
def test_lambda_target_forms_load_the_function(target):
    handler = load(target)
    assert isinstance(handler, lambda_adapter.LambdaFunction)
    from tests.support.lambda_functions import cfnresponse_function

    assert handler.function is cfnresponse_function.handler


def test_handler_option_and_config_table_accept_lambda_targets(tmp_path):
    from cfn_provider.config import load_config_file

    assert parse_handler_option("Custom::X=lambda:index.handler") == ("Custom::X", "lambda:index.handler")
    with pytest.raises(ValueError, match="lambda:MODULE.FUNCTION"):
        parse_handler_option("Custom::X=lambda:handler")
    (tmp_path / "c.toml").write_text('[handlers]\n"Custom::X" = "lambda:index.handler"\n')
    assert load_config_file(tmp_path / "c.toml")["handler"] == ["Custom::X=lambda:index.handler"]


@pytest.mark.parametrize("target, message", [
    (f"{FUNCTIONS}.cfnresponse_function.nothing", "has no attribute 'nothing'"),
    (f"{FUNCTIONS}.no_such_module.handler", "No module named"),
    (f"{FUNCTIONS}.cfnresponse_function.logger", "not a function"),
])
def test_a_bad_lambda_target_fails_at_start_up_naming_it(target, message):
    with pytest.raises(HandlerError, match=message) as info:
        load(target)
    assert "lambda:" + target in str(info.value)


def test_an_async_function_is_refused_with_the_reason(tmp_path, monkeypatch):
    name = function_module(tmp_path, monkeypatch, "async def handler(event, context):\n    pass\n")
    with pytest.raises(HandlerError, match="calls handlers synchronously"):
        load(f"{name}.handler")


def test_cfnresponse_is_not_importable_until_a_lambda_handler_is_loaded():
    """No top-level `cfnresponse` is installed: a fresh interpreter cannot import it, until the
    daemon loads a lambda: handler, and then it is the daemon's."""
    code = textwrap.dedent(f"""
        import importlib.util, sys
        assert importlib.util.find_spec("cfnresponse") is None, "a top-level cfnresponse is importable"
        from cfn_provider.pipeline.router import Router
        Router([("Custom::X", "lambda:{FUNCTIONS}.cfnresponse_function.handler")], use_entry_points=False)
        import cfnresponse
        print(cfnresponse.__name__, cfnresponse.SUCCESS, cfnresponse.FAILED)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "eu-west-1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cfn_provider.sdk.cfnresponse", "SUCCESS", "FAILED"]


# --- cfnresponse ---------------------------------------------------------------------------

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
    handler = load(f"{FUNCTIONS}.cfnresponse_function.handler")
    doc = event_for("Create")
    data = (await answer(handler, doc, executor, budget=20))["Data"]
    assert data["EventKeys"] == sorted(doc)
    assert "X-Amz-Signature" not in data["ResponseURL"] and data["ResponseURL"].startswith(SIGNED_URL.split("?")[0])
    assert 0 < data["RemainingMs"] <= 20_000
    assert data["FunctionName"] == "tests-support-lambda_functions-cfnresponse_function-handler"
    assert data["FunctionVersion"] == "$LATEST"
    assert data["FunctionArn"] == f"arn:aws:lambda:eu-west-1:123456789012:function:{data['FunctionName']}"
    assert data["LogGroup"] == f"/aws/lambda/{data['FunctionName']}"
    assert "/[$LATEST]" in data["LogStream"]
    assert data["MemoryMb"].isdigit()
    assert str(uuid.UUID(data["AwsRequestId"])) == data["AwsRequestId"]


async def test_the_event_is_a_plain_mutable_dict(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import cfnresponse
        def handler(event, context):
            event["ResourceProperties"]["Added"] = "yes"   # Lambda events are plain dicts
            event.setdefault("Extra", []).append(1)
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Type": type(event).__name__})
    """)
    body = await answer(load(f"{name}.handler"), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Type": "dict"}


async def test_no_physical_id_keeps_the_daemons_rule(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """)
    handler = load(f"{name}.handler")
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
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "first-id"
    assert body["Data"] == {"Which": "first"}
    second = [e for e in logs if e["event"] == "lambda.second_send"]
    assert len(second) == 1 and second[0]["kept"] == "SUCCESS" and second[0]["status"] == "FAILED"
    assert "Which" not in json.dumps(logs)  # Data is never logged


async def test_a_raising_function_is_failed_with_its_message(executor):
    body = await answer(load(f"{FUNCTIONS}.cfnresponse_function.raising_handler"), event_for(), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "boom: the bucket does not exist"


async def test_raising_after_sending_keeps_what_was_sent(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"A": "1"}, "sent-id")
            raise RuntimeError("after the answer")
    """)
    body = await answer(load(f"{name}.handler"), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "sent-id"


async def test_sys_exit_in_a_function_is_a_failed_answer_not_the_daemons_end(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, "import sys\ndef handler(event, context):\n    sys.exit(3)\n")
    body = await answer(load(f"{name}.handler"), event_for(), executor)
    assert body["Status"] == "FAILED" and "sys.exit(3)" in body["Reason"]


async def test_an_unknown_status_is_failed(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, "OK", {})
    """)
    body = await answer(load(f"{name}.handler"), event_for(), executor)
    assert body["Status"] == "FAILED" and "SUCCESS or FAILED" in body["Reason"]


async def test_noecho_and_the_size_guard_apply(executor):
    secret = await answer(load(f"{FUNCTIONS}.cfnresponse_function.secret_handler"), event_for(), executor)
    assert secret["Status"] == "SUCCESS" and secret["NoEcho"] is True
    assert secret["Data"]["Password"].startswith("s3cr3t-")
    big = await answer(load(f"{FUNCTIONS}.cfnresponse_function.big_handler"), event_for(), executor)
    assert big["Status"] == "FAILED" and "4096" in big["Reason"]
    assert big["PhysicalResourceId"] == "big-1"  # what it created still gets its Delete


def test_a_send_from_the_functions_own_timer_thread_is_captured(tmp_path, monkeypatch):
    """AWS's documented pattern: a threading.Timer sends FAILED just before the time runs out."""
    name = function_module(tmp_path, monkeypatch, """
        import threading, time, cfnresponse
        def timeout(event, context):
            cfnresponse.send(event, context, cfnresponse.FAILED, {}, reason="about to time out")
        def handler(event, context):
            seconds = context.get_remaining_time_in_millis() / 1000.0 - 0.5
            timer = threading.Timer(seconds, timeout, args=[event, context])
            timer.start()
            try:
                time.sleep(1.0)   # past the timer
            finally:
                timer.cancel()
                cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """)
    handler = load(f"{name}.handler")
    request = parse(json.dumps(event_for()))
    # called directly (no runner timeout): the first answer is the one the Timer thread sent
    with capture_logs() as logs, pytest.raises(lambda_adapter.FunctionFailed, match="about to time out"):
        handler.create(request.wire, Context(request, time.monotonic() + 0.6))
    assert [e["event"] for e in logs if e["event"].startswith("lambda.")] == ["lambda.sent", "lambda.second_send"]


def test_a_send_outside_any_invocation_is_logged_and_dropped():
    lambda_adapter.install()
    import cfnresponse

    with capture_logs() as logs:
        assert cfnresponse.send(event_for(), None, cfnresponse.SUCCESS, {"Secret": "x"}) is None
    assert [e["event"] for e in logs] == ["lambda.send_outside_invocation"]


async def test_one_request_of_a_module_runs_at_a_time(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import threading, time, cfnresponse
        state = {"now": 0, "peak": 0}
        lock = threading.Lock()
        def handler(event, context):
            with lock:
                state["now"] += 1; state["peak"] = max(state["peak"], state["now"])
            time.sleep(0.2)
            with lock:
                state["now"] -= 1
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Peak": state["peak"]}, event["RequestId"])
    """)
    handler = load(f"{name}.handler")
    docs = [event_for() for _ in range(3)]
    bodies = await asyncio.gather(*(answer(handler, d, executor) for d in docs))
    assert [b["PhysicalResourceId"] for b in bodies] == [d["RequestId"] for d in docs]
    assert max(b["Data"]["Peak"] for b in bodies) == 1


async def test_waiting_for_a_busy_function_respects_the_deadline(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import threading, cfnresponse
        release = threading.Event()
        def handler(event, context):
            if event["ResourceProperties"].get("Hold"):
                release.wait(30)
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
    """)
    handler = load(f"{name}.handler")
    holder = asyncio.ensure_future(answer(handler, event_for(Hold="1"), executor))
    await asyncio.sleep(0.2)
    waiting = await answer(handler, event_for(), executor, budget=0.5)
    assert waiting["Status"] == "FAILED" and ("timed out" in waiting["Reason"])
    sys.modules[name].release.set()
    assert (await holder)["Status"] == "SUCCESS"


# --- crhelper -------------------------------------------------------------------------------

CRHELPER = """
    from crhelper import CfnResource
    helper = CfnResource(json_logging={json_logging}, log_level="DEBUG")
    calls = []

    @helper.create
    def create(event, context):
        calls.append("create")
        if event["ResourceProperties"].get("Fail"):
            raise ValueError("creation refused")
        helper.Data["Out"] = event["ResourceProperties"]["Name"]
        return "crh-" + event["ResourceProperties"]["Name"]

    @helper.delete
    def delete(event, context):
        calls.append("delete")

    {extra}

    def handler(event, context):
        helper(event, context)
"""


def crhelper_module(tmp_path, monkeypatch, extra: str = "", json_logging: bool = False) -> str:
    source = textwrap.dedent(CRHELPER).format(extra=textwrap.dedent(extra), json_logging=json_logging)
    return function_module(tmp_path, monkeypatch, source)


async def test_crhelper_answers_through_the_daemon(tmp_path, monkeypatch, executor):
    name = crhelper_module(tmp_path, monkeypatch)
    handler = load(f"{name}.handler")
    body = await answer(handler, event_for(Name="x"), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "crh-x" and body["Data"] == {"Out": "x"}
    failed = await answer(handler, event_for(Fail="1"), executor)
    assert failed["Status"] == "FAILED" and failed["Reason"] == "creation refused"


async def test_crhelper_delete_does_not_wait_for_cloudwatch_logs(tmp_path, monkeypatch, executor):
    """crhelper sleeps up to sleep_on_delete (120 s) on Delete for CloudWatch Logs; not here."""
    name = crhelper_module(tmp_path, monkeypatch)
    started = time.monotonic()
    body = await answer(load(f"{name}.handler"), event_for("Delete"), executor, budget=3000)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "existing-id"
    assert time.monotonic() - started < 100


async def test_crhelper_polling_maps_onto_in_progress_and_the_poll_functions(tmp_path, monkeypatch, executor):
    """crhelper's first call becomes InProgress (helper.Data and the id under CrHelperData, after
    polling_interval minutes); a poll that returns None is InProgress again, one that returns an
    id is SUCCESS with helper.Data; no CloudWatch Events rule or Lambda permission is touched."""
    name = crhelper_module(tmp_path, monkeypatch, extra="""
        @helper.poll_create
        def poll_create(event, context):
            calls.append(("poll", event.get("CrHelperPoll"), dict(event["CrHelperData"])))
            if len(calls) < 3:
                return None
            helper.Data["Polled"] = len(calls) - 1
            return event["CrHelperData"]["PhysicalResourceId"] + "-done"
    """)
    handler = load(f"{name}.handler")
    module = sys.modules[name]
    module.helper._polling_interval = 0.5  # minutes, as CfnResource(polling_interval=0.5) sets it
    rule_calls: list[str] = []
    for attr in ("_put_rule", "_add_permission", "_put_targets", "_remove_targets", "_remove_permission",
                 "_delete_rule"):
        monkeypatch.setattr(module.helper, attr, lambda *a, _n=attr: rule_calls.append(_n))
    event = event_for(Name="x")
    request = parse(json.dumps(event))
    pending = await call(handler, request, Context(request, time.monotonic() + 30), executor)
    assert isinstance(pending, InProgress)
    assert pending.progress == {"CrHelperData": {"Out": "x", "PhysicalResourceId": "crh-x"}}
    assert pending.physical_id == "crh-x" and pending.after == 30.0
    assert poll_function(handler, "Create") == handler.poll_create

    async def poll(progress: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            executor, handler.poll_create, request.wire, Context(request, time.monotonic() + 30), progress)

    again = await poll(pending.progress)
    assert isinstance(again, InProgress) and again.progress == pending.progress and again.physical_id is None
    done = await poll(again.progress)
    assert done == {"PhysicalResourceId": "crh-x-done", "Data": {"Out": "x", "Polled": 2}}
    assert module.calls == ["create", ("poll", True, {"Out": "x", "PhysicalResourceId": "crh-x"}),
                            ("poll", True, {"Out": "x", "PhysicalResourceId": "crh-x"})]
    assert rule_calls == []
    delete = await answer(handler, event_for("Delete"), executor)  # no poll_delete: answered at once
    assert delete["Status"] == "SUCCESS" and module.calls[-1] == "delete"


async def test_a_raising_crhelper_poll_is_failed_with_its_message(tmp_path, monkeypatch, executor):
    name = crhelper_module(tmp_path, monkeypatch, extra="""
        @helper.poll_create
        def poll_create(event, context):
            raise RuntimeError("the snapshot failed")
    """)
    handler = load(f"{name}.handler")
    request = parse(json.dumps(event_for(Name="y")))
    pending = handler.create(request.wire, Context(request, time.monotonic() + 30))
    assert isinstance(pending, InProgress)
    with pytest.raises(lambda_adapter.FunctionFailed, match="^the snapshot failed$"):
        handler.poll_create(request.wire, Context(request, time.monotonic() + 30), pending.progress)


@pytest.mark.parametrize("json_logging", [False, True])
def test_crhelper_leaves_the_daemons_logging_alone(tmp_path, monkeypatch, json_logging):
    root = logging.getLogger()
    saved = root.level
    root.setLevel(logging.WARNING)  # crhelper would set DEBUG
    try:
        before = (root.level, [h.formatter for h in root.handlers])
        load(f"{crhelper_module(tmp_path, monkeypatch, json_logging=json_logging)}.handler")
        assert (root.level, [h.formatter for h in root.handlers]) == before
    finally:
        root.setLevel(saved)


async def test_a_crhelper_timeout_sent_from_its_timer_thread_is_captured(tmp_path, monkeypatch, executor):
    name = function_module(tmp_path, monkeypatch, """
        import time
        from crhelper import CfnResource
        helper = CfnResource()

        @helper.create
        def create(event, context):
            time.sleep(1.0)   # past crhelper's own timer (remaining - 0.5 s)

        def handler(event, context):
            helper(event, context)
    """)
    handler = load(f"{name}.handler")
    doc = event_for()
    request = parse(json.dumps(doc))
    # called directly (no runner timeout): the answer is what crhelper's Timer thread sent
    with pytest.raises(lambda_adapter.FunctionFailed, match="Execution timed out"):
        handler.create(request.wire, Context(request, time.monotonic() + 0.6))


async def test_a_non_string_reason_is_sent_as_text(tmp_path, monkeypatch, executor):
    """AWS's module would fail to encode it and leave the stack waiting; here it becomes the Reason."""
    name = function_module(tmp_path, monkeypatch, """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.FAILED, None, reason=ValueError("no such zone"))
    """)
    body = await answer(load(f"{name}.handler"), event_for(), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "no such zone"


def test_a_crhelper_without_the_known_send_path_stops_the_start(tmp_path):
    """A crhelper whose internals moved would PUT answers itself (and retry for ever): refuse it."""
    fake = tmp_path / "crhelper"
    fake.mkdir()
    (fake / "__init__.py").write_text("from crhelper.resource_helper import CfnResource\n")
    (fake / "utils.py").write_text("def _send_response(url, body, ssl_verify=None):\n    raise AssertionError('PUT')\n")
    (fake / "log_helper.py").write_text("def setup(*a, **k):\n    pass\n")
    (fake / "resource_helper.py").write_text(textwrap.dedent("""
        from crhelper import log_helper
        def put(url, body, ssl_verify=None):
            pass
        class CfnResource:
            def _send(self, status=None, reason="", send_response=put):   # not utils._send_response
                pass
            def _crhelper_init(self, event, context):
                pass
            def _wait_for_cwlogs(self, sleep=None):
                pass
    """))
    code = f"""
from cfn_provider.pipeline.router import Router, HandlerError
try:
    Router([("Custom::X", "lambda:{FUNCTIONS}.cfnresponse_function.handler")], use_entry_points=False)
except HandlerError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert "its send path is not the one cfn-provider intercepts" in out.stdout, out.stderr
    assert "crhelper==2.0.12" in out.stdout

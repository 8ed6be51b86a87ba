"""`fc:` functions (Alibaba Function Compute's), served unchanged over the ROS transports: an FC
function written as Alibaba's samples are (tests/support/fc_functions/index.py: bytes event,
json.loads, an initializer, urllib POST with a Date header) answers through the real MNS path
(the local MNS server -> daemon -> function process -> loopback capture -> the ROS response
endpoint) and through the HTTPS web listener, async and sync. Its credentials are only those
configured; its lines are in the daemon's log in FC's format with its request id; a crash fails
only its own request; on the CloudFormation transport an fc: target does not start."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from cfn_provider import cli
from cfn_provider.config import Settings
from cfn_provider.functions.fc_target import FcOnCloudFormation
from cfn_provider.functions.host import close_for_loop
from cfn_provider.functions.settings import parse_options
from cfn_provider.pipeline.router import HandlerError, Router
from cfn_provider.service import Service
from tests.dialects import conftest as ros_fixtures
from tests.dialects.conftest import JsonLog, ros_request
from tests.dialects.test_ros_service import answer, send, settled
from tests.intake import conftest as web_fixtures
from tests.support.cli import assert_not_started
from tests.support.functions import answer as answer_with
from tests.support.functions import write_function
from tests.support.mns_server import MnsServer
from tests.support.stub_s3 import StubS3
from tests.support.web import post, posted

mns, mns_env, ros_daemon, json_log = (
    ros_fixtures.mns,
    ros_fixtures.mns_env,
    ros_fixtures.ros_daemon,
    ros_fixtures.json_log,
)
ca, https, token_file, web_daemon = (
    web_fixtures.ca,
    web_fixtures.https,
    web_fixtures.token_file,
    web_fixtures.web_daemon,
)
pytestmark = pytest.mark.slow  # daemons and function processes: seconds each

CODE = Path(__file__).resolve().parents[1] / "support" / "fc_functions"
FC = "Custom::Fc"
CONFIGURED = {
    "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIfunctionsown",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "function-secret-0123456789",
    "ALIBABA_CLOUD_SECURITY_TOKEN": "function-token-abcdef",
}


def fc_settings(*extra: str, concurrency: int = 1) -> dict[str, Any]:
    """The daemon's settings serving FC = fc:index.handler with its initializer and credentials."""
    values = [
        f"{FC}=code={CODE}",
        f"{FC}=initializer=index.initializer",
        f"{FC}=concurrency={concurrency}",
        f"{FC}=env.FC_SERVICE_NAME=ros-functions",
        *(f"{FC}=env.{k}={v}" for k, v in CONFIGURED.items()),
        *extra,
    ]
    return {"handlers": ((FC, "fc:index.handler"),), "functions": parse_options(values)}


@pytest.fixture
def daemon_secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The daemon's own credentials and settings, which no function may see."""
    own = {
        "AWS_ACCESS_KEY_ID": "AKIADAEMONSOWN",
        "AWS_SECRET_ACCESS_KEY": "daemon-aws-secret",
        "CFN_PROVIDER_WEB_TOKEN": "daemon-web-token",
    }
    for name, value in own.items():
        monkeypatch.setenv(name, value)
    return own


async def test_an_fc_function_answers_create_update_delete_through_mns(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, daemon_secrets: dict[str, str]
):
    await ros_daemon(**fc_settings())
    create = ros_request("Create", stub_s3.url("fc/create"), rtype=FC, props={"Name": "one"})
    send(mns_env, create)
    created = json.loads((await answer(stub_s3, "fc/create")).body)
    assert created["Status"] == "SUCCESS" and created["PhysicalResourceId"] == "fc-one", created
    data = created["Data"]
    assert data["Initialized"] == 1 and data["Initializer"] == "index.initializer"
    assert (data["Function"], data["Handler"], data["Service"]) == ("Custom-Fc", "index.handler", "ros-functions")
    assert (data["Region"], data["AccountId"]) == (create["RegionId"], create["ResourceOwnerId"])
    assert data["RequestId"] != create["RequestId"] and 0 < data["Timeout"] <= 60  # FC's own id; ROS's Timeout
    # both URLs it was handed are the daemon's loopback capture: the real ones never reached it
    assert data["UrlHosts"] == [data["UrlHosts"][0]] and data["UrlHosts"][0].startswith("127.0.0.1:")
    assert data["UrlHosts"][0] != urlsplit(stub_s3.base_url).netloc  # not ROS's endpoint (also on loopback here)

    update = ros_request(
        "Update",
        stub_s3.url("fc/update"),
        rtype=FC,
        stack_id=create["StackId"],
        physical_id="fc-one",
        props={"Name": "one", "Intranet": "yes"},  # it POSTs to IntranetResponseURL this time
        old_props={"Name": "one"},
    )
    send(mns_env, update, "base64")
    updated = json.loads((await answer(stub_s3, "fc/update")).body)
    assert (updated["Status"], updated["PhysicalResourceId"]) == ("SUCCESS", "fc-one")
    assert updated["Data"]["Initialized"] == 1  # once per process: the same warm process

    delete = ros_request("Delete", stub_s3.url("fc/delete"), rtype=FC, stack_id=create["StackId"], physical_id="fc-one")
    send(mns_env, delete, "json")
    deleted = json.loads((await answer(stub_s3, "fc/delete")).body)
    assert (deleted["Status"], deleted["PhysicalResourceId"]) == ("SUCCESS", "fc-one")
    await settled(mns_env)


async def test_its_credentials_are_only_those_configured(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, daemon_secrets: dict[str, str]
):
    await ros_daemon(**fc_settings())
    send(mns_env, ros_request("Create", stub_s3.url("fc/creds"), rtype=FC))
    data = json.loads((await answer(stub_s3, "fc/creds")).body)["Data"]
    assert (data["AccessKeyId"], data["AccessKeySecret"], data["SecurityToken"]) == tuple(CONFIGURED.values())
    assert data["EnvAccessKeyId"] == CONFIGURED["ALIBABA_CLOUD_ACCESS_KEY_ID"]  # FC 3.0's variables, the same
    env = set(data["Environment"])
    assert not {n for n in env if n.startswith(("AWS_", "CFN_PROVIDER_", "PYTHON"))}, env
    assert {n for n in env if n.startswith("ALIBABA_CLOUD_")} == set(CONFIGURED)
    assert mns_env.env()["ALIBABA_CLOUD_ACCESS_KEY_ID"] not in json.dumps(data)  # the daemon's MNS key: not its


async def test_without_configured_credentials_it_has_none(ros_daemon, mns_env: MnsServer, stub_s3: StubS3):
    await ros_daemon(
        handlers=((FC, "fc:index.handler"),), functions=parse_options([f"{FC}=code={CODE}"])
    )  # the daemon has the MNS account's keys in its environment (mns_env)
    send(mns_env, ros_request("Create", stub_s3.url("fc/none"), rtype=FC))
    data = json.loads((await answer(stub_s3, "fc/none")).body)["Data"]
    assert (data["AccessKeyId"], data["AccessKeySecret"], data["SecurityToken"], data["EnvAccessKeyId"]) == ("",) * 4
    assert data["Initialized"] == 0 and data["Initializer"] == ""  # none configured: none run


async def test_its_log_lines_are_in_the_daemons_log_in_fcs_format(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog
):
    await ros_daemon(**fc_settings())
    create = ros_request("Create", stub_s3.url("fc/logs"), rtype=FC, logical="Logged")
    send(mns_env, create)
    fc_id = json.loads((await answer(stub_s3, "fc/logs")).body)["Data"]["RequestId"]
    await settled(mns_env)
    for _ in range(200):  # the call's last line comes after its answer
        if f"FC Invoke End RequestId: {fc_id}" in json_log.text:
            break
        await asyncio.sleep(0.05)
    lines = [e for e in json_log.events(function="Custom-Fc") if e["event"] in ("function.log", "function.output")]
    mine = [e for e in lines if e.get("request_id") == create["RequestId"]]
    assert mine and all(e["fc_request_id"] == fc_id and e["logical_id"] == "Logged" for e in mine)
    messages = [e["message"] for e in mine]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert any(re.fullmatch(rf"{stamp} {fc_id} \[INFO\] handling Create Logged", m) for m in messages), messages
    assert any(re.fullmatch(rf"{stamp} {fc_id} \[INFO\] initializing Custom-Fc", m) for m in messages), messages
    for phase in ("Initialize Start", "Initialize End", "Invoke Start", "Invoke End"):
        assert f"FC {phase} RequestId: {fc_id}" in messages, messages
    assert any(re.fullmatch(rf"{stamp} {fc_id} \[INFO\] notify result: 200 ", m) for m in messages), messages
    for secret in CONFIGURED.values():
        assert secret not in json_log.text  # the function's credentials are never in the daemon's log


async def test_a_crash_fails_only_its_own_request(ros_daemon, mns_env: MnsServer, stub_s3: StubS3):
    await ros_daemon(**fc_settings(concurrency=2))
    crash = ros_request("Create", stub_s3.url("fc/crash"), rtype=FC, logical="Crashing", props={"Crash": "yes"})
    fine = ros_request("Create", stub_s3.url("fc/fine"), rtype=FC, logical="Fine")
    send(mns_env, crash)
    send(mns_env, fine)
    crashed = json.loads((await answer(stub_s3, "fc/crash")).body)
    assert crashed["Status"] == "FAILED", crashed
    assert "the Function Compute function Custom-Fc ended before it answered" in crashed["Reason"]
    assert "exited with status 3" in crashed["Reason"]
    assert json.loads((await answer(stub_s3, "fc/fine")).body)["Status"] == "SUCCESS"
    after = ros_request("Create", stub_s3.url("fc/after"), rtype=FC, logical="After")
    send(mns_env, after)
    answered = json.loads((await answer(stub_s3, "fc/after")).body)
    assert answered["Status"] == "SUCCESS" and answered["Data"]["Initialized"] == 1  # a new process, initialized
    raised = ros_request("Create", stub_s3.url("fc/raised"), rtype=FC, logical="Raising", props={"Raise": "yes"})
    send(mns_env, raised)
    failed = json.loads((await answer(stub_s3, "fc/raised")).body)
    assert failed["Status"] == "FAILED" and failed["Reason"] == "the function raised"
    await settled(mns_env)


async def test_an_fc_function_answers_through_the_web_listener_async_and_sync(web_daemon, https, stub_s3: StubS3):
    d = await web_daemon(**fc_settings())
    req = ros_request("Create", stub_s3.url("fc/web-async"), rtype=FC, props={"Name": "web"})
    status, _, _ = await post(https, d.url("async"), req)
    assert status == 200
    doc = json.loads((await posted(stub_s3, "fc/web-async")).body)
    assert doc["Status"] == "SUCCESS" and doc["PhysicalResourceId"] == "fc-web" and doc["Data"]["Initialized"] == 1

    sync = ros_request("Create", stub_s3.url("fc/web-sync"), rtype=FC, props={"Name": "sync", "Intranet": "yes"})
    status, headers, body = await post(https, d.url("sync"), sync)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    answered = json.loads(body)
    assert answered["Status"] == "SUCCESS" and answered["PhysicalResourceId"] == "fc-sync"
    assert answered["RequestId"] == sync["RequestId"] and answered["Data"]["Service"] == "ros-functions"
    assert not stub_s3.requests_for("fc/web-sync", "POST")  # a sync answer goes nowhere else


def test_an_fc_target_on_the_cloudformation_transport_is_refused_at_start(monkeypatch):
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)  # the test's logging stays as it is
    result = CliRunner().invoke(
        cli.main, ["run", "--queue-url", "https://sqs.example/q", "--handler", f"{FC}=fc:index.handler"]
    )
    assert_not_started(result, f"--handler {FC}=fc:index.handler", "Function Compute", "--transport mns or web")


def test_the_service_refuses_it_before_loading_anything(tmp_path):
    settings = Settings(
        queue_url="https://sqs.example/q",
        handlers=((FC, "fc:no_such_module.handler"), ("Custom::L", "lambda:index.handler")),
        state=f"sqlite://{tmp_path}/state.db",
    )
    with pytest.raises(FcOnCloudFormation, match="the sqs transport is CloudFormation's"):
        Service(settings)


FLAKY_INITIALIZER = """
import json, os, time
from urllib.request import Request, urlopen
def initializer(context):
    marker = os.path.join(os.environ["FC_FUNC_CODE_PATH"], "tried")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("the database is not up yet")
def handler(event, context):
    event = json.loads(event)
    body = {"Status": "SUCCESS", "PhysicalResourceId": "once", "RequestId": event["RequestId"]}
    headers = {"Content-type": "application/json", "Date": time.strftime("%a, %d %b %Y %X GMT", time.gmtime())}
    urlopen(Request(event["ResponseURL"], data=json.dumps(body).encode(), headers=headers), timeout=20).read()
"""


async def test_a_failed_initializer_fails_that_call_and_runs_again_on_the_next(tmp_path, executor):
    folder = write_function(tmp_path / "flaky", FLAKY_INITIALIZER)
    handler = load_fc(f"{FC}=code={folder}", f"{FC}=initializer=index.initializer")
    try:
        first = await answer_with(handler, ros_request("Create", "https://ros.example/r?sig=1", rtype=FC), executor)
        assert first["Status"] == "FAILED"
        assert first["Reason"] == "the initializer failed: the database is not up yet"
        second = await answer_with(handler, ros_request("Create", "https://ros.example/r?sig=2", rtype=FC), executor)
        assert (second["Status"], second["PhysicalResourceId"]) == ("SUCCESS", "once")
    finally:
        await close_for_loop()


def test_a_missing_initializer_stops_the_start(tmp_path):
    folder = write_function(tmp_path / "fn", FLAKY_INITIALIZER)
    with pytest.raises(HandlerError, match=r"fc:index.handler.*failed to load.*has no attribute 'initialise'"):
        load_fc(f"{FC}=code={folder}", f"{FC}=initializer=index.initialise")


def load_fc(*settings: str) -> Any:
    """The handler the daemon serves for FC = fc:index.handler with `TYPE=SETTING=VALUE` settings."""
    router = Router([(FC, "fc:index.handler")], use_entry_points=False, functions=parse_options(settings))
    route = router.route(FC)
    assert route is not None
    return route.handler()

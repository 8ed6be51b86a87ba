"""cfn_provider.functions: each function runs as Lambda runs it, in an execution environment of its own.

Its own module namespace (its folder first on its path), its own environment variables, its own
logging (captured into the daemon's log, never changing the daemon's), its limits (the deadline
kills a hung call, a memory limit, a crash fails only that request) and its own concurrency.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cfn_provider.functions import confine
from cfn_provider.functions.settings import parse_options
from cfn_provider.local.emulator import REGION
from cfn_provider.pipeline.router import HandlerError
from cfn_provider.progress import InProgress
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS
from tests.support.functions import REPO, answer, event_for, load_folder, raw_call, write_function

SEND = """
import json, urllib.request
def put(event, status, data=None, physical_id=None, reason=None):
    body = json.dumps({"Status": status, "Reason": reason, "PhysicalResourceId": physical_id,
                       "StackId": event["StackId"], "RequestId": event["RequestId"],
                       "LogicalResourceId": event["LogicalResourceId"], "Data": data or {}}).encode()
    urllib.request.urlopen(urllib.request.Request(event["ResponseURL"], data=body, method="PUT"))
"""


@pytest.fixture(autouse=True)
def _started(host):
    """Every test here calls functions through a started host."""


# --- module namespaces -----------------------------------------------------------------------


async def test_two_index_handler_functions_side_by_side(tmp_path, executor):
    for which in ("a", "b"):
        write_function(
            tmp_path / which,
            f"""
            import cfnresponse, helpers
            def handler(event, context):
                cfnresponse.send(event, context, cfnresponse.SUCCESS, {{"Which": helpers.WHICH}}, "{which}-1")
        """,
            files={"helpers.py": f"WHICH = {which!r}\n"},
        )
    first = load_folder(tmp_path / "a", "index.handler", "Custom::A")
    second = load_folder(tmp_path / "b", "index.handler", "Custom::B")
    bodies = await asyncio.gather(
        answer(first, event_for(rtype="Custom::A"), executor), answer(second, event_for(rtype="Custom::B"), executor)
    )
    assert [(b["PhysicalResourceId"], b["Data"]["Which"]) for b in bodies] == [("a-1", "a"), ("b-1", "b")]


async def test_a_function_module_named_resource_works(tmp_path, executor):
    """AWS's S3Objects example is `resource.handler`: the standard `resource` module must not hide it."""
    folder = write_function(
        tmp_path / "fn",
        SEND
        + """
def handler(event, context):
    put(event, "SUCCESS", {"Module": __name__}, "objects-1")
""",
        module="resource",
    )
    body = await answer(
        load_folder(folder, "resource.handler", "Custom::Thing", "memory_mb=256"), event_for(), executor
    )
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Module": "resource"}


def test_a_module_that_shadows_a_standard_module_already_loaded_is_refused_by_name(tmp_path):
    folder = write_function(
        tmp_path / "fn",
        "import json\ndef handler(event, context):\n    pass\n",
        files={"json.py": "X = 1\n", "logging/__init__.py": ""},
    )
    with pytest.raises(HandlerError, match=r"json\.py, logging\.py in .* shadow the standard modules json, logging"):
        load_folder(folder)


async def test_a_function_may_bring_its_own_typing_module(tmp_path, executor):
    """The runtime, crhelper's hooks and the stock cfnresponse load no `typing` before the function
    (their annotations are for mypy alone), so a function that vendors the old `typing` backport
    (typing.py in its zip) is served with its own copy instead of being refused for shadowing it."""
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse, typing
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Typing": getattr(typing, "MARK", "stdlib")}, "t-1")
    """,
        files={"typing.py": "MARK = 'vendored'\n"},
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Typing": "vendored"}, body


async def test_a_renamed_copy_of_cfnresponse_answers_through_its_own_put(tmp_path, executor):
    """AWS's macro examples ship cfnresponse as custom_response.py; whatever PUTs is the answer."""
    folder = write_function(
        tmp_path / "fn",
        """
        import custom_response
        def handler(event, context):
            custom_response.send(event, context, custom_response.SUCCESS, {"Macro": "ok"}, "macro-1")
    """,
        files={
            "custom_response.py": """
        import json, urllib.request
        SUCCESS, FAILED = "SUCCESS", "FAILED"
        def send(event, context, responseStatus, responseData, physicalResourceId=None):
            body = json.dumps({"Status": responseStatus, "Reason": "see " + context.log_stream_name,
                               "PhysicalResourceId": physicalResourceId or context.log_stream_name,
                               "StackId": event["StackId"], "RequestId": event["RequestId"],
                               "LogicalResourceId": event["LogicalResourceId"], "Data": responseData}).encode()
            req = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                         headers={"content-type": "", "content-length": str(len(body))})
            print("Status code:", urllib.request.urlopen(req).reason)
    """
        },
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "macro-1" and body["Data"] == {"Macro": "ok"}


async def test_a_packaged_cfnresponse_is_used_as_it_is(tmp_path, executor):
    """AWS's ACM quick start ships a cfnresponse whose send takes the reason 6th: it is not replaced."""
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.FAILED, {}, None, "certificate validation failed")
    """,
        files={
            "cfnresponse.py": """
        import json, urllib.request
        SUCCESS, FAILED = "SUCCESS", "FAILED"
        def send(event, context, responseStatus, responseData, physicalResourceId, reason=None):
            body = json.dumps({"Status": responseStatus, "Reason": reason, "PhysicalResourceId": physicalResourceId
                               or context.log_stream_name, "StackId": event["StackId"], "RequestId": event["RequestId"],
                               "LogicalResourceId": event["LogicalResourceId"], "Data": responseData}).encode()
            urllib.request.urlopen(urllib.request.Request(event["ResponseURL"], data=body, method="PUT"))
    """
        },
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "FAILED" and body["Reason"] == "certificate validation failed"
    assert "NoEcho" not in body


async def test_a_function_answering_with_requests_is_heard(tmp_path, executor):
    pytest.importorskip("requests")
    folder = write_function(
        tmp_path / "fn",
        """
        import json, requests
        def handler(event, context):
            body = {"Status": "SUCCESS", "PhysicalResourceId": "rq-1", "StackId": event["StackId"],
                    "RequestId": event["RequestId"], "LogicalResourceId": event["LogicalResourceId"]}
            requests.put(event["ResponseURL"], data=json.dumps(body), headers={"content-type": ""}, timeout=10)
    """,
    )
    body = await answer(load_folder(folder), event_for(), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "rq-1"


# --- environment ------------------------------------------------------------------------------


async def test_a_function_reads_its_own_environment_and_lambdas(tmp_path, executor, monkeypatch):
    monkeypatch.setenv("CFN_PROVIDER_QUEUE_URL", "https://sqs.example/daemon-only")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "daemon-secret-value")
    folder = write_function(
        tmp_path / "fn",
        SEND
        + """
import os
def handler(event, context):
    keys = ("TABLE_NAME", "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_REGION",
            "AWS_LAMBDA_LOG_GROUP_NAME", "LAMBDA_TASK_ROOT", "_HANDLER", "CFN_PROVIDER_QUEUE_URL",
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "AWS_LAMBDA_LOG_STREAM_NAME")
    put(event, "SUCCESS", {k: os.environ.get(k) for k in keys} | {"Stream": context.log_stream_name,
                                                                    "Cwd": os.getcwd()})
""",
    )
    handler = load_folder(
        folder,
        "index.handler",
        "Custom::Thing",
        "env.TABLE_NAME=things",
        "memory_mb=256",
        "name=thing",
        "log_group=/cfn-provider/thing",
    )
    data = (await answer(handler, event_for(), executor))["Data"]
    assert data["TABLE_NAME"] == "things" and data["AWS_LAMBDA_FUNCTION_NAME"] == "thing"
    assert data["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256" and data["AWS_REGION"] == "eu-west-1"
    assert data["AWS_LAMBDA_LOG_GROUP_NAME"] == "/cfn-provider/thing" and data["_HANDLER"] == "index.handler"
    assert data["LAMBDA_TASK_ROOT"] == data["Cwd"] == str(folder)
    assert data["AWS_LAMBDA_LOG_STREAM_NAME"] == data["Stream"]
    assert data["CFN_PROVIDER_QUEUE_URL"] is None and data["ALIBABA_CLOUD_ACCESS_KEY_SECRET"] is None


# --- logging ---------------------------------------------------------------------------------


async def test_a_functions_logging_is_its_own_and_captured_line_by_line(tmp_path, executor):
    folder = write_function(
        tmp_path / "fn",
        SEND
        + """
import logging, os, sys
logging.getLogger().setLevel(logging.DEBUG)   # the Lambda idiom: the function's root logger
logging.getLogger("botocore").setLevel(logging.CRITICAL)
def handler(event, context):
    logging.getLogger("fn").debug("debugging %s", event["RequestType"])
    logging.getLogger().warning("careful")
    print("printed")
    sys.stderr.write("to stderr\\n")
    os.write(1, b"straight to fd 1\\n")
    put(event, "SUCCESS")
""",
    )
    root = logging.getLogger()
    before = (root.level, list(root.handlers), logging.getLogger("botocore").level)
    doc = event_for()
    with capture_logs() as logs:
        body = await answer(load_folder(folder), doc, executor)
        for _ in range(100):
            if any(e.get("message") == "straight to fd 1" for e in logs):
                break
            await asyncio.sleep(0.02)
    assert body["Status"] == "SUCCESS"
    assert (root.level, list(root.handlers), logging.getLogger("botocore").level) == before
    lines = [e for e in logs if e.get("function") == "Custom-Thing"]
    by_message = {e["message"]: e for e in lines if "message" in e}
    assert by_message["debugging Create"]["log_level"] == "debug"
    assert by_message["debugging Create"]["function_logger"] == "fn"
    assert by_message["careful"]["log_level"] == "warning"
    assert by_message["printed"]["event"] == "function.output"
    assert by_message["to stderr"]["stream"] == "stderr"
    assert "straight to fd 1" in by_message
    for line in (by_message[m] for m in ("debugging Create", "careful", "printed", "to stderr")):
        assert line["request_id"] == doc["RequestId"] and line["logical_id"] == "Thing" and line["aws_request_id"]


async def test_noecho_data_a_function_prints_never_reaches_the_log(tmp_path, executor):
    """AWS's cfnresponse prints the body (with its Data) before it PUTs it."""
    folder = write_function(
        tmp_path / "fn",
        SEND.replace('"Data": data or {}', '"Data": data or {}, "NoEcho": True')
        + """
import json
def handler(event, context):
    secret = "pw-" + event["RequestId"]
    print("Response body:", json.dumps({"Data": {"Password": secret}}))
    put(event, "SUCCESS", {"Password": secret}, "secret-1")
    print("after:", secret)
""",
    )
    doc = event_for()
    with capture_logs() as logs:
        body = await answer(load_folder(folder), doc, executor)
        for _ in range(100):
            if any(str(e.get("message", "")).startswith("after:") for e in logs):
                break
            await asyncio.sleep(0.02)
    assert body["NoEcho"] is True and body["Data"]["Password"] == "pw-" + doc["RequestId"]
    printed = [e["message"] for e in logs if e.get("event") == "function.output"]
    assert any(m.startswith("Response body:") for m in printed) and "after: <redacted>" in printed
    assert "pw-" + doc["RequestId"] not in json.dumps(logs)


# --- limits ----------------------------------------------------------------------------------

CRASHES = (
    SEND
    + """
import os, signal, time
def handler(event, context):
    how = event["ResourceProperties"].get("Crash")
    if how == "exit":
        os._exit(7)
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "memory":
        hoard = [bytearray(32 * 1024 * 1024) for _ in range(64)]
    if how == "hang":
        while True:
            time.sleep(0.05)
    put(event, "SUCCESS", {"Pid": os.getpid()}, "fine")
"""
)


@pytest.mark.parametrize(
    "crash, reason",
    [
        ("exit", "its process exited with status 7"),
        ("segfault", "its process was ended by SIGSEGV"),
        ("memory", "ran out of memory (memory_mb = 128): MemoryError"),
    ],
)
async def test_a_crash_fails_only_that_request_and_the_process_is_replaced(tmp_path, executor, crash, reason):
    handler = load_folder(write_function(tmp_path / "fn", CRASHES), "index.handler", "Custom::Thing", "memory_mb=128")
    before = (await answer(handler, event_for(), executor))["Data"]["Pid"]
    crashed = await answer(handler, event_for(Crash=crash), executor)
    assert crashed["Status"] == "FAILED" and reason in crashed["Reason"], crashed["Reason"]
    after = await answer(handler, event_for(), executor)
    assert after["Status"] == "SUCCESS" and after["Data"]["Pid"] != before


async def test_the_deadline_kills_a_hung_call_and_a_fresh_process_serves_the_next(tmp_path, executor):
    handler = load_folder(write_function(tmp_path / "fn", CRASHES))
    before = (await answer(handler, event_for(), executor))["Data"]["Pid"]
    started = time.monotonic()
    hung = await answer(handler, event_for(Crash="hang"), executor, budget=1.0)
    assert hung["Status"] == "FAILED" and "timed out" in hung["Reason"] and time.monotonic() - started < 3
    after = await answer(handler, event_for(), executor)
    assert after["Status"] == "SUCCESS" and after["Data"]["Pid"] != before
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)


async def test_calls_of_one_function_never_overlap_beyond_its_concurrency(tmp_path, executor):
    source = (
        SEND
        + """
import os, time
def handler(event, context):
    time.sleep(0.3)
    put(event, "SUCCESS", {"Pid": os.getpid(), "Start": time.time()}, event["RequestId"])
"""
    )
    for concurrency in (1, 2):
        handler = load_folder(
            write_function(tmp_path / f"c{concurrency}", source),
            "index.handler",
            f"Custom::C{concurrency}",
            f"concurrency={concurrency}",
        )
        bodies = await asyncio.gather(
            *(answer(handler, event_for(rtype=f"Custom::C{concurrency}"), executor) for _ in range(2))
        )
        assert all(b["Status"] == "SUCCESS" for b in bodies)
        pids = {b["Data"]["Pid"] for b in bodies}
        gap = abs(bodies[0]["Data"]["Start"] - bodies[1]["Data"]["Start"])
        assert (len(pids), gap >= 0.25) == ((1, True) if concurrency == 1 else (2, False))


async def test_a_hung_function_cannot_starve_another(tmp_path, executor):
    """Calls beyond a busy function's concurrency (and as many waiting) go to the poll scheduler
    (InProgress, queued): they hold no slot; another function answers at once."""
    hung = load_folder(write_function(tmp_path / "hung", CRASHES), "index.handler", "Custom::Hung")
    other = load_folder(write_function(tmp_path / "other", CRASHES), "index.handler", "Custom::Other")
    running = asyncio.ensure_future(raw_call(hung, event_for(rtype="Custom::Hung", Crash="hang"), executor, 20))
    await asyncio.sleep(0.5)
    waiting = asyncio.ensure_future(raw_call(hung, event_for(rtype="Custom::Hung"), executor, 20))
    await asyncio.sleep(0.2)
    queued = await raw_call(hung, event_for(rtype="Custom::Hung"), executor, 20)
    assert isinstance(queued, InProgress) and queued.progress == {"Queued": 1}
    started = time.monotonic()
    assert (await answer(other, event_for(rtype="Custom::Other"), executor))["Status"] == "SUCCESS"
    assert time.monotonic() - started < 2
    assert not running.done() and not waiting.done()
    again = await raw_call(hung, event_for(rtype="Custom::Hung"), executor, 20, progress={"Queued": 1})
    assert isinstance(again, InProgress) and again.progress == {"Queued": 2} and again.after == 3.0
    for task in (running, waiting):
        task.cancel()
    await asyncio.gather(running, waiting, return_exceptions=True)


def test_the_functions_processes_end_when_the_daemon_is_killed(tmp_path):
    folder = write_function(tmp_path / "fn", CRASHES)
    code = textwrap.dedent(f"""
        import asyncio, os, sys
        from cfn_provider.functions.host import FunctionHost
        from cfn_provider.functions.target import load
        from cfn_provider.functions.settings import parse_options
        fn = load("lambda:index.handler", "Custom::X", parse_options(["Custom::X=code={folder}"])["Custom::X"])
        async def main():
            host = await FunctionHost().start()
            await host.warm([fn])
            print(*(p.proc.pid for p in host.pool(fn).everyone), flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
    """)
    daemon = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        worker = int(daemon.stdout.readline())
        os.kill(worker, 0)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
        for _ in range(100):
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the function's process outlived the killed daemon")
    finally:
        daemon.kill()
        daemon.wait(10)


def test_functions_work_under_memory_deny_write_execute(tmp_path):
    """The systemd unit's MemoryDenyWriteExecute=yes: the daemon (its TLS listener, uvloop) and the
    function's process (inheriting it) serve a call with no writable-and-executable memory. The
    kernel's PR_SET_MDWE is the same rule, kept across fork and exec."""
    folder = write_function(
        tmp_path / "fn",
        """
        import cfnresponse
        def handler(event, context):
            cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Under": "mdwe"}, "mdwe-1")
    """,
    )
    code = textwrap.dedent(f"""
        import ctypes, json, sys
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(65, 1, 0, 0, 0) != 0:   # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
            sys.exit("no PR_SET_MDWE on this kernel")
        from concurrent.futures import ThreadPoolExecutor
        from cfn_provider import loops
        from cfn_provider.functions.host import FunctionHost
        from tests.support.functions import answer, event_for, load_folder
        from pathlib import Path
        async def main():
            async with FunctionHost():
                handler = load_folder(Path({str(folder)!r}))
                return await answer(handler, event_for(), ThreadPoolExecutor(2))
        body = loops.run(main, "auto")
        print(json.dumps([body["Status"], body["Data"], libc.prctl(66, 0, 0, 0, 0)]))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "AWS_REGION": "eu-west-1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == ["SUCCESS", {"Under": "mdwe"}, 1]


async def test_a_function_that_no_longer_starts_fails_its_request_saying_so(tmp_path, executor):
    folder = write_function(tmp_path / "fn", CRASHES)
    handler = load_folder(folder)
    (folder / "index.py").write_text("raise RuntimeError('the new release is broken')\n")  # after the check
    body = await answer(handler, event_for(), executor)
    assert body["Status"] == "FAILED"
    assert body["Reason"] == (
        "the Lambda function Custom-Thing could not be started: RuntimeError: the new release is broken"
    )


# --- what a function can reach (docs/security.md "What a function can reach") ----------------------

PROBE = """
import ctypes, os
import cfnresponse

def attempt(kind, path):
    try:
        if kind == "list":
            return "read: %d entries" % len(os.listdir(path))
        if kind == "signal":
            os.kill(int(path), 0)
            return "read: signalled"
        if kind == "write":
            with open(path, "a") as fh:
                fh.write("x")
            return "read: written"
        with open(path, "rb") as fh:
            return "read: " + fh.read(4096).decode("latin-1")[:40]
    except OSError as exc:
        return "refused: " + type(exc).__name__

def handler(event, context):
    props = event["ResourceProperties"]
    if props.get("Hold"):   # its process stays, its configured environment (a secret) in it
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Pid": str(os.getpid())}, "holder")
        return
    found = {name: attempt(*how.split(" ", 1)) for name, how in props["Try"].items()}
    found["Dumpable"] = str(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))   # PR_GET_DUMPABLE
    cfnresponse.send(event, context, cfnresponse.SUCCESS, found, "prober")
"""


async def test_a_function_reaches_neither_the_daemon_nor_another_function_nor_the_state(
    run_daemon, stack, tmp_path, monkeypatch
):
    """One function tries the /proc files of the daemon and of another function (which holds a
    secret in its configured environment), the state database, the credentials directory and the
    other function's folder, through the real path: all refused; its own folder, the system and
    /tmp it may use."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):  # the emulator's (this module's host fixture sets another)
        monkeypatch.setenv(name, REGION)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "random-secret-key").write_text("the-key")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    holder, prober = write_function(tmp_path / "holder", PROBE), write_function(tmp_path / "prober", PROBE)
    secret = f"s3cr3t-{os.getpid()}-{time.monotonic_ns()}"
    functions = parse_options(
        [f"Custom::Holder=code={holder}", f"Custom::Holder=env.SECRET={secret}", f"Custom::Prober=code={prober}"]
    )
    handlers = (*TEST_HANDLERS, ("Custom::Holder", "lambda:index.handler"), ("Custom::Prober", "lambda:index.handler"))
    state = tmp_path / "state"
    with capture_logs() as logs:
        await run_daemon(handlers=handlers, functions=functions, state=f"sqlite://{state}/state.db")
    said = [e for e in logs if e.get("event") == "function_sandbox"]
    assert len(said) == 1 and said[0]["landlock"].startswith("ABI") == (confine.landlock_abi() > 0), said
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # the daemon (this process) is non-dumpable

    hold = stack.request("Create", "Holder", resource_type="Custom::Holder", properties={"Hold": "yes"})
    stack.publish(hold)
    other = int((await response_of(stack, hold, timeout=30))["Data"]["Pid"])
    assert secret in Path(f"/proc/{other}/environ").read_bytes().decode("latin-1")  # held (the daemon may read it)
    daemon = os.getpid()
    kept_out = {
        "DaemonEnviron": f"read /proc/{daemon}/environ",
        "DaemonMaps": f"read /proc/{daemon}/maps",
        "DaemonCmdline": f"read /proc/{daemon}/cmdline",
        "DaemonFds": f"list /proc/{daemon}/fd",
        "OtherEnviron": f"read /proc/{other}/environ",
        "OtherFds": f"list /proc/{other}/fd",
        "StateDatabase": f"read {state / 'state.db'}",
        "StateFolder": f"list {state}",
        "Credentials": f"read {credentials / 'random-secret-key'}",
        "OtherFolder": f"read {holder / 'index.py'}",
        "OtherFolderWrite": f"write {holder / 'index.py'}",
    }
    if confine.landlock_abi() >= 6:  # Linux 6.12: signals scoped to the sandbox
        kept_out |= {"DaemonSignal": f"signal {daemon}", "OtherSignal": f"signal {other}"}
    allowed = {
        "OwnFolder": f"read {prober / 'index.py'}",
        "System": "read /etc/passwd",
        "Own": "read /proc/self/status",
    }
    probe = stack.request("Create", "Prober", resource_type="Custom::Prober", properties={"Try": kept_out | allowed})
    stack.publish(probe)
    found = (await response_of(stack, probe, timeout=30))["Data"]
    assert secret not in json.dumps(found)
    assert found["Dumpable"] == "0"
    assert {k: v for k, v in found.items() if k in allowed and not v.startswith("read")} == {}
    if confine.landlock_abi():
        assert {k: v for k, v in found.items() if k in kept_out and not v.startswith("refused")} == {}
    else:  # docs/security.md: without Landlock, non-dumpable keeps the /proc files (of a non-root user) alone
        proc = {k for k in kept_out if k.endswith(("Environ", "Maps", "Fds"))}
        assert said[0]["log_level"] == "warning"
        if os.geteuid() != 0:
            assert {k: v for k, v in found.items() if k in proc and not v.startswith("refused")} == {}

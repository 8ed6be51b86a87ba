"""crhelper functions in their execution environments (cfn_provider.functions.runtime_crhelper).

crhelper answers by its own HTTPS PUT, like any function; only its polling is mapped onto the
daemon's poll contract (no CloudWatch Events rule), and its Delete does not pause for CloudWatch
Logs. A crhelper without those points, or the old bundled crhelper.py that cannot send, is
refused at start with the documented message (pin crhelper==2.0.12).
"""

from __future__ import annotations

import logging
import time

import pytest

from cfn_provider.functions.function import FunctionFailed
from cfn_provider.pipeline.router import HandlerError
from cfn_provider.progress import InProgress, poll_function
from tests.support.functions import answer, event_for, load_folder, raw_call, write_function

CRHELPER = """
    from crhelper import CfnResource
    helper = CfnResource(json_logging={json_logging}, log_level="DEBUG", polling_interval=0.5)
    calls = []

    def refuse(*args, **kwargs):   # crhelper's CloudWatch Events rule and Lambda permission: never here
        raise AssertionError("crhelper touched CloudWatch Events or Lambda")

    helper._put_rule = helper._add_permission = helper._put_targets = refuse
    helper._remove_targets = helper._remove_permission = helper._delete_rule = refuse

    @helper.create
    def create(event, context):
        calls.append("create")
        if event["ResourceProperties"].get("Fail"):
            raise ValueError("creation refused")
        helper.Data["Out"] = event["ResourceProperties"]["Name"]
        helper.Data["Calls"] = len(calls)
        return "crh-" + event["ResourceProperties"]["Name"]

    @helper.delete
    def delete(event, context):
        calls.append("delete")

    {extra}

    def handler(event, context):
        helper(event, context)
"""


@pytest.fixture(autouse=True)
def _started(host):
    """Every test here calls functions through a started host."""


def crhelper_function(tmp_path, extra: str = "", json_logging: bool = False):
    import textwrap

    source = textwrap.dedent(CRHELPER).format(extra=textwrap.dedent(extra), json_logging=json_logging)
    return load_folder(write_function(tmp_path / "fn", source))


async def test_crhelper_answers_through_its_own_put(tmp_path, executor):
    handler = crhelper_function(tmp_path)
    body = await answer(handler, event_for(Name="x"), executor)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "crh-x"
    assert body["Data"] == {"Out": "x", "Calls": 1}
    failed = await answer(handler, event_for(Fail="1"), executor)
    assert failed["Status"] == "FAILED" and failed["Reason"] == "creation refused"


async def test_crhelper_delete_does_not_wait_for_cloudwatch_logs(tmp_path, executor):
    """crhelper sleeps up to sleep_on_delete (120 s) on Delete for CloudWatch Logs; not here."""
    started = time.monotonic()
    body = await answer(crhelper_function(tmp_path), event_for("Delete"), executor, budget=3000)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "existing-id"
    assert time.monotonic() - started < 100


async def test_crhelper_polling_maps_onto_in_progress_and_the_poll_functions(tmp_path, executor):
    """crhelper's first call becomes InProgress (helper.Data and the id under CrHelperData, after
    polling_interval minutes); a poll that returns None is InProgress again, one that returns an
    id is SUCCESS with helper.Data; no CloudWatch Events rule or Lambda permission is touched."""
    handler = crhelper_function(
        tmp_path,
        extra="""
        @helper.poll_create
        def poll_create(event, context):
            calls.append(("poll", event.get("CrHelperPoll"), dict(event["CrHelperData"])))
            if len(calls) < 3:
                return None
            helper.Data["Polled"] = len(calls) - 1
            helper.Data["Seen"] = [c[2] for c in calls if isinstance(c, tuple)]
            return event["CrHelperData"]["PhysicalResourceId"] + "-done"
    """,
    )
    event = event_for(Name="x")
    pending = await raw_call(handler, event, executor)
    assert isinstance(pending, InProgress)
    assert pending.progress == {"CrHelperData": {"Out": "x", "Calls": 1, "PhysicalResourceId": "crh-x"}}
    assert pending.physical_id == "crh-x" and pending.after == 30.0
    assert poll_function(handler, "Create") == handler.poll_create
    again = await raw_call(handler, event, executor, progress=pending.progress)
    assert isinstance(again, InProgress) and again.progress == pending.progress and again.physical_id is None
    done = await raw_call(handler, event, executor, progress=again.progress)
    first = {"Out": "x", "Calls": 1, "PhysicalResourceId": "crh-x"}
    assert done == {
        "PhysicalResourceId": "crh-x-done",
        "Data": {"Out": "x", "Calls": 1, "Polled": 2, "Seen": [first, first]},
    }
    delete = await answer(handler, event_for("Delete"), executor)  # no poll_delete: answered at once
    assert delete["Status"] == "SUCCESS"


async def test_a_raising_crhelper_poll_is_failed_with_its_message(tmp_path, executor):
    handler = crhelper_function(
        tmp_path,
        extra="""
        @helper.poll_create
        def poll_create(event, context):
            raise RuntimeError("the snapshot failed")
    """,
    )
    event = event_for(Name="y")
    pending = await raw_call(handler, event, executor)
    assert isinstance(pending, InProgress)
    with pytest.raises(FunctionFailed, match="^the snapshot failed$"):
        await raw_call(handler, event, executor, progress=pending.progress)


@pytest.mark.parametrize("json_logging", [False, True])
async def test_crhelper_leaves_the_daemons_logging_alone(tmp_path, executor, json_logging):
    root = logging.getLogger()
    before = (root.level, list(root.handlers), [h.formatter for h in root.handlers])
    handler = crhelper_function(tmp_path, json_logging=json_logging)
    assert (await answer(handler, event_for(Name="z"), executor))["Status"] == "SUCCESS"
    assert (root.level, list(root.handlers), [h.formatter for h in root.handlers]) == before


async def test_a_crhelper_timeout_sent_from_its_timer_thread_is_the_answer(tmp_path, executor, host):
    folder = write_function(
        tmp_path / "fn",
        """
        import time
        from crhelper import CfnResource
        helper = CfnResource()

        @helper.create
        def create(event, context):
            time.sleep(3.0)   # past crhelper's own timer (remaining - 0.5 s)

        def handler(event, context):
            helper(event, context)
    """,
    )
    handler = load_folder(folder)
    await host.warm([handler])  # crhelper's import (boto3 clients) is not part of the call's time
    body = await answer(handler, event_for(), executor, budget=1.5)
    assert body["Status"] == "FAILED" and body["Reason"] == "Execution timed out"


def test_a_crhelper_without_the_known_polling_stops_the_start(tmp_path):
    """A crhelper whose internals moved would set up CloudWatch Events rules: refuse it, by name."""
    folder = write_function(
        tmp_path / "fn",
        """
        from crhelper import CfnResource
        helper = CfnResource()
        def handler(event, context):
            helper(event, context)
    """,
        files={
            "crhelper/__init__.py": "from crhelper.resource_helper import CfnResource\n",
            "crhelper/resource_helper.py": """
                    class CfnResource:
                        def _send(self, status=None, reason="", send_response=None):
                            pass
                """,
        },
    )
    with pytest.raises(HandlerError, match=r"does not have the polling cfn-provider maps .* pin crhelper==2\.0\.12"):
        load_folder(folder)


def test_an_old_bundled_crhelper_py_that_cannot_send_gets_the_pin_message(tmp_path):
    """The pre-PyPI single-file crhelper.py (AWS's StackSets and PrefixList examples) sends with
    botocore's vendored requests, long removed."""
    folder = write_function(
        tmp_path / "fn",
        """
        import crhelper, logging
        logger = logging.getLogger()
        def create(event, context):
            return "id", {}
        def handler(event, context):
            crhelper.cfn_handler(event, context, create, create, create, logger, False)
    """,
        files={
            "crhelper.py": """
        from botocore.vendored import requests
        def send(event, context, responseStatus, responseData, physicalResourceId, logger, reason=None):
            requests.put(event["ResponseURL"], data="{}")
        def cfn_handler(event, context, create, update, delete, logger, init_failed):
            pass
    """
        },
    )
    with pytest.raises(HandlerError, match=r"old, pre-PyPI copy of crhelper .* pin crhelper==2\.0\.12"):
        load_folder(folder)


async def test_a_queued_first_call_of_a_polling_crhelper_function_runs_create_then_polls(tmp_path, executor):
    """A request queued while the function was busy ({"Queued": n}) runs as a first call when its
    poll comes; crhelper's own polling then takes over, never `create` again."""
    handler = crhelper_function(
        tmp_path,
        extra="""
        @helper.poll_create
        def poll_create(event, context):
            return event["CrHelperData"]["PhysicalResourceId"] + "-done"
    """,
    )
    event = event_for(Name="q")
    pending = await raw_call(handler, event, executor, progress={"Queued": 3})
    assert isinstance(pending, InProgress) and pending.physical_id == "crh-q"
    assert pending.progress == {"CrHelperData": {"Out": "q", "Calls": 1, "PhysicalResourceId": "crh-q"}}
    assert await raw_call(handler, event, executor, progress=pending.progress) == {
        "PhysicalResourceId": "crh-q-done",
        "Data": {"Out": "q", "Calls": 1},
    }

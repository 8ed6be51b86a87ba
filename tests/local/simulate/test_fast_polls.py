"""cfn_provider.local.simulate.fast_polls: `simulate --poll-every` polls long-running resources at
simulate speed, whatever interval they ask for (crhelper's default is two minutes); FastPolls keeps
each action's signature and kind, so the daemon calls it as it would the handler."""

from __future__ import annotations

import asyncio
import inspect
import time

from cfn_provider import InProgress
from cfn_provider.local.simulate.fast_polls import FastPolls

CRHELPER_FUNCTION = """\
from crhelper import CfnResource

helper = CfnResource(json_logging=False)        # polling_interval: crhelper's default, 2 minutes
polls = []


@helper.create
def create(event, context):
    return "op-1"


@helper.poll_create
def poll_create(event, context):
    polls.append(event["RequestId"])
    if len(polls) < 2:
        return None                             # not yet: crhelper polls again (in 2 minutes)
    helper.Data["Polls"] = len(polls)
    return "op-1-ready"


@helper.update
@helper.delete
def no_op(event, context):
    pass


def handler(event, context):
    helper(event, context)
"""


def test_a_crhelper_poller_runs_at_simulate_speed(sim, write, tmp_path):
    write("crpoller.py", CRHELPER_FUNCTION)  # in the current folder: the default --handler-path
    path = write(
        "t.yaml",
        """\
        Resources:
          Slow:
            Type: Custom::CrPoll
            Properties: {ServiceToken: x}
        Outputs:
          Polls: {Value: !GetAtt Slow.Polls}
    """,
    )
    started = time.monotonic()
    run = sim("create", path, "--handler", "Custom::CrPoll=lambda:crpoller.handler", "--poll-every", "0.5")
    assert run.code == 0, run
    assert time.monotonic() - started < 120  # two polls at crhelper's own interval would take four minutes
    assert run.state["Outputs"]["Polls"]["Value"] == "2"
    assert run.state["Resources"]["Slow"]["PhysicalResourceId"] == "op-1-ready"
    assert run.state["Simulate"]["PollEvery"] == 0.5  # remembered for the stack's next operations
    assert sim("delete").code == 0


class _Handler:
    def create(self, event, context):
        return InProgress(progress={}, after=120)

    async def update(self, event):
        return InProgress(progress={}, after=1.2)

    def delete(self, event, context):
        return asyncio.sleep(0, result=InProgress(after=300))  # a sync action handing back an awaitable

    async def is_complete(self, event, context, progress):
        return {"Data": {}}


def test_fast_polls_shorten_every_wait_and_keep_each_action_as_it_is():
    fast = FastPolls(_Handler(), 1.5, "mod:handler")
    assert repr(fast) == "mod:handler"
    assert fast.create({}, None).after == 1.5
    assert list(inspect.signature(fast.create).parameters) == ["event", "context"]  # the runner reads it
    assert inspect.iscoroutinefunction(fast.update) and not inspect.iscoroutinefunction(fast.create)
    assert asyncio.run(fast.update({})).after == 1.2  # already sooner: as asked
    assert asyncio.run(fast.delete({}, None)).after == 1.5
    assert asyncio.run(fast.is_complete({}, None, {})) == {"Data": {}}
    assert getattr(fast, "poll_create", None) is None  # what the handler lacks, it still lacks

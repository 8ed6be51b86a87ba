"""A crhelper resource that polls on Create (@helper.poll_create), as crhelper's README shows.

Properties: Polls (the poll that returns the id; default 2), PollRaise (every poll raises it).
`create` returns "op-<Name>" (crhelper keeps it in CrHelperData["PhysicalResourceId"]); each
poll returns None until the Polls-th, which returns "<that id>-ready" with Data Polls and
Started. Records every call as a line "what RequestId" in the file its RAN_FILE environment
variable names (it runs in a process of its own: the test reads the file).
"""

import os

from crhelper import CfnResource

# polling_interval is in minutes (crhelper's rate() rule on Lambda); 0.02 is the daemon's 1 s floor
helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL", polling_interval=0.02)


def ran(what, request_id):
    with open(os.environ["RAN_FILE"], "a") as fh:
        fh.write(f"{what} {request_id}\n")


def runs(request_id):
    with open(os.environ["RAN_FILE"]) as fh:
        return [line.split()[0] for line in fh if line.split()[1] == request_id]


@helper.create
def create(event, context):
    ran("create", event["RequestId"])
    helper.Data["Started"] = event["ResourceProperties"].get("Name", "")
    return "op-" + event["ResourceProperties"].get("Name", "x")


@helper.poll_create
def poll_create(event, context):
    ran("poll_create", event["RequestId"])
    props = event["ResourceProperties"]
    if "PollRaise" in props:
        raise RuntimeError(props["PollRaise"])
    polls = runs(event["RequestId"]).count("poll_create")
    if polls < int(props.get("Polls", 2)):
        return None  # not yet: crhelper polls again
    helper.Data["Polls"] = polls
    return event["CrHelperData"]["PhysicalResourceId"] + "-ready"


@helper.delete
def delete(event, context):
    ran("delete", event["RequestId"])


def handler(event, context):
    helper(event, context)

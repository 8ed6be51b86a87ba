"""A crhelper resource that polls on Create (@helper.poll_create), as crhelper's README shows.

Properties: Polls (the poll that returns the id; default 2), PollRaise (every poll raises it).
`create` returns "op-<Name>" (crhelper keeps it in CrHelperData["PhysicalResourceId"]); each
poll returns None until the Polls-th, which returns "<that id>-ready" with Data Polls and
Started. Records every call in `ran` as (what, RequestId).
"""
from crhelper import CfnResource

# polling_interval is in minutes (crhelper's rate() rule on Lambda); 0.02 is the daemon's 1 s floor
helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL", polling_interval=0.02)
ran = []


@helper.create
def create(event, context):
    ran.append(("create", event["RequestId"]))
    helper.Data["Started"] = event["ResourceProperties"].get("Name", "")
    return "op-" + event["ResourceProperties"].get("Name", "x")


@helper.poll_create
def poll_create(event, context):
    ran.append(("poll_create", event["RequestId"]))
    props = event["ResourceProperties"]
    if "PollRaise" in props:
        raise RuntimeError(props["PollRaise"])
    polls = sum(1 for what, request_id in ran if what == "poll_create" and request_id == event["RequestId"])
    if polls < int(props.get("Polls", 2)):
        return None  # not yet: crhelper polls again
    helper.Data["Polls"] = polls
    return event["CrHelperData"]["PhysicalResourceId"] + "-ready"


@helper.delete
def delete(event, context):
    ran.append(("delete", event["RequestId"]))


def handler(event, context):
    helper(event, context)

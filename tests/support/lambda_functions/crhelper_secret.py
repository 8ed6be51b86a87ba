"""A crhelper resource that polls on Create and hides its Data (helper.NoEcho): its create puts a
secret it made (here: $CFN_TEST_NOECHO_SECRET, so a test knows it) in helper.Data as Password, so
crhelper carries the secret in CrHelperData from poll to poll.

Properties: Polls (the poll that finishes; default 2).
"""

import os

from crhelper import CfnResource

helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL", polling_interval=0.02)
helper.NoEcho = True  # crhelper keeps it on the helper: every answer of this function is NoEcho
polls: dict[str, int] = {}


@helper.create
def create(event, context):
    helper.Data["Password"] = os.environ["CFN_TEST_NOECHO_SECRET"]
    return "secret-" + event["RequestId"][:8]


@helper.poll_create
def poll_create(event, context):
    polls[event["RequestId"]] = polls.get(event["RequestId"], 0) + 1
    if polls[event["RequestId"]] < int(event["ResourceProperties"].get("Polls", 2)):
        return None
    return event["CrHelperData"]["PhysicalResourceId"]


@helper.delete
def delete(event, context):
    pass


def handler(event, context):
    helper(event, context)

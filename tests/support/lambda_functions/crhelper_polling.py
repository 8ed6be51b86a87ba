"""A crhelper resource that polls on Create (@helper.poll_create). Records when its functions run."""
from crhelper import CfnResource

helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL")
ran = []


@helper.create
def create(event, context):
    ran.append(("create", event["RequestId"]))
    return "started"


@helper.poll_create
def poll_create(event, context):
    ran.append(("poll_create", event["RequestId"]))
    return "done"


@helper.delete
def delete(event, context):
    ran.append(("delete", event["RequestId"]))


def handler(event, context):
    helper(event, context)

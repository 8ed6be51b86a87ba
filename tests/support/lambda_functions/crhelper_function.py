"""A custom resource written with crhelper (PyPI), as its README shows. Unchanged by the tests."""

from crhelper import CfnResource

helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL")


@helper.create
def create(event, context):
    props = event["ResourceProperties"]
    if props.get("Fail") == "true":
        raise ValueError("asked to fail by the template")
    helper.Data.update({"Greeting": "hello " + props["Name"], "RequestId": event["RequestId"]})
    return "crh-" + props["Name"]


@helper.update
def update(event, context):
    helper.Data.update(
        {"Greeting": "hello again " + event["ResourceProperties"]["Name"], "RequestId": event["RequestId"]}
    )


@helper.delete
def delete(event, context):
    pass


def handler(event, context):
    helper(event, context)

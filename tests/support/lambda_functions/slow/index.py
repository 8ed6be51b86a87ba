"""Takes a moment (SleepSeconds, default 1), then answers SUCCESS with cfnresponse, naming what it was asked."""

import time

import cfnresponse


def handler(event, context):
    props = event["ResourceProperties"]
    time.sleep(float(props.get("SleepSeconds", "1")))
    name = props.get("Name", "thing")
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Name": name}, f"slow-{name}")

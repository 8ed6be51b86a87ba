"""Hangs when asked (a stuck API call), else answers at once."""

import time

import cfnresponse


def handler(event, context):
    if event["ResourceProperties"].get("Hang"):
        while True:
            time.sleep(0.1)
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {}, "hang-fine")

"""A function whose process dies on request (os._exit, as a C extension's abort would), else SUCCESS."""

import os

import cfnresponse


def handler(event, context):
    if event["ResourceProperties"].get("Exit"):
        os._exit(int(event["ResourceProperties"]["Exit"]))
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Pid": os.getpid()}, "crash-fine")

"""An Alibaba Function Compute function for a ROS custom resource, written as Alibaba's samples are
(aliyun-computenest/quickstart-ros-custom-resource): the event as bytes, json.loads, an
initializer, and the answer POSTed with urllib to ResponseURL with a Date header. The tests read
back, from its Data, what it saw: its context, its environment, the URLs it was handed."""

import json
import logging
import os
import time
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

LOG = logging.getLogger(__name__)
STATE = {"initialized": 0}


def initializer(context):
    STATE["initialized"] += 1
    LOG.info("initializing %s", context.function.name)


def handler(event, context):
    assert isinstance(event, bytes), type(event)
    event = json.loads(event)
    props = event["ResourceProperties"]
    LOG.info("handling %s %s", event["RequestType"], event["LogicalResourceId"])
    if props.get("Crash") == "yes" and event["RequestType"] != "Delete":
        os._exit(3)
    if props.get("Raise") == "yes":
        raise RuntimeError("the function raised")
    resp = {
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "StackId": event["StackId"],
        "Status": "SUCCESS",
        "PhysicalResourceId": event.get("PhysicalResourceId") or "fc-" + props.get("Name", "thing"),
        "Data": {
            "Initialized": STATE["initialized"],
            "RequestId": context.request_id,
            "Function": context.function.name,
            "Handler": context.function.handler,
            "Initializer": context.function.initializer,
            "Timeout": context.function.timeout,
            "Service": context.service.name,
            "Region": context.region,
            "AccountId": context.account_id,
            "AccessKeyId": context.credentials.access_key_id,
            "AccessKeySecret": context.credentials.access_key_secret,
            "SecurityToken": context.credentials.security_token,
            "Environment": sorted(os.environ),
            "EnvAccessKeyId": os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID", ""),
            "UrlHosts": sorted({urlsplit(event[k]).netloc for k in ("ResponseURL", "IntranetResponseURL")}),
        },
    }
    url = event["IntranetResponseURL"] if props.get("Intranet") == "yes" else event["ResponseURL"]
    headers = {
        "Content-type": "application/json",
        "Accept": "application/json",
        "Date": time.strftime("%a, %d %b %Y %X GMT", time.gmtime()),
    }
    req = Request(url, data=json.dumps(resp).encode("utf-8"), headers=headers)
    result = urlopen(req, timeout=20)
    LOG.info("notify result: %s %s", result.status, result.read().decode("utf-8"))

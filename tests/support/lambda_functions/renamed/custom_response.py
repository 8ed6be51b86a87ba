"""A renamed copy of cfnresponse, as AWS's macro examples bundle it (PUT with urllib)."""

import json
import urllib.request

SUCCESS = "SUCCESS"
FAILED = "FAILED"


def send(event, context, responseStatus, responseData, physicalResourceId=None, noEcho=False):  # noqa: N803
    responseBody = json.dumps(
        {
            "Status": responseStatus,
            "Reason": "See the details in CloudWatch Log Stream: " + context.log_stream_name,
            "PhysicalResourceId": physicalResourceId or context.log_stream_name,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "NoEcho": noEcho,
            "Data": responseData,
        }
    ).encode("utf-8")
    request = urllib.request.Request(
        event["ResponseURL"],
        data=responseBody,
        method="PUT",
        headers={"content-type": "", "content-length": str(len(responseBody))},
    )
    with urllib.request.urlopen(request) as response:
        print("Status code:", response.reason)

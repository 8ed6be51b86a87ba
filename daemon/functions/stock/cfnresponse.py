"""`cfnresponse` for inline (ZipFile) function code, which CloudFormation provides on Lambda.

Same names and call as AWS's module:

    import cfnresponse
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Arn": arn}, physical_id)

It PUTs the answer to the event's ResponseURL (the daemon's loopback listener, which takes it as
the function's answer) with the body AWS's module sends. Differences: the body (which may hold
NoEcho Data) is never printed, and a FAILED without a reason says where the function's output
went (the provider's log) rather than CloudWatch. A function that ships its own cfnresponse.py
gets that one instead: this module is last on the function's path.
"""

import json
import urllib.request

TYPE_CHECKING = False  # as AWS's module, this imports no typing at run time: mypy alone reads these names
if TYPE_CHECKING:
    from typing import Any

SUCCESS = "SUCCESS"
FAILED = "FAILED"


def send(
    event: "dict[str, Any]",
    context: "Any",
    responseStatus: str,
    responseData: object,
    physicalResourceId: str | None = None,
    noEcho: bool = False,  # noqa: N803
    reason: str | None = None,
) -> None:
    """PUT the answer for `event`; prints the status CloudFormation's store returned (or the error)."""
    body = json.dumps(
        {
            "Status": responseStatus,
            "Reason": reason
            or (
                "See the details in the cfn-provider log (e.g. journalctl -u cfn-provider), "
                f"lines with request_id={event['RequestId']}"
            ),
            "PhysicalResourceId": physicalResourceId or context.log_stream_name,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "NoEcho": noEcho,
            "Data": responseData,
        },
        default=str,
    ).encode("utf-8")
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print("Status code:", response.reason)
    except Exception as exc:  # noqa: BLE001 - as AWS's module: say so, never raise
        print("send(..) failed executing http.request(..):", exc)

"""AWS's `cfnresponse` module, for Lambda functions run by the daemon (`--handler TYPE=lambda:...`).

Same names and signature as the module CloudFormation documents for inline (ZipFile) Lambda code:

    import cfnresponse
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Arn": arn}, physical_id)

Loading a `lambda:` handler makes `import cfnresponse` resolve to this module (see
cfn_provider.sdk.lambda_adapter); nothing named `cfnresponse` is installed at the top of site-packages.

Differences from AWS's module, all in what happens to the answer, none in how it is called:
- nothing is PUT here: the answer goes back to the daemon, which stores and delivers it (with
  retries, the 4096-byte guard and redaction), after the function returns;
- the first answer counts; a second `send` for the same request is logged and ignored;
- physicalResourceId=None keeps the daemon's rule (Create: an id from the stack, the logical id
  and the RequestId; Update/Delete: the request's id), not the Lambda log stream's name, which on
  Lambda silently replaces a resource whenever an Update runs in a new log stream;
- reason=None on FAILED says where to look in the provider's log, not in CloudWatch;
- nothing is printed: the response body (which may hold NoEcho Data) never reaches a log.
"""
from __future__ import annotations

from typing import Any

from .lambda_context import Answer, deliver

SUCCESS = "SUCCESS"
FAILED = "FAILED"

__all__ = ["FAILED", "SUCCESS", "send"]


def send(event: Any, context: Any, responseStatus: Any, responseData: Any,  # noqa: N803 - AWS's names
         physicalResourceId: Any = None, noEcho: bool = False, reason: Any = None) -> None:
    """Answer the request `event` with `responseStatus` (SUCCESS or FAILED) and `responseData`."""
    ids = (event.get("StackId"), event.get("RequestId")) if hasattr(event, "get") else None
    deliver(Answer(status=responseStatus, reason=reason, physical_id=physicalResourceId, data=responseData,
                   no_echo=bool(noEcho), via="cfnresponse"), context=context, ids=ids)

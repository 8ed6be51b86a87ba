"""Custom resources written the way AWS documents `cfnresponse` for inline (ZipFile) Lambda code:
`handler(event, context)`, a timer that sends FAILED just before the function would time out,
and `cfnresponse.send(event, context, status, data, physical_id)` at the end. Nothing here knows
about cfn-provider: the tests run these modules unchanged through `lambda:` handlers.
"""

import json
import logging
import threading

import cfnresponse

logger = logging.getLogger(__name__)


def timeout(event, context):
    logger.error("Execution is about to time out, sending failure response to CloudFormation")
    cfnresponse.send(event, context, cfnresponse.FAILED, {}, None)


def handler(event, context):
    # Send FAILED half a second before the function would run out of time.
    timer = threading.Timer((context.get_remaining_time_in_millis() / 1000.00) - 0.5, timeout, args=[event, context])
    timer.start()
    status, data, physical_id = cfnresponse.SUCCESS, {}, event.get("PhysicalResourceId")
    try:
        props = event["ResourceProperties"]
        if event["RequestType"] in ("Create", "Update"):
            name = props["Name"]
            physical_id = "greeting-" + name
            data = {
                "Greeting": "hello " + name,
                "FunctionName": context.function_name,
                "FunctionVersion": context.function_version,
                "FunctionArn": context.invoked_function_arn,
                "LogGroup": context.log_group_name,
                "LogStream": context.log_stream_name,
                "MemoryMb": context.memory_limit_in_mb,
                "AwsRequestId": context.aws_request_id,
                "RemainingMs": context.get_remaining_time_in_millis(),
                "ResponseURL": event["ResponseURL"],
                "EventKeys": sorted(event),
            }
        logger.info("Request: %s", json.dumps(event))
    except Exception as exc:
        logger.error("failed: %s", exc)
        status = cfnresponse.FAILED
    finally:
        timer.cancel()
        cfnresponse.send(event, context, status, data, physical_id)


def secret_handler(event, context):
    """Returns a generated secret with noEcho, as the documentation's password example does."""
    if event["RequestType"] == "Delete":
        cfnresponse.send(event, context, cfnresponse.SUCCESS, {})
        return
    secret = "s3cr3t-" + event["RequestId"][:8]
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Password": secret}, "secret-1", noEcho=True)


def big_handler(event, context):
    """More Data than a response may carry."""
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Blob": "x" * 5000}, "big-1")


def failing_handler(event, context):
    """FAILED with no reason: AWS's module points at CloudWatch; the daemon at its own log."""
    cfnresponse.send(event, context, cfnresponse.FAILED, {})


def silent_handler(event, context):
    """Forgets to send (on Lambda the stack would hang for an hour)."""
    return {"PhysicalResourceId": "ignored"}


def twice_handler(event, context):
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Which": "first"}, "first-id")
    cfnresponse.send(event, context, cfnresponse.FAILED, {"Which": "second"}, "second-id", reason="second")


def raising_handler(event, context):
    raise RuntimeError("boom: the bucket does not exist")

"""cfn_provider.sdk.lambda_context: the event and context a `lambda:` function gets, and how what it
sends reaches the invocation serving its request (first answer kept, later ones logged and dropped)."""
from __future__ import annotations

import threading

from structlog.testing import capture_logs

from cfn_provider.sdk.lambda_context import (DEFAULT_REMAINING_MS, Answer, Invocation, LambdaContext, current,
                                             deliver, lambda_event, serving)

STACK_ID = "arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/shop/6a1b-guid"
SIGNED = "https://bucket.s3.amazonaws.com/key?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA"


def test_the_event_is_a_plain_dict_without_the_response_urls_signature():
    wire = {"StackId": STACK_ID, "RequestId": "r1", "ResponseURL": SIGNED, "IntranetResponseURL": SIGNED,
            "ResourceProperties": {"Ports": ("80",)}}
    event = lambda_event(wire)
    assert event["ResponseURL"] == event["IntranetResponseURL"] == "https://bucket.s3.amazonaws.com/key?<redacted>"
    assert "deadbeef" not in repr(event) and "AKIA" not in repr(event)
    assert event["ResourceProperties"] == {"Ports": ["80"]}
    event["ResourceProperties"]["Ports"].append("443")  # the function's to change
    assert wire["ResourceProperties"] == {"Ports": ("80",)}


def test_the_context_names_the_function_in_the_stacks_partition_region_and_account():
    context = LambdaContext("index-handler", {"StackId": STACK_ID})
    assert context.invoked_function_arn == "arn:aws-cn:lambda:cn-north-1:123456789012:function:index-handler"
    assert context.log_group_name == "/aws/lambda/index-handler" and context.function_version == "$LATEST"
    assert context.aws_request_id != LambdaContext("index-handler", {"StackId": STACK_ID}).aws_request_id
    assert int(context.memory_limit_in_mb) >= 0


def test_remaining_time_comes_from_the_daemons_deadline():
    class Daemon:
        def remaining(self) -> float:
            return 2.5

    assert LambdaContext("f", {}, Daemon()).get_remaining_time_in_millis() == 2500
    assert LambdaContext("f", {}).get_remaining_time_in_millis() == DEFAULT_REMAINING_MS


def test_the_first_answer_is_kept_and_a_second_is_logged():
    invocation = Invocation(STACK_ID, "r1", "Thing")
    with capture_logs() as logs, serving(invocation):
        assert current() is invocation
        deliver(Answer(status="SUCCESS", data={"A": "1"}))
        deliver(Answer(status="FAILED", reason="second"))
    assert current() is None
    assert invocation.answer == Answer(status="SUCCESS", data={"A": "1"})
    assert [e["event"] for e in logs] == ["lambda.sent", "lambda.second_send"]


def test_a_send_from_a_thread_the_function_started_is_found_by_its_ids():
    invocation = Invocation(STACK_ID, "r2", "Thing")
    with serving(invocation):
        sender = threading.Thread(target=deliver, args=(Answer(status="SUCCESS", via="crhelper"),),
                                  kwargs={"ids": (STACK_ID, "r2")})
        sender.start()
        sender.join()
    assert invocation.answer is not None and invocation.answer.via == "crhelper"


def test_a_send_through_the_functions_context_reaches_its_invocation_from_any_thread():
    invocation = Invocation(STACK_ID, "r3", "Thing")
    context = LambdaContext("f", {"StackId": STACK_ID}, invocation=invocation)
    with serving(invocation):
        sender = threading.Thread(target=deliver, args=(Answer(status="SUCCESS"),), kwargs={"context": context})
        sender.start()
        sender.join()
    assert invocation.answer == Answer(status="SUCCESS")


def test_a_send_after_the_function_returned_is_late_and_dropped():
    invocation = Invocation(STACK_ID, "r4", "Thing")
    context = LambdaContext("f", {"StackId": STACK_ID}, invocation=invocation)
    with serving(invocation):
        pass
    with capture_logs() as logs:
        deliver(Answer(status="SUCCESS"), context=context)
        deliver(Answer(status="SUCCESS"), ids=(STACK_ID, "r4"))  # no longer registered: outside any invocation
    assert invocation.answer is None
    assert [e["event"] for e in logs] == ["lambda.late_send", "lambda.send_outside_invocation"]

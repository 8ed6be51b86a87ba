"""cfn_provider.pipeline.raised: a raising handler's Reason names the exception's type and message
and where its traceback is; an answer-like exception (PropertyError, a Lambda function's FAILED)
keeps its message alone."""

from __future__ import annotations

from cfn_provider import PropertyError
from cfn_provider.functions.function import FunctionFailed
from cfn_provider.pipeline.raised import TRACEBACK_HINT, reason


def test_the_reason_names_the_exception_type_and_where_the_traceback_is():
    try:
        {}["Size"]
    except KeyError as exc:
        assert reason(exc) == f"KeyError: 'Size' {TRACEBACK_HINT}"
    assert reason(RuntimeError("the snapshot failed")) == f"RuntimeError: the snapshot failed {TRACEBACK_HINT}"
    assert reason(ZeroDivisionError()) == f"ZeroDivisionError {TRACEBACK_HINT}"
    assert TRACEBACK_HINT == "(traceback in the provider's log: handler.raised)"


def test_answers_that_are_exceptions_keep_their_message_alone():
    assert (
        reason(PropertyError("invalid ResourceProperties: Size: must be at most 20 (maximum)"))
        == "invalid ResourceProperties: Size: must be at most 20 (maximum)"
    )
    assert reason(FunctionFailed("the bucket exists")) == "the bucket exists"

"""cfn_provider.functions.output: a function's lines in the daemon's log, NoEcho values taken out."""

from __future__ import annotations

from structlog.testing import capture_logs

from cfn_provider.functions import output
from cfn_provider.functions.output import Output, secret_values

IDS = {"request_id": "r1", "logical_id": "Thing", "aws_request_id": "a1"}


def test_lines_between_calls_go_out_at_once_and_lines_in_a_call_wait_for_its_answer():
    out = Output("fn")
    with capture_logs() as logs:
        out.printed("at import", "stdout")
        out.begin(IDS)
        out.record("warning", "working", "fn.sub")
        assert [e["message"] for e in logs] == ["at import"]
        out.answered()
        out.printed("after the answer", "stdout")
        out.end()
    assert [e["message"] for e in logs] == ["at import", "working", "after the answer"]
    assert logs[1] == {
        "event": "function.log",
        "log_level": "warning",
        "function": "fn",
        "message": "working",
        "function_logger": "fn.sub",
        **IDS,
    }
    assert "request_id" not in logs[0]


def test_noecho_values_are_taken_out_of_the_calls_lines_before_and_after_the_answer():
    out = Output("fn")
    with capture_logs() as logs:
        out.begin(IDS)
        out.printed('Response body: {"Data": {"Password": "hunter2-é", "Port": 5432}}', "stdout")
        out.answered({"Password": "hunter2-é", "Port": 5432, "Short": "abc"})
        out.printed("password is hunter2-é", "stdout")
        out.end()
    assert [e["message"] for e in logs] == [
        'Response body: {"Data": {"Password": "<redacted>", "Port": <redacted>}}',
        "password is <redacted>",
    ]
    assert "abc" in secret_values({"A": "abc1"})[0] and secret_values({"A": "abc"}) == []
    assert "hunter2-\\u00e9" in secret_values({"P": "hunter2-é"})


def test_a_call_that_ends_without_answering_lets_its_lines_go(monkeypatch):
    monkeypatch.setattr(output, "MAX_HELD", 2)
    out = Output("fn")
    with capture_logs() as logs:
        out.begin(IDS)
        for i in range(4):
            out.printed(f"line {i}", "stdout")
        out.end()
    assert [e.get("message") for e in logs] == ["line 0", "line 1", None]
    assert logs[-1]["event"] == "function.output_dropped" and logs[-1]["lines"] == 2

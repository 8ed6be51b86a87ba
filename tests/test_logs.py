"""cfn_provider.logs.configure: formats, the stdlib bridge, and redaction of every rendered line."""

from __future__ import annotations

import contextvars
import datetime as dt
import io
import json
import logging
import time

import pytest
import structlog

from cfn_provider import logs
from tests.support.logging_state import kept_logging

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+example=="
QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20240101T000000Z&X-Amz-Expires=7200&X-Amz-SignedHeaders=host&X-Amz-Signature="
    + "5d" * 32
)
URL = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws%3Acloudformation/req?" + QUERY
SIGV2_URL = (
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/key"
    "?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1700000000&Signature=abc%2Bdef%2Fghi%3D"
)
# fragments of the query string that must never be seen
LEAKS = ("X-Amz-Signature", "5d5d5d5d", "X-Amz-Credential", "AKIAIOSFODNN7EXAMPLE", "Signature=abc", "abc%2Bdef")


@pytest.fixture(autouse=True)
def restore_logging():
    with kept_logging():
        yield


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


def configured(fmt: str = "json", level: str = "info") -> io.StringIO:
    stream = io.StringIO()
    logs.configure(fmt, level, stream)
    return stream


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in lines(stream)]


def assert_clean(text: str) -> None:
    for leak in LEAKS + (SECRET, TOKEN):
        assert leak not in text, f"{leak!r} leaked into the log output:\n{text}"


# ---- formats -----------------------------------------------------------------------------------


def test_json_lines_with_event_level_timestamp():
    stream = configured("json")
    structlog.get_logger("t").info("hello", answer=42)
    [record] = records(stream)
    assert record["event"] == "hello"
    assert record["level"] == "info"
    assert record["answer"] == 42
    assert record["timestamp"].endswith("Z") and record["timestamp"][:2] == "20"


def test_auto_on_a_non_tty_stream_is_json():
    stream = configured("auto")
    structlog.get_logger("t").warning("auto", n=1)
    [record] = records(stream)
    assert (record["event"], record["level"], record["n"]) == ("auto", "warning", 1)


def test_bound_contextvars_appear_in_structlog_and_stdlib_lines():
    stream = configured("json")
    structlog.contextvars.bind_contextvars(request_id="req-1", stack="s-1")
    structlog.get_logger("t").info("one")
    logging.getLogger("x").warning("two")
    structlog.contextvars.unbind_contextvars("stack")
    structlog.get_logger("t").info("three")
    one, two, three = records(stream)
    assert (one["request_id"], one["stack"]) == ("req-1", "s-1")
    assert (two["request_id"], two["stack"]) == ("req-1", "s-1")
    assert three["request_id"] == "req-1" and "stack" not in three


def test_console_format():
    stream = configured("console")
    structlog.get_logger("t").info("hello_console", answer=42)
    logging.getLogger("x").info("from stdlib")
    first, second = lines(stream)
    with pytest.raises(ValueError):
        json.loads(first)
    assert "hello_console" in first and "answer=42" in first and "info" in first
    assert "from stdlib" in second and "info" in second
    assert "\x1b[" not in stream.getvalue()  # no colours on a non-terminal


def test_console_shows_the_stack_name_as_a_field_not_as_a_stack_dump():
    """structlog's ConsoleRenderer takes a `stack` key for a stack_info dump: the request's stack
    name came out as a bare line of its own, and before a traceback as a `=====` rule."""
    stream = configured("console")
    structlog.contextvars.bind_contextvars(stack="shop", logical_id="Web")
    try:
        structlog.get_logger("t").info("request", status="SUCCESS")
        logging.getLogger("x").warning("from stdlib")
        try:
            raise KeyError("Size")
        except KeyError:
            structlog.get_logger("t").warning("handler.raised", exc_info=True)
    finally:
        structlog.contextvars.unbind_contextvars("stack", "logical_id")
    text = stream.getvalue()
    first, second, third = (line for line in text.splitlines() if line[:2] == "20")
    assert "request" in first and "stack=shop" in first and "logical_id=Web" in first
    assert "from stdlib" in second and "stack=shop" in second
    assert "handler.raised" in third and "stack=shop" in third and "KeyError: 'Size'" in text
    assert "\nshop\n" not in text and "=====" not in text


def test_stdlib_loggers_come_out_through_the_same_renderer():
    stream = configured("json")
    logging.getLogger("botocore").warning("endpoint %s is slow", "sqs")
    logging.getLogger("x").info("plain %d", 7)
    botocore, plain = records(stream)
    assert (botocore["event"], botocore["level"], botocore["logger"]) == ("endpoint sqs is slow", "warning", "botocore")
    assert (plain["event"], plain["level"], plain["logger"]) == ("plain 7", "info", "x")
    assert "timestamp" in botocore and "timestamp" in plain


def test_botocore_debug_noise_is_suppressed_at_info():
    stream = configured("json", "info")
    for name in ("botocore", "botocore.endpoint", "aiobotocore", "urllib3.connectionpool"):
        logging.getLogger(name).debug("noise from %s", name)
        logging.getLogger(name).info("more noise from %s", name)
    logging.getLogger("botocore.endpoint").warning("kept")
    logging.getLogger("x").debug("below info")
    assert [r["event"] for r in records(stream)] == ["kept"]


def test_configure_twice_does_not_duplicate_lines():
    configured("json")
    stream = configured("json")
    logging.getLogger("x").warning("once")
    assert [r["event"] for r in records(stream)] == ["once"]


def test_level_filters_structlog_and_stdlib():
    stream = configured("json", "warning")
    structlog.get_logger("t").info("dropped")
    logging.getLogger("x").info("dropped too")
    structlog.get_logger("t").error("kept")
    assert [r["event"] for r in records(stream)] == ["kept"]


# ---- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_url_query_redacted_in_structlog_events(fmt):
    stream = configured(fmt)
    log = structlog.get_logger("t")
    log.info("response.put", url=URL)
    log.info(f"PUT {SIGV2_URL} failed")
    log.info("nested", request={"ResponseURL": URL, "Other": [SIGV2_URL]})
    text = stream.getvalue()
    assert_clean(text)
    assert text.count("?<redacted>") >= 4
    assert "s3.amazonaws.com/arn%3Aaws%3Acloudformation/req?<redacted>" in text  # the path stays


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_url_query_redacted_in_stdlib_messages(fmt):
    stream = configured(fmt)
    logging.getLogger("botocore").warning("Making request to %s", URL)
    logging.getLogger("aiohttp.client").error("PUT %r -> 503", SIGV2_URL)
    text = stream.getvalue()
    assert_clean(text)
    assert text.count("?<redacted>") == 2


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_url_query_redacted_in_tracebacks(fmt):
    stream = configured(fmt)

    def fail() -> None:
        try:
            raise ConnectionError(f"cannot reach {SIGV2_URL}")
        except ConnectionError as exc:
            raise RuntimeError(f"PUT to {URL} failed") from exc

    try:
        fail()
    except RuntimeError:
        structlog.get_logger("t").exception("structlog.boom")
        structlog.get_logger("t").error("structlog.exc_info", exc_info=True)
        logging.getLogger("x").error("stdlib.boom", exc_info=True)
        logging.getLogger("x").exception("stdlib.exception")
    text = stream.getvalue()
    assert text.count("Traceback") == 8  # each of 4 lines shows both chained exceptions
    assert "RuntimeError: PUT to https://" in text
    assert_clean(text)


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_secret_access_key_never_appears(fmt, secrets):
    stream = configured(fmt)
    log = structlog.get_logger("t")
    log.info("creds", key=SECRET, token=TOKEN)
    log.info(f"the secret is {SECRET}")
    log.info("nested", creds={"aws_secret_access_key": SECRET, "tokens": [TOKEN]})
    logging.getLogger("botocore.credentials").warning("loaded %s", SECRET)
    logging.getLogger("x").info("token=%s", TOKEN)
    try:
        raise PermissionError(f"bad key {SECRET!r}")
    except PermissionError:
        log.exception("failed")
        logging.getLogger("x").error("failed", exc_info=True)
    text = stream.getvalue()
    assert_clean(text)
    assert len(lines(stream)) >= 7
    assert text.count("<redacted>") >= 7


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("odd", ["caf\u00e9", "a\\b", "\u2603"], ids=["latin1", "backslash", "snowman"])
def test_whole_query_redacted_when_it_holds_characters_the_renderer_escapes(fmt, odd):
    """JSON renders non-ASCII as \\uXXXX and a backslash as \\\\ (console repr doubles a
    backslash too); redaction must still take the query up to its end, not stop at the escape."""
    stream = configured(fmt)
    url = f"https://bucket.s3.amazonaws.com/key?note={odd}&X-Amz-Signature=" + "5d" * 32
    structlog.get_logger("t").info("put", url=url)
    logging.getLogger("x").warning("PUT %s", url)
    text = stream.getvalue()
    assert text.count("?<redacted>") == 2
    assert_clean(text)


def test_every_json_line_is_valid_json_after_redaction(secrets):
    """Redaction must not break the JSON it runs on: a URL inside a JSON document logged as a
    string (a raw message body, a handler's exception quoting the request) is escaped as
    \\"...\\" in the rendered line, and the escape must survive."""
    stream = configured("json")
    body = json.dumps({"RequestType": "Create", "ResponseURL": URL})
    structlog.get_logger("t").warning("message.unparseable", body=body)
    logging.getLogger("x").warning("body was %s", body)
    try:
        raise ValueError(f"unexpected request {body}")
    except ValueError:
        structlog.get_logger("t").warning("handler.raised", exc_info=True)
    text = stream.getvalue()
    assert_clean(text)
    parsed = []
    for line in lines(stream):
        try:
            parsed.append(json.loads(line))
        except ValueError as exc:
            pytest.fail(f"log line is not valid JSON after redaction ({exc}):\n{line}")
    assert [p["event"].split(" ")[0] for p in parsed] == ["message.unparseable", "body", "handler.raised"]
    assert "?<redacted>" in parsed[0]["body"]


# ---- the daemon's own lines go straight to the stream ----------------------------------------------


def test_structlog_lines_do_not_pass_through_the_stdlib_handler(monkeypatch):
    stream = configured("json")
    handled = []
    handler = logging.getLogger().handlers[0]
    monkeypatch.setattr(handler, "handle", lambda record: handled.append(record))
    structlog.get_logger("worker").info("request", outcome="answered")
    [record] = records(stream)
    assert (record["event"], record["logger"], record["outcome"]) == ("request", "worker", "answered")
    assert handled == []


def test_an_unnamed_structlog_logger_is_named_after_its_module():
    stream = configured("json")
    structlog.get_logger().info("unnamed")
    [record] = records(stream)
    assert record["logger"] == __name__


def test_exceptions_render_with_their_traceback_and_level_error():
    stream = configured("json")
    try:
        raise RuntimeError("boom at " + URL)
    except RuntimeError:
        structlog.get_logger("t").exception("crashed")
    [record] = records(stream)
    assert record["level"] == "error" and "RuntimeError: boom" in record["exception"]
    assert_clean(stream.getvalue())


def test_an_unrenderable_line_is_dropped_and_said_by_logger_name_only(capsys):
    stream = configured("console")

    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError(SECRET)

        __str__ = __repr__

    structlog.get_logger("t").info("odd", value=Unprintable())
    assert stream.getvalue() == ""
    err = capsys.readouterr().err
    assert "a log record from 't' could not be formatted" in err and SECRET not in err


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_tracebacks_never_show_a_frames_local_variables(fmt):
    """structlog's console renderer would format exceptions with rich when importable (the [test] extra
    installs it), and rich prints every frame's locals; every format uses logs.traceback_text instead.
    (tests/test_logs_rich.py runs the same check through the CLI with rich importable and blocked.)"""
    stream = configured(fmt)
    password = "hunter2-a-property-value"

    def handler(props: dict) -> None:
        value = props["Password"]
        raise ValueError("the backend refused it" if value else "")

    try:
        handler({"Password": password})
    except ValueError:
        structlog.get_logger("t").warning("handler.raised", exc_info=True)
        logging.getLogger("x").error("stdlib.raised", exc_info=True)
    text = stream.getvalue()
    assert text.count("ValueError: the backend refused it") == 2
    assert password not in text and "hunter2" not in text


# ---- the JSON line's fast path (issue 32): same content as the stock processors gave -------------


def test_a_value_orjson_cannot_encode_still_makes_its_line():
    """orjson refuses an integer past 64 bits and a lone surrogate; the line goes to the standard
    library's encoder instead of being lost."""
    stream = configured("json")
    structlog.get_logger("t").info("big", n=2**70, odd="a\ud800b", other={1: "int key"})
    [record] = records(stream)
    assert record["n"] == 2**70 and record["odd"] == "a\ud800b" and record["other"] == {"1": "int key"}


def test_a_value_json_cannot_hold_is_written_as_its_repr():
    stream = configured("json")
    structlog.get_logger("t").info("set", value={"x"}, when=Ellipsis)
    [record] = records(stream)
    assert (record["value"], record["when"]) == ("{'x'}", "Ellipsis")


def test_timestamps_are_utc_iso_with_microseconds_and_move_on_with_the_clock():
    stream = configured("json")
    log = structlog.get_logger("t")
    for _ in range(3):
        log.info("tick")
        time.sleep(0.6)  # across at least one whole second: the cached date text must follow
    stamps = [r["timestamp"] for r in records(stream)]
    parsed = [dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC) for s in stamps]
    now = dt.datetime.now(dt.UTC)
    assert parsed == sorted(parsed) and parsed[-1] - parsed[0] >= dt.timedelta(seconds=1.1)
    assert all(abs((now - p).total_seconds()) < 10 for p in parsed)


def test_a_query_after_an_already_redacted_url_is_still_redacted():
    """The redactor skips its scan when every `?` in a line starts `?<redacted>`; one that does not
    must still be found, wherever it stands in the line."""
    stream = configured("json")
    redacted = URL.split("?")[0] + "?<redacted>"
    structlog.get_logger("t").info("two", first=redacted, second=URL, third="why?")
    text = stream.getvalue()
    assert_clean(text)
    [record] = records(stream)
    assert record["first"] == record["second"] == redacted and record["third"] == "why?"


def test_context_from_many_context_variables_merges_as_structlogs_own():
    """merge_context looks each variable's name up once; the line's own fields still win, values
    unbound since are left out, and variables that are not structlog's never appear."""
    stream = configured("json")
    foreign = contextvars.ContextVar("not_structlog")
    foreign.set("hidden")
    structlog.contextvars.bind_contextvars(request_id="r-1", stack="s-1", outcome="from-context")
    log = structlog.get_logger("t")
    log.info("one", outcome="own")
    structlog.contextvars.unbind_contextvars("stack")
    log.info("two")
    one, two = records(stream)
    assert (one["request_id"], one["stack"], one["outcome"]) == ("r-1", "s-1", "own")
    assert "stack" not in two and two["outcome"] == "from-context"
    assert "not_structlog" not in stream.getvalue() and "hidden" not in stream.getvalue()


def test_a_ctrl_c_while_a_value_is_rendered_is_not_swallowed():
    """orjson wraps whatever the value's repr raises in its own error; a KeyboardInterrupt (or
    SystemExit) must still stop the daemon, not make the line fall back to the other encoder."""
    configured("json")

    class Interrupted:
        def __repr__(self) -> str:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        structlog.get_logger("t").info("odd", value=Interrupted())

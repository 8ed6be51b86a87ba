"""cfn_provider.logs.get_logger: the daemon's module loggers, assembled once per configuration, follow
every reconfiguration (another stream, another level, a test's capture) from the next line on."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from cfn_provider import logs
from tests.support.logging_state import kept_logging

log = logs.get_logger("worker")  # as the daemon's modules hold theirs: made once, at import


@pytest.fixture(autouse=True)
def restore_logging():
    with kept_logging():
        yield


def configured(level: str = "info") -> io.StringIO:
    stream = io.StringIO()
    logs.configure("json", level, stream)
    return stream


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_goes_to_the_stream_configured_last():
    first = configured()
    log.info("one", n=1)
    second = configured()
    log.warning("two", n=2)
    assert [(e["event"], e["logger"], e["level"]) for e in events(first)] == [("one", "worker", "info")]
    assert [(e["event"], e["n"]) for e in events(second)] == [("two", 2)]


def test_the_level_configured_last_filters():
    stream = configured("warning")
    log.info("dropped")
    log.error("kept")
    stream = configured("debug")
    log.debug("now kept")
    assert [e["event"] for e in events(stream)] == ["now kept"]


def test_a_capture_sees_the_lines_and_the_stream_gets_them_back_after():
    stream = configured()
    log.info("before")
    with capture_logs() as captured:
        log.info("captured", n=1)
        log.error("also", n=2)
    log.info("after")
    assert [(c["event"], c["log_level"]) for c in captured] == [("captured", "info"), ("also", "error")]
    assert [e["event"] for e in events(stream)] == ["before", "after"]


def test_after_a_reset_a_capture_still_sees_the_lines():
    configured()
    log.info("assembled under the first configuration")
    structlog.reset_defaults()
    with capture_logs() as captured:
        log.info("captured")
    assert [c["event"] for c in captured] == ["captured"]


def test_every_method_of_a_bound_logger_is_there():
    stream = configured("debug")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    log.bind(extra="x").critical("bound")
    failed, bound = events(stream)
    assert failed["event"] == "failed" and "ValueError: boom" in failed["exception"]
    assert (bound["event"], bound["extra"], bound["level"]) == ("bound", "x", "critical")


def test_a_module_logger_is_assembled_once_per_configuration():
    configured()
    log.info("first")
    assembled = log.bound()
    log.info("second")
    assert log.bound() is assembled
    configured()
    assert log.bound() is not assembled


def test_the_daemons_modules_log_through_their_cached_loggers():
    """A module-level `structlog.get_logger` would assemble a logger on every line again. Left:
    the logger handed to handlers (a plain structlog logger, as the SDK documents), and the CLI's
    one line on its way out."""
    package = Path(__file__).resolve().parents[1] / "daemon"  # the package's source (cfn_provider)
    calls = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "structlog.get_logger(" in path.read_text() and path.name != "logs.py"
    )
    assert calls == ["cli.py", "pipeline/runner.py", "sdk/call.py"]

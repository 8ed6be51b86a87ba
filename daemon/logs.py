"""Logging, configured once at start-up.

structlog renders JSON when stdout is not a TTY (journald, containers) and a console
format on a TTY. The daemon's own lines are rendered by structlog and written straight to the
stream (no stdlib LogRecord, handler or formatter per line: that bridge cost more CPU than the
rest of a line); in JSON one processor adds the context, level, logger name and timestamp, orjson
renders and the redactor runs (structlog's performance guide: few processors, a fast serializer;
`make bench`'s "log line" row). Standard-library loggers (botocore, aiohttp) go through the same processors
and renderer via ProcessorFormatter. As a last step every rendered line is redacted: URL
query strings (presigned credentials) and known secret values never reach the output,
whichever code logged them. Data values are never logged by the daemon at all, so
NoEcho holds by construction.

Exceptions, in every format, are rendered by one formatter (`traceback_text`: the standard
library's traceback, which never prints a frame's local variables) and then redacted with the
rest of the line. structlog's console renderer would otherwise pick rich (or better-exceptions)
when importable, and rich prints every frame's locals: a handler's property values, a presigned
ResponseURL, NoEcho Data. Which packages are installed never changes what a line may show.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
from typing import Any, Literal, TextIO, get_args

import orjson
import structlog

NOISY_LOGGERS = ("botocore", "aiobotocore", "urllib3", "werkzeug", "asyncio")  # held at WARNING or above

# The query runs to whitespace, a quote or a bracket; a renderer's escape pair (\u00e9, \\) stays
# inside it, but an escaped quote (\") ends it, so JSON-rendered lines stay valid JSON.
_URL_IN_TEXT = re.compile(r"(https?://[^\s?#\"'<>\\]+)\?(?!<redacted>)(?:[^\s#\"'<>\\]|\\[^\"\s])*")


_SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "ALIBABA_CLOUD_SECURITY_TOKEN",
)
LogFormat = Literal["auto", "json", "console"]  # --log-format (auto: console on a terminal, JSON otherwise)
LogLevel = Literal["debug", "info", "warning", "error"]  # --log-level
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)
_registered: list[str] = []  # secrets read from files at run time (cfn_provider.transports.mns credentials)


def register_secret(value: str) -> None:
    """Redact `value` from every log line from now on (whatever logger wrote it)."""
    if value and len(value) >= 8 and value not in _registered:
        _registered.append(value)


class _Redactor:
    def __init__(self) -> None:
        self.secrets = [v for v in (os.environ.get(k) for k in _SECRET_ENV) if v and len(v) >= 8]

    def __call__(self, _logger: Any, _name: str, line: Any) -> str:
        """A processor placed after the renderer: `line` is the rendered text (typed Any, as
        structlog types every processor's third argument as the event dict)."""
        text = redact_text(line)
        for secret in (*self.secrets, *_registered):
            if secret in text:
                text = text.replace(secret, "<redacted>")
        return text


class _QuietStreamHandler(logging.StreamHandler[TextIO]):
    """logging's own error path prints the record's raw arguments to stderr, past the redactor;
    say only which logger failed."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802
        try:
            sys.stderr.write(f"cfn-provider: a log record from {record.name!r} could not be formatted\n")
        except Exception:  # noqa: BLE001
            pass


class _StreamLogger:
    """structlog's logger for the daemon's own lines: each rendered line written straight to the
    stream, under a lock shared with the stdlib handler's stream (handler threads log too)."""

    def __init__(self, stream: TextIO, lock: threading.RLock, name: str | None = None):
        self.stream, self.lock, self.name = stream, lock, name

    def msg(self, line: str) -> None:
        try:
            with self.lock:
                self.stream.write(line + "\n")
                self.stream.flush()
        except Exception:  # noqa: BLE001 - as logging's handler: say which logger, never the line
            _say_unwritable(self.name)

    log = debug = info = warn = warning = error = err = critical = fatal = exception = msg


class _StreamLoggerFactory:
    def __init__(self, stream: TextIO, lock: threading.RLock):
        self.stream, self.lock = stream, lock
        self.unnamed = structlog.stdlib.LoggerFactory(ignore_frame_names=[__name__])

    def __call__(self, *args: Any) -> _StreamLogger:
        if args:
            return _StreamLogger(self.stream, self.lock, str(args[0]))
        # unnamed (a handler's structlog.get_logger()): the caller's module, as the stdlib bridge named it
        return _StreamLogger(self.stream, self.lock, self.unnamed().name)


class _Render:
    """The renderer, then the redactor; a line that cannot be rendered is dropped and said so on
    stderr (by logger name only), as logging's handler does for a stdlib record."""

    def __init__(self, renderer: Any, redactor: _Redactor):
        self.renderer, self.redactor = renderer, redactor

    def __call__(self, logger: Any, name: str, event_dict: Any) -> str:
        try:
            return self.redactor(logger, name, self.renderer(logger, name, event_dict))
        except Exception:  # noqa: BLE001
            _say_unwritable(getattr(logger, "name", None))
            raise structlog.DropEvent from None


class _JsonLine:
    """The JSON format's renderer for the daemon's own lines: the shared processors (context, level,
    logger name, timestamp) run here in one call, the exception is rendered only when there is one,
    then the line (each processor structlog calls costs as much as these small steps themselves).
    `_Render` redacts the line and drops one that cannot be rendered."""

    def __init__(self, steps: list[Any]):
        self.steps = steps
        self.exception = structlog.processors.ExceptionRenderer(traceback_text)

    def __call__(self, logger: Any, name: str, event_dict: Any) -> str:
        for step in self.steps:
            event_dict = step(logger, name, event_dict)
        if "exc_info" in event_dict:
            event_dict = self.exception(logger, name, event_dict)
        return _json_line(event_dict)


def _say_unwritable(name: str | None) -> None:
    try:
        sys.stderr.write(f"cfn-provider: a log record from {name!r} could not be formatted\n")
    except Exception:  # noqa: BLE001
        pass


# The JSON format's serializer, as structlog's performance guide has it: orjson (a tenth of the
# standard library encoder's time per line), compact separators, UTF-8 text. What orjson will not
# encode (an integer past 64 bits, a string holding a lone surrogate) goes to the standard
# library's encoder, so no line is lost to its content.
_ENCODER = json.JSONEncoder(default=repr)
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def _json_line(value: Any, **_: Any) -> str:
    """structlog's JSONRenderer serializer: a value JSON cannot hold is written as its repr."""
    try:
        return orjson.dumps(value, default=repr, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError as exc:
        if not isinstance(exc.__cause__, Exception | None):  # orjson wraps even a Ctrl-C in repr: let it out
            raise exc.__cause__ from None
        return _ENCODER.encode(value)


_PREFIX = structlog.contextvars.STRUCTLOG_KEY_PREFIX
_context_names: dict[contextvars.ContextVar[Any], str | None] = {}


def merge_context(_logger: Any, _name: str, event_dict: Any) -> Any:
    """structlog.contextvars.merge_contextvars (the values bound with bind_contextvars, the line's own
    fields first), each variable's name looked up once instead of sliced on every line."""
    names = _context_names
    for var, value in contextvars.copy_context().items():
        name = names.get(var, 0)
        if name == 0:
            if len(names) > 4096:  # a library making a ContextVar per call must not grow this forever
                names.clear()
            name = names[var] = var.name[len(_PREFIX) :] if var.name.startswith(_PREFIX) else None
        if name is not None and value is not Ellipsis:
            event_dict.setdefault(name, value)
    return event_dict


_second = [-1, ""]  # the last whole second and its ISO text: one strftime a second


def add_timestamp(_logger: Any, _name: str, event_dict: Any) -> Any:
    """structlog's TimeStamper(fmt="iso", utc=True), always with microseconds, and the date and time
    formatted once a second instead of once a line: `2026-11-28T01:02:03.456789Z`."""
    now = time.time()
    whole, text = _second
    if int(now) != whole:  # a race between threads here writes the same text twice: harmless
        whole, text = int(now), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        _second[:] = whole, text
    event_dict["timestamp"] = "%s.%06dZ" % (text, (now - whole) * 1e6)  # noqa: UP031 - the faster here
    return event_dict


def traceback_text(exc_info: Any) -> str:
    """An exception as the standard library prints it (chained causes included), never a frame's
    local variables: the one exception formatter of every format (JSON's `exception` field, the
    console, the stdlib bridge). The rendered line is redacted after it (`_Redactor`)."""
    return "".join(traceback.format_exception(*exc_info)).rstrip("\n")


def _console_traceback(sio: TextIO, exc_info: Any) -> None:
    """ConsoleRenderer's exception_formatter: `traceback_text`, never rich's (which prints locals)."""
    sio.write("\n" + traceback_text(exc_info))


_STACK_NAME = "_stack_name"  # where the console renderer finds a line's `stack` field (see _console_renderer)
_STACK_DUMP = "Stack (most recent call last)"  # how structlog's and logging's stack_info dumps begin


def _console_renderer(colors: bool) -> Any:
    """structlog's ConsoleRenderer, showing a line's `stack` field (the request's stack name) as
    `stack=NAME` among the other fields: the renderer itself takes `stack` for a stack_info dump,
    printed as a bare line (and a `=====` rule before a traceback)."""
    renderer = structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=_console_traceback)
    as_field = renderer.columns[0].formatter  # the renderer's own key=value formatter

    def stack_field(key: str, value: object) -> str:  # noqa: ARG001 - the ColumnFormatter signature
        return as_field("stack", value)

    renderer.columns = [*renderer.columns, structlog.dev.Column(_STACK_NAME, stack_field)]

    def render(logger: Any, name: str, event_dict: Any) -> str:
        stack = event_dict.get("stack")
        if stack is not None and not str(stack).startswith(_STACK_DUMP):
            event_dict[_STACK_NAME] = event_dict.pop("stack")
        return renderer(logger, name, event_dict)

    return render


class CachedLogger:
    """`structlog.get_logger(name)` for the daemon's own modules, assembled once per configuration.

    structlog's lazy proxy assembles a bound logger on every line unless `cache_logger_on_first_use`
    is set, and a logger cached that way keeps the configuration it first met for good (a later
    `configure` with another stream or level would not reach it, nor would a test's capture).
    This one is assembled again whenever the configuration's processors, wrapper class, logger
    factory or context class is another object than the one it was assembled under, so it follows
    every `configure`, `reset_defaults` and `capture_logs`. A line costs a sixth less (1.5 µs)."""

    __slots__ = ("name", "_bound", "_under")

    def __init__(self, name: str) -> None:
        self.name = name
        self._bound: Any = None
        self._under: dict[str, Any] = {}

    def bound(self) -> Any:
        """The bound logger for the configuration in force now."""
        config, under = structlog.get_config(), self._under
        if (
            self._bound is None
            or config["processors"] is not under["processors"]
            or config["wrapper_class"] is not under["wrapper_class"]
            or config["logger_factory"] is not under["logger_factory"]
            or config["context_class"] is not under["context_class"]
        ):
            self._bound, self._under = structlog.get_logger(self.name).bind(), config
        return self._bound

    # The usual methods as properties (the bound logger's own method, a line's fields passed once)
    debug = property(lambda self: self.bound().debug)
    info = property(lambda self: self.bound().info)
    warning = property(lambda self: self.bound().warning)
    error = property(lambda self: self.bound().error)
    exception = property(lambda self: self.bound().exception)

    def __getattr__(self, name: str) -> Any:  # everything else a bound logger has (bind, critical, ...)
        return getattr(self.bound(), name)


def get_logger(name: str) -> CachedLogger:
    """The logger of one of the daemon's own modules (`CachedLogger`)."""
    return CachedLogger(name)


def configure(fmt: LogFormat = "auto", level: LogLevel = "info", stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    shared: list[Any] = [
        merge_context,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        add_timestamp,
    ]
    renderer: Any
    redactor = _Redactor()
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
        own: list[Any] = [_Render(_JsonLine(list(shared)), redactor)]  # before the stdlib chain's exception step
        shared.append(structlog.processors.ExceptionRenderer(traceback_text))
    else:
        renderer = _console_renderer(colors=stream.isatty())
        own = [*shared, _Render(renderer, redactor)]
    handler = _QuietStreamHandler(stream)
    lock = handler.lock or threading.RLock()  # one lock per stream: stdlib and structlog lines never interleave
    structlog.configure(
        processors=own,
        logger_factory=_StreamLoggerFactory(stream, lock),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        cache_logger_on_first_use=False,  # so tests can re-configure (capture_logs),
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer, redactor],
    )
    # logging's documented optimisations: no caller lookup, thread or process fields per record
    # (the lines carry none of them); the caller lookup alone walked the stack on every line
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def redact_text(text: str) -> str:
    """Redact the query string of every http(s) URL inside free text."""
    at = text.find("?")
    while at != -1:  # most lines hold no query, or only ones already redacted: no regex scan for those
        if not text.startswith("<redacted>", at + 1):
            return _URL_IN_TEXT.sub(r"\1?<redacted>", text)
        at = text.find("?", at + 1)
    return text

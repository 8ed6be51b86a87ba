"""Logging, configured once at start-up.

structlog renders JSON when stdout is not a TTY (journald, containers) and a console
format on a TTY. Standard-library loggers (botocore, aiohttp) go through the same
pipeline via ProcessorFormatter. As a last step every rendered line is redacted: URL
query strings (presigned credentials) and known secret values never reach the output,
whichever code logged them. Data values are never logged by the daemon at all, so
NoEcho holds by construction.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

import structlog

from .trust.urls import redact_text

_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
               "ALIBABA_CLOUD_SECURITY_TOKEN")
_registered: list[str] = []  # secrets read from files at run time (cfn_provider.transports.mns credentials)


def register_secret(value: str) -> None:
    """Redact `value` from every log line from now on (whatever logger wrote it)."""
    if value and len(value) >= 8 and value not in _registered:
        _registered.append(value)


class _Redactor:
    def __init__(self) -> None:
        self.secrets = [v for v in (os.environ.get(k) for k in _SECRET_ENV) if v and len(v) >= 8]

    def __call__(self, _logger: Any, _name: str, line: str) -> str:
        line = redact_text(line)
        for secret in (*self.secrets, *_registered):
            line = line.replace(secret, "<redacted>")
        return line


class _QuietStreamHandler(logging.StreamHandler):
    """logging's own error path prints the record's raw arguments to stderr, past the redactor;
    say only which logger failed."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802
        try:
            sys.stderr.write(f"cfn-provider: a log record from {record.name!r} could not be formatted\n")
        except Exception:  # noqa: BLE001
            pass


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # so tests can re-configure (capture_logs),
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer, _Redactor()],
    )
    # logging's documented optimisations: no caller lookup, thread or process fields per record
    # (the lines carry none of them); the caller lookup alone walked the stack on every line
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = _QuietStreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("botocore", "aiobotocore", "urllib3", "werkzeug", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))

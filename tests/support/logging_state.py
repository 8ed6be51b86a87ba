"""The process's logging as a test found it, given back after it: `cfn_provider.logs.configure`
replaces the root logger's handlers and levels and structlog's configuration, for the process."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

from cfn_provider.logs import NOISY_LOGGERS


@contextmanager
def kept_logging() -> Iterator[None]:
    """Root's handlers and level, the noisy loggers' levels, structlog's configuration and its
    context variables: as they were on entry, once the block ends."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    structlog.contextvars.clear_contextvars()
    try:
        yield
    finally:
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in noisy.items():
            logging.getLogger(name).setLevel(was)

"""The Reason a request gets when its handler raised: what failed, and where its traceback is.

`KeyError: 'Size' (traceback in the provider's log: handler.raised)`: the exception's type and
message (a bare `'Size'` says nothing), and the log line that carries the traceback (`simulate`
shows it under its summary, or with --logs). The message is the handler's own; the daemon adds no
property value of its own to it.

An exception whose class sets `reason_is_message = True` is an answer rather than a crash (the
SDK's PropertyError, a Lambda function's FAILED): its message alone is the Reason.
"""

from __future__ import annotations

TRACEBACK_HINT = "(traceback in the provider's log: handler.raised)"


def reason(exc: BaseException) -> str:
    """The Reason for a request whose handler (or poll function) raised `exc`."""
    message = str(exc)
    if getattr(exc, "reason_is_message", False):
        return message or type(exc).__name__
    name = type(exc).__name__
    return f"{name}: {message} {TRACEBACK_HINT}" if message else f"{name} {TRACEBACK_HINT}"

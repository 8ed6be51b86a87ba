"""Ctrl-C during `simulate`, never lost.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives; when that is a
finalizer (`__del__`, a weakref callback) the exception is printed as "ignored" and dropped, and a
simulation waiting for a long-running resource would wait on, for up to its hour. So SIGINT also
sets a flag, and the waits check it (`check`) on every turn: a Ctrl-C the interpreter dropped is
raised again there, at a point where the operation's own handler sees it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_pressed = threading.Event()


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _pressed.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def caught() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt as Python's own handler does, and is remembered for `check`
    (in the main thread only: elsewhere no handler can be installed, nor is one needed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _pressed.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed and its exception has not been handled."""
    if _pressed.is_set():
        _pressed.clear()
        raise KeyboardInterrupt


def handled() -> None:
    """The operation has its KeyboardInterrupt: nothing is left to raise again."""
    _pressed.clear()

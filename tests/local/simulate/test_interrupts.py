"""cfn_provider.local.simulate.interrupts: a Ctrl-C that Python drops is raised again by the waits."""

from __future__ import annotations

import gc
import os
import signal
import sys

import pytest

from cfn_provider.local.simulate import interrupts


class SignalledWhileFinalized:
    """Receives SIGINT inside __del__, where Python prints a KeyboardInterrupt as ignored and drops it."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next check of the eval loop, inside this method
            pass


def test_a_ctrl_c_dropped_inside_a_finalizer_is_raised_by_the_next_check(monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    with interrupts.caught():
        SignalledWhileFinalized()  # no reference kept: finalized here
        gc.collect()
        assert [type(d.exc_value) for d in dropped] == [KeyboardInterrupt]  # what Python itself did with it
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        interrupts.check()  # raised once, not again


def test_a_ctrl_c_the_operation_handled_is_not_raised_again():
    with interrupts.caught():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
        interrupts.handled()
        interrupts.check()


def test_the_previous_handler_is_back_afterwards():
    before = signal.getsignal(signal.SIGINT)
    with interrupts.caught():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before

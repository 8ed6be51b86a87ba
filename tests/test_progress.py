"""InProgress (cfn_provider.progress): what a long-running action returns, and its checks."""

from __future__ import annotations

import pytest

import cfn_provider
from cfn_provider.progress import MAX_PROGRESS, InProgress, poll_function


def test_it_is_public_from_the_top():
    assert cfn_provider.InProgress is InProgress


def test_after_is_clamped_and_checked():
    assert InProgress(after=0).after == 1.0 and InProgress(after=10**9).after == 3600.0
    assert InProgress().after == 15.0
    for bad in ("soon", float("nan"), float("inf")):
        with pytest.raises(TypeError, match="after"):
            InProgress(after=bad)
    with pytest.raises(TypeError, match="physical_id"):
        InProgress(physical_id="")


def test_progress_must_be_json_and_small():
    assert InProgress(progress={"b": 1, "a": [1, "x"]}).progress_json() == '{"a":[1,"x"],"b":1}'
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        InProgress(progress={"x": object()}).progress_json()
    with pytest.raises(ValueError, match="the limit is"):
        InProgress(progress="x" * MAX_PROGRESS).progress_json()


def test_the_poll_function_is_the_actions_own_else_is_complete():
    class Both:
        def poll_create(self, e, c, p): ...
        def is_complete(self, e, c, p): ...

    both = Both()
    assert poll_function(both, "Create") == both.poll_create
    assert poll_function(both, "Delete") == both.is_complete
    assert poll_function(object(), "Create") is None

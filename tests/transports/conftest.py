"""The transports' tests: MNS shares the ROS dialect's local MNS server and daemon fixtures; `captured`
is the Settings `cfn-provider run` would serve (the web listener's own fixtures: tests/intake/conftest.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.dialects.conftest import json_log, mns, mns_env, ros_daemon  # noqa: F401 - fixtures


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`cfn-provider run` parses its options into Settings and stops there: the Settings it would serve."""
    import cfn_provider.cli as cli

    settings: list[Any] = []
    monkeypatch.setattr(cli, "_serve", lambda s: settings.append(s) or 0)
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)
    return settings

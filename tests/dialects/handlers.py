"""A handler for the ROS tests: records the time the daemon gives it (context.remaining())."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

remaining: list[float] = []


def _run(event: Mapping[str, Any], context: Any) -> Any:
    remaining.append(context.remaining())
    return None


create = update = delete = _run

"""`Custom::Started`, for the web listener's tests: says it started (a line "RequestId" in
$CFN_TEST_STARTED_FILE), then behaves as tests.support.handlers.stamped: sleeps SleepSeconds, records
the completed call, and answers with a fresh nonce in Data (two runs give two different answers)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tests.support.handlers import stamped


def _run(event: Mapping[str, Any], context: Any = None) -> Any:
    path = os.environ.get("CFN_TEST_STARTED_FILE")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{event['RequestId']}\n")
    return stamped._run(event, context)


create = update = delete = _run

"""`Custom::Leaky`, for the log leak tests: a handler that raises while its frame's local variables
hold a property value (`Password`), the request's presigned ResponseURL and the NoEcho Data it was
about to return. A traceback renderer that prints locals (rich's) shows all three."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOECHO_VALUE = "noecho-Data-7f3a9c1e5b2d8046"


def create(event: Mapping[str, Any], context: Any = None) -> Any:
    password = event["ResourceProperties"]["Password"]  # a property value
    response_url = event["ResponseURL"]  # presigned: its signature is a credential
    data = {"Secret": NOECHO_VALUE}  # NoEcho Data
    noecho = True
    if password and response_url and data and noecho:
        raise RuntimeError("the backend refused the request")
    return data


update = delete = create

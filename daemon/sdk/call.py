"""The Call an SDK action receives: typed reads of the request, the daemon's context, and helpers
(`call.region`, `call.log`, `call.session`, `call.client(...)`, `call.remaining()`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import structlog

from ..pipeline.request import RequestFields
from ..trust.tenants import DEFAULT as DEFAULT_PRINCIPAL

__all__ = ["Call"]


class Call(RequestFields):
    """What an SDK action gets besides the properties: the request, the daemon's context, helpers."""

    def __init__(self, event: Mapping[str, Any], context: Any = None, *, replacing: bool = False):
        self.event = event  # the request exactly as the daemon received it (read-only)
        self.context = context  # cfn_provider.pipeline.runner.Context, or None when called without one
        self.replacing = replacing  # True while `create` runs for an Update that replaces

    def _mapping(self) -> Mapping[str, Any]:
        return self.event

    @property
    def physical_id(self) -> str | None:
        """The existing resource's id (Update, Delete); None on Create."""
        return self._str("PhysicalResourceId") or None

    @property
    def principal(self) -> str:
        """Who sent the request, as its transport proved (cfn_provider.trust.tenants); `default` when
        called without the daemon's context."""
        principal = getattr(self.context, "principal", None)
        return principal if isinstance(principal, str) and principal else DEFAULT_PRINCIPAL

    @property
    def region(self) -> str | None:
        """The stack's region, from its StackId ARN (None when the StackId is not an ARN)."""
        parts = self.stack_id.split(":")
        return parts[3] if len(parts) > 5 and parts[0] == "arn" and parts[3] else None

    @property
    def log(self) -> Any:
        log = getattr(self.context, "log", None)
        return log if log is not None else structlog.get_logger("handler")

    @property
    def session(self) -> Any:
        """The daemon's shared aiobotocore session (a new one when called without the daemon)."""
        session = getattr(self.context, "session", None)
        if session is None:
            import aiobotocore.session

            session = aiobotocore.session.get_session()
            if self.context is not None:
                try:
                    self.context.session = session
                except AttributeError:
                    pass
        return session

    def client(self, service: str, **kwargs: Any) -> Any:
        """`async with call.client("ssm") as ssm:` in the stack's region unless region_name is given."""
        kwargs.setdefault("region_name", self.region)
        return self.session.create_client(service, **kwargs)

    def remaining(self) -> float:
        """Seconds left before the daemon answers FAILED (timed out) instead."""
        remaining = getattr(self.context, "remaining", None)
        return remaining() if callable(remaining) else math.inf

    def new_physical_id(self) -> str:
        """The id the daemon would give a Create that returns none: stack, logical id, RequestId hash."""
        from ..pipeline.request import Request
        from ..pipeline.response import default_physical_id

        # Request.wire is typed FrozenDict (the daemon's own); default_physical_id only reads it
        return default_physical_id(Request(wire=self.event))  # type: ignore[arg-type]

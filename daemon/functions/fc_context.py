"""What an `fc:` function is given, as Function Compute gives it: its process environment and each call's context.

Only what its configuration gives it (`[functions."TYPE"]`, `--function TYPE=...`), never the
daemon's own credentials:

- environment: from the host only PATH, locale, HOME, TZ, TMPDIR and proxy settings (no AWS_*,
  ALIBABA_CLOUD_*, CFN_PROVIDER_* or PYTHON* variable of the daemon's); FC's own FC_FUNC_CODE_PATH,
  FC_FUNCTION_NAME, FC_FUNCTION_HANDLER, FC_FUNCTION_MEMORY_SIZE and FC_SERVICE_NAME (default
  `cfn-provider`); then its configured `environment`, over all of those. Its credentials are the
  configured ALIBABA_CLOUD_ACCESS_KEY_ID, ALIBABA_CLOUD_ACCESS_KEY_SECRET and ALIBABA_CLOUD_SECURITY_TOKEN
  (the variables FC 3.0 sets from the function's role), or none;
- context (cfn_provider.functions.fc_runtime.FCContext): `request_id` a new id per call;
  `credentials` those same three values (empty when not configured); `function` name, handler,
  memory (memory_mb, else the machine's), timeout (whole seconds left to the request's deadline as
  the call starts) and initializer; `service` FC_SERVICE_NAME, log_project and log_store (the
  `log_group` and `log_stream` settings, else empty), qualifier `LATEST`, version_id empty;
  `region` FC_REGION when configured, else the request's RegionId; `account_id` FC_ACCOUNT_ID when
  configured, else the request's ResourceOwnerId.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

from .environ import LOOPBACK_HOSTS, PASSED, machine_memory_mb
from .settings import FunctionSettings

DEFAULT_SERVICE = "cfn-provider"
KEY_ID, KEY_SECRET = "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
TOKEN = "ALIBABA_CLOUD_SECURITY_TOKEN"


def fc_environment(
    *, name: str, handler: str, code: str, settings: FunctionSettings, host: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The process environment of one instance (trust bundles are added by the caller)."""
    host = os.environ if host is None else host
    env = {k: v for k, v in host.items() if k in PASSED or k.startswith("LC_")}
    env.update(
        {
            "FC_FUNC_CODE_PATH": code,
            "FC_FUNCTION_NAME": name,
            "FC_FUNCTION_HANDLER": handler,
            "FC_FUNCTION_MEMORY_SIZE": str(settings.memory_mb or machine_memory_mb()),
            "FC_SERVICE_NAME": DEFAULT_SERVICE,
        }
    )
    env.update(settings.environment)
    for key in ("NO_PROXY", "no_proxy"):
        if key in env or any(k.lower().endswith("_proxy") for k in env):
            env[key] = ",".join(filter(None, (env.get(key, ""), LOOPBACK_HOSTS)))
    return env


def fc_context(
    event: Mapping[str, Any], *, name: str, handler: str, settings: FunctionSettings, request_id: str, deadline: float
) -> dict[str, Any]:
    """The fields of one call's FCContext (see the module docstring)."""
    configured = settings.environment
    return {
        "request_id": request_id,
        "credentials": {
            "access_key_id": configured.get(KEY_ID, ""),
            "access_key_secret": configured.get(KEY_SECRET, ""),
            "security_token": configured.get(TOKEN, ""),
        },
        "function": {
            "name": name,
            "handler": handler,
            "memory": settings.memory_mb or machine_memory_mb(),
            "timeout": max(1, math.ceil(deadline - time.monotonic())),
            "initializer": settings.initializer or "",
        },
        "service": {
            "name": configured.get("FC_SERVICE_NAME", DEFAULT_SERVICE),
            "log_project": settings.log_group or "",
            "log_store": settings.log_stream or "",
            "qualifier": "LATEST",
            "version_id": "",
        },
        "region": configured.get("FC_REGION") or str(event.get("RegionId") or ""),
        "account_id": configured.get("FC_ACCOUNT_ID") or str(event.get("ResourceOwnerId") or ""),
    }

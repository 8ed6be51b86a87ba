"""The environment variables a `lambda:` function's process starts with, as Lambda's would.

Not the daemon's environment: a function sees
- what it needs from the host: PATH, locale, HOME, TZ, TMPDIR, proxy settings (with the loopback
  listener added to NO_PROXY), and the AWS SDK's own AWS_* settings (region, credentials when the
  daemon has them in its environment, endpoints, profile and config files), never the daemon's
  CFN_PROVIDER_*, ALIBABA_CLOUD_* or PYTHON* settings;
- what Lambda sets: AWS_REGION and AWS_DEFAULT_REGION, AWS_LAMBDA_FUNCTION_NAME,
  AWS_LAMBDA_FUNCTION_VERSION, AWS_LAMBDA_FUNCTION_MEMORY_SIZE, AWS_LAMBDA_LOG_GROUP_NAME,
  AWS_LAMBDA_LOG_STREAM_NAME, AWS_LAMBDA_INITIALIZATION_TYPE, AWS_EXECUTION_ENV, LAMBDA_TASK_ROOT
  and _HANDLER;
- its own `environment` from the daemon's configuration (what the template's
  Environment.Variables held), over all of the above but Lambda's reserved names;
- SSL_CERT_FILE and REQUESTS_CA_BUNDLE: what it trusted before plus the loopback listener's CA.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

PASSED = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)
LOOPBACK_HOSTS = "127.0.0.1,localhost"
_region: list[str | None] = []


def host_region() -> str | None:
    """The region Lambda would set: AWS_REGION, AWS_DEFAULT_REGION, else the AWS configuration's."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    if not _region:
        try:
            import botocore.session

            _region.append(botocore.session.get_session().get_config_variable("region"))
        except Exception:  # noqa: BLE001 - no region is a normal configuration
            _region.append(None)
    return _region[0]


def function_environment(
    *,
    name: str,
    handler: str,
    code: str,
    memory_mb: int | None,
    log_group: str,
    log_stream: str,
    configured: Mapping[str, str],
    host: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The process environment of one execution environment (trust bundles are added by the caller)."""
    host = os.environ if host is None else host
    env = {
        k: v
        for k, v in host.items()
        if k in PASSED or k.startswith("LC_") or (k.startswith("AWS_") and not k.startswith("AWS_LAMBDA_"))
    }
    region = host_region()
    if region:
        env.setdefault("AWS_REGION", region)
        env.setdefault("AWS_DEFAULT_REGION", region)
    env.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb or machine_memory_mb()),
            "AWS_LAMBDA_LOG_GROUP_NAME": log_group,
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
            "LAMBDA_TASK_ROOT": code,
            "_HANDLER": handler,
        }
    )
    env.update(configured)
    for key in ("NO_PROXY", "no_proxy"):
        if key in env or any(k.lower().endswith("_proxy") for k in env):
            env[key] = ",".join(filter(None, (env.get(key, ""), LOOPBACK_HOSTS)))
    return env


def machine_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20)
    except (ValueError, OSError, AttributeError):
        return 0

"""Custom::Secret, for the redaction suite: returns secrets as NoEcho Data, and can fail loudly.

The secrets are not in the request: each is `CFN_TEST_NOECHO_SECRET` + "-" + RequestType +
"-" + a per-key suffix, so the test knows every value the daemon was handed and can look for
it in the daemon's output.

ResourceProperties:
- `LogBadFormat: "yes"`: a standard-library log call with a broken format string whose
  arguments are the ResponseURL and the secret access key (a careless library: `logging`
  then reports the error itself, arguments included, on stderr).
- `Fail: quote-url`: raise an exception whose message quotes the request's ResponseURL (with
  its presigned signature), the way a careless handler reports a failed upload.
- `LogSecretKey: "yes"`: before answering, log the process's AWS_SECRET_ACCESS_KEY through
  the handler's structlog logger and through a standard-library logger (a careless handler or
  library; the daemon's last-step redaction must still keep it out of the output).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

DATA_KEYS = ("Password", "ApiToken")


def secret(request_type: str, key: str, seed: str | None = None) -> str:
    return f"{seed or os.environ['CFN_TEST_NOECHO_SECRET']}-{request_type}-{key}"


def _run(event: Mapping[str, Any], context: Any) -> Any:
    props = event.get("ResourceProperties") or {}
    if props.get("LogSecretKey") == "yes":
        key = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        context.log.debug("handler.credentials", secret_access_key=key, response_url=event["ResponseURL"])
        logging.getLogger("thirdparty.uploader").warning("using secret %s for %s", key, event["ResponseURL"])
    if props.get("LogBadFormat") == "yes":
        key = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        logging.getLogger("thirdparty.uploader").warning("retry %s with key %s (attempt %d)", event["ResponseURL"], key)
    if props.get("Fail") == "quote-url":
        raise RuntimeError(
            f"upload to {event['ResponseURL']} refused: 403 SignatureDoesNotMatch (url was {event['ResponseURL']!r})"
        )
    if event["RequestType"] == "Delete":
        return None
    return {
        "PhysicalResourceId": f"secret-{event['LogicalResourceId']}",
        "Data": {key: secret(event["RequestType"], key) for key in DATA_KEYS},
        "NoEcho": True,
    }


create = update = delete = _run

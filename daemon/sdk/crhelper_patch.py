"""Intercepting crhelper's send: a crhelper function run by the `lambda:` adapter answers through the
daemon, not by PUTting to the ResponseURL itself.

`patch()` changes the installed crhelper (tested with 2.0.12) at its narrowest points, once per
process; an unknown crhelper stops the start (CrhelperUnsupported) rather than let it answer
behind the daemon's back. Outside a `lambda:` invocation crhelper behaves as it always did.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from typing import Any, Callable, Mapping

from .lambda_context import Answer, current, deliver

__all__ = ["POLLING_REASON", "CrhelperUnsupported", "PollingNotSupported", "patch"]


class CrhelperUnsupported(RuntimeError):
    """The installed crhelper does not have the send path this adapter intercepts."""


class PollingNotSupported(Exception):
    """A crhelper poll function is registered for the request's type: not supported yet."""


POLLING_REASON = ("crhelper polling (@helper.poll_create / poll_update / poll_delete) is not supported by "
                  "cfn-provider yet; the function was not run. Serve this resource without its poll functions, "
                  "or keep it on Lambda for now")


def patch() -> None:
    """Make crhelper answer through the daemon, at its narrowest points:
    - `CfnResource._send`'s `send_response` default (crhelper.utils._send_response, bound when the
      class was defined): the body goes to `deliver` instead of an HTTPS PUT with endless retries;
    - `_crhelper_init`: a request whose type has a poll function is FAILED through crhelper's own
      init-failure path before any of its functions run (polling is not supported yet);
    - `_wait_for_cwlogs`' `sleep` default: no two-minute wait on Delete for CloudWatch Logs;
    - `log_helper.setup`: crhelper would set the root logger's level and formatters (and its
      JSON formatter would drop the daemon's redaction); the daemon's logging stays as it is."""
    if importlib.util.find_spec("crhelper") is None:
        return
    from crhelper import log_helper, resource_helper, utils

    # crhelper's stubs (its *.pyi) leave out the private names patched here: the class is Any to mypy
    cls: Any = resource_helper.CfnResource
    if getattr(cls, "_cfn_provider_patched", False):
        return
    send_defaults: tuple[Any, ...] = getattr(cls._send, "__defaults__", None) or ()
    wait_defaults: tuple[Any, ...] = getattr(getattr(cls, "_wait_for_cwlogs", None), "__defaults__", None) or ()
    # utils._send_response is private too: crhelper's utils.pyi does not list it
    if (not send_defaults or send_defaults[-1] is not utils._send_response  # type: ignore[attr-defined]
            or len(wait_defaults) != 1
            or not callable(getattr(cls, "_crhelper_init", None)) or not callable(getattr(log_helper, "setup", None))):
        version = getattr(sys.modules.get("crhelper"), "__version__", None) or _dist_version("crhelper")
        raise CrhelperUnsupported(f"crhelper {version} is installed but its send path is not the one cfn-provider "
                                  "intercepts (tested with crhelper 2.0.12); pin crhelper==2.0.12")
    cls._send.__defaults__ = (*send_defaults[:-1], _crhelper_send)
    cls._wait_for_cwlogs.__defaults__ = (_skip_in_adapter(wait_defaults[0]),)
    init = cls._crhelper_init

    @functools.wraps(init)
    def _crhelper_init(self: Any, event: Any, context: Any) -> Any:
        kind = str(event.get("RequestType", "")).lower() if isinstance(event, Mapping) else ""
        if current() is None or not getattr(self, f"_poll_{kind}_func", None):
            return init(self, event, context)
        saved = self._init_failed
        self._init_failed = PollingNotSupported(POLLING_REASON)
        try:
            return init(self, event, context)  # sends FAILED with that reason, runs no function
        finally:
            self._init_failed = saved

    cls._crhelper_init = _crhelper_init
    log_helper.setup = _keep_daemon_logging
    cls._cfn_provider_patched = True


def _crhelper_send(response_url: Any, response_body: Any, ssl_verify: Any = None) -> None:
    body = response_body if isinstance(response_body, Mapping) else {}
    deliver(Answer(status=body.get("Status"), reason=body.get("Reason"), physical_id=body.get("PhysicalResourceId"),
                   data=body.get("Data"), no_echo=bool(body.get("NoEcho")), via="crhelper"),
            ids=(body.get("StackId"), body.get("RequestId")))


def _skip_in_adapter(sleep: Callable[[float], Any]) -> Callable[[float], Any]:
    def wait(seconds: float) -> Any:
        if current() is None:
            return sleep(seconds)
        return None  # the daemon's logs are not CloudWatch's: nothing to wait for

    return wait


def _keep_daemon_logging(*_: Any, **__: Any) -> None:
    """crhelper.log_helper.setup under the daemon: the operator's --log-level and format apply."""


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "?"

"""Intercepting crhelper's send and its polling: a crhelper function run by the `lambda:` adapter
answers through the daemon, not by PUTting to the ResponseURL itself, and is polled by the
daemon's scheduler, not by a CloudWatch Events rule.

`patch()` changes the installed crhelper (tested with 2.0.12) at its narrowest points, once per
process; an unknown crhelper stops the start (CrhelperUnsupported) rather than let it answer
behind the daemon's back. Outside a `lambda:` invocation crhelper behaves as it always did.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, Callable, Mapping

from .lambda_context import Answer, PollRequest, current, deliver

__all__ = ["CrhelperUnsupported", "patch"]

_POLLING = ("_polling_init", "_setup_polling", "_remove_polling")


class CrhelperUnsupported(RuntimeError):
    """The installed crhelper does not have the send path this adapter intercepts."""


def patch() -> None:
    """Make crhelper answer through the daemon, at its narrowest points:
    - `CfnResource._send`'s `send_response` default (crhelper.utils._send_response, bound when the
      class was defined): the body goes to `deliver` instead of an HTTPS PUT with endless retries;
    - `_setup_polling` / `_remove_polling`: the event gets CrHelperPoll and CrHelperData as crhelper
      gives them, but no CloudWatch Events rule, target or Lambda permission is made or removed;
    - `_polling_init`: when crhelper would wait for the next poll (nothing sent), the invocation
      records a PollRequest (helper.Data, polling_interval, helper.NoEcho): the adapter answers
      InProgress, a NoEcho one when helper.NoEcho is set (helper.Data is then kept as NoEcho Data is);
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
            or len(wait_defaults) != 1 or not all(callable(getattr(cls, name, None)) for name in _POLLING)
            or not callable(getattr(log_helper, "setup", None))):
        version = getattr(sys.modules.get("crhelper"), "__version__", None) or _dist_version("crhelper")
        raise CrhelperUnsupported(f"crhelper {version} is installed but its send path is not the one cfn-provider "
                                  "intercepts (tested with crhelper 2.0.12); pin crhelper==2.0.12")
    cls._send.__defaults__ = (*send_defaults[:-1], _crhelper_send)
    cls._wait_for_cwlogs.__defaults__ = (_skip_in_adapter(wait_defaults[0]),)
    cls._polling_init = _polling_init(cls._polling_init)
    cls._setup_polling = _in_adapter(cls._setup_polling, _setup_polling)
    cls._remove_polling = _in_adapter(cls._remove_polling, _remove_polling)
    log_helper.setup = _keep_daemon_logging
    cls._cfn_provider_patched = True


def _in_adapter(original: Callable[[Any], Any], replacement: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`replacement` while a `lambda:` function runs, crhelper's own `original` outside one."""
    def method(self: Any) -> Any:
        return original(self) if current() is None else replacement(self)

    method.__name__, method.__doc__ = original.__name__, replacement.__doc__
    return method


def _setup_polling(helper: Any) -> None:
    """crhelper's _setup_polling without the CloudWatch Events rule, its target and the Lambda
    permission: the event carries CrHelperData and CrHelperPoll as crhelper sets them."""
    helper._event["CrHelperData"] = helper.Data
    helper._event["CrHelperPoll"] = True


def _remove_polling(helper: Any) -> None:
    """crhelper's _remove_polling without the rule, target and permission it would delete."""
    if isinstance(helper._event, dict):
        helper._event.pop("CrHelperData", None)
    if isinstance(helper.Data, dict):
        helper.Data.pop("PhysicalResourceId", None)


def _polling_init(init: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def polling_init(self: Any, event: Any) -> Any:
        result = init(self, event)
        invocation = current()
        if invocation is not None and not self._send_response:  # crhelper waits for its next poll
            invocation.poll = PollRequest(self.Data, getattr(self, "_polling_interval", 2),
                                          getattr(self, "NoEcho", False) is True)
        return result

    polling_init.__name__, polling_init.__doc__ = init.__name__, init.__doc__
    return polling_init


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

"""crhelper inside a function's execution environment: its polling mapped onto the daemon's poll contract.

Executed by cfn_provider.functions.runtime in the function's interpreter (standard library only).
crhelper answers by PUTting to its ResponseURL like any function, so its sending is not touched.
What is changed, in crhelper 2.0.12's CfnResource, when the function's import of
`crhelper.resource_helper` finishes:

- `_setup_polling` / `_remove_polling`: the event gets (and loses) CrHelperData and CrHelperPoll as
  crhelper gives them, but no CloudWatch Events rule, target or Lambda permission is made or
  removed (there is no Lambda function for them to point at);
- `_polling_init`: when crhelper would wait for its rule to invoke it again, the call's `done`
  carries `poll` (helper.Data, polling_interval and helper.NoEcho): the daemon answers InProgress
  (a NoEcho one when helper.NoEcho is set: helper.Data is then kept as NoEcho Data is) and calls the
  function again with crhelper's poll event when its poll is due;
- `_wait_for_cwlogs`' sleep: no two-minute pause on Delete for CloudWatch Logs to flush (the
  daemon has every line already).

A crhelper without those points is refused when imported (pin crhelper==2.0.12); so is the old
single-file crhelper.py some functions bundle, when it cannot send (`check_bundled`).
"""

import sys

TYPE_CHECKING = False  # typing is not imported here (the function's interpreter): mypy alone reads these names
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

PIN = "pin crhelper==2.0.12 (pip install crhelper==2.0.12, or the provider's crhelper extra)"
_POINTS = ("_polling_init", "_setup_polling", "_remove_polling", "_wait_for_cwlogs", "_send")
_state: "dict[str, dict[str, Any] | None]" = {"poll": None}


class CrhelperUnsupported(ImportError):
    """The crhelper the function imports is not one whose polling cfn-provider maps (2.0.12's)."""


def begin() -> None:
    _state["poll"] = None


def poll() -> "dict[str, Any] | None":
    """crhelper's wish to be polled, from the call just ended: {"data": helper.Data, "interval": minutes,
    "no_echo": helper.NoEcho}."""
    return _state["poll"]


def patch(module: "ModuleType") -> None:
    """Map crhelper.resource_helper's polling onto the daemon's (see the module docstring)."""
    cls = getattr(module, "CfnResource", None)
    wait_defaults = getattr(getattr(cls, "_wait_for_cwlogs", None), "__defaults__", None) or ()
    if cls is None or not all(callable(getattr(cls, name, None)) for name in _POINTS) or len(wait_defaults) != 1:
        raise CrhelperUnsupported(
            f"the crhelper at {getattr(module, '__file__', '?')} does not have the polling "
            f"cfn-provider maps onto its own (tested with crhelper 2.0.12): {PIN}"
        )
    init = cls._polling_init

    def polling_init(self: "Any", event: object) -> object:
        result = init(self, event)
        if not self._send_response:  # crhelper waits for its rule to invoke it again
            _state["poll"] = {
                "data": self.Data,
                "interval": getattr(self, "_polling_interval", 2),
                "no_echo": getattr(self, "NoEcho", False) is True,
            }
        return result

    def setup_polling(self: "Any") -> None:
        self._event["CrHelperData"] = self.Data
        self._event["CrHelperPoll"] = True

    def remove_polling(self: "Any") -> None:
        if isinstance(self._event, dict):
            self._event.pop("CrHelperData", None)
        if isinstance(self.Data, dict):
            self.Data.pop("PhysicalResourceId", None)

    def no_wait(seconds: float) -> None:
        return None

    cls._polling_init, cls._setup_polling, cls._remove_polling = polling_init, setup_polling, remove_polling
    cls._wait_for_cwlogs.__defaults__ = (no_wait,)


class _Hook:
    """A meta path finder that patches crhelper.resource_helper as soon as it is imported."""

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if name != "crhelper.resource_helper":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                original = spec.loader.exec_module

                def exec_module(module: "ModuleType", _original: "Callable[[ModuleType], None]" = original) -> None:
                    _original(module)
                    patch(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's loader only
                return spec
        return None


def install(channel: object) -> None:
    sys.meta_path.insert(0, _Hook())


def check_bundled(code: str) -> None:
    """The old single-file crhelper.py (before crhelper was on PyPI), bundled with the function,
    sends with `requests.put`; where that is botocore's long-removed vendored copy, it cannot."""
    module = sys.modules.get("crhelper")
    if module is None or hasattr(module, "__path__") or not hasattr(module, "cfn_handler"):
        return
    sender = getattr(module, "requests", None)
    if not callable(getattr(sender, "put", None)):
        where = getattr(module, "__file__", "crhelper.py")
        raise CrhelperUnsupported(
            f"{where} is the old, pre-PyPI copy of crhelper bundled with the function; it sends its answer "
            f"with {getattr(sender, '__name__', 'requests')}.put, which this environment does not have. "
            f"Replace it with crhelper from PyPI: {PIN}, delete the bundled crhelper.py and use "
            "crhelper.CfnResource (see docs/porting-lambda.md)"
        )

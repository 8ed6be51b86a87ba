"""`fc:` targets: what `--handler 'Custom::Thing=fc:index.handler'` names, found and checked at start.

The target is Function Compute's own Handler setting, MODULE.FUNCTION (`index.handler`); the
function's folder is found as a `lambda:` function's is (cfn_provider.functions.target.find_code),
and it is checked the same way, in an interpreter of its own running FC's runtime that imports it
(and its `initializer` setting, when there is one) and exits: a typo or a missing dependency stops
the start.

FC functions answer ROS (Alibaba's CloudFormation): they are served on the ROS transports, MNS and
the web listener. On the sqs transport (CloudFormation) an `fc:` target is refused at start
(`refuse_on`), whatever else is configured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import StartupError
from .fc_function import FC_RUNTIME, FcFunction, FcTarget
from .settings import FunctionSettings, default_name
from .target import check, find_code, parse_target

PREFIX = "fc:"
ROS_TRANSPORTS = ("mns", "web")


class FcOnCloudFormation(StartupError):
    """An `fc:` target configured on a transport that is not ROS's: nothing starts."""


def parse_fc_target(spec: str) -> tuple[str, str]:
    """'fc:index.handler' | 'fc:pkg.mod.handler' | 'fc:dir/mod.handler' -> (module, attr)."""
    try:
        return parse_target(spec[len(PREFIX) :] if spec.startswith(PREFIX) else spec)
    except ValueError:
        raise ValueError(
            f"{spec!r} is not fc:MODULE.FUNCTION (Function Compute's Handler setting, e.g. fc:index.handler)"
        ) from None


def load(
    spec: str, resource_type: str, settings: FunctionSettings | None = None, folders: tuple[str, ...] = ()
) -> FcFunction:
    """Find and check an `fc:` target (see the module docstring); raise with the reason if unusable."""
    settings = settings or FunctionSettings()
    module, attr = parse_fc_target(spec)
    target = FcTarget(
        spec, module, attr, find_code(module, settings, folders), settings.name or default_name(resource_type), settings
    )
    function = FcFunction(target)
    check(target, FC_RUNTIME, function.environment())
    return function


def refuse_on(transport: str, handlers: Iterable[tuple[str, Any]]) -> None:
    """FcOnCloudFormation when an `fc:` target is configured on a transport other than ROS's."""
    if transport in ROS_TRANSPORTS:
        return
    for rtype, spec in handlers:
        if isinstance(spec, str) and spec.strip().startswith(PREFIX):
            raise FcOnCloudFormation(
                f"--handler {rtype}={spec.strip()}: an fc: target is an Alibaba Function Compute function, served "
                f"to ROS on --transport mns or web; the {transport} transport is CloudFormation's "
                "(serve a Lambda function there with lambda:MODULE.FUNCTION)"
            )

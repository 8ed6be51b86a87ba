"""cfn-sns-provider: serve AWS CloudFormation custom resources from your own machines.

The handler SDK's public names import from here: `from cfn_provider import Resource, Call`.
Everything else in the package is internal and may change without notice.
"""

from __future__ import annotations

import os as _os
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"
__all__ = [
    "Call",
    "Context",
    "CustomResourceRequest",
    "HandlerResult",
    "InProgress",
    "PropertyError",
    "Resource",
    "__version__",
]

if TYPE_CHECKING:
    from .pipeline.runner import Context
    from .progress import InProgress
    from .sdk.call import Call
    from .sdk.resource import Resource
    from .sdk.schema import PropertyError
    from .sdk.types import CustomResourceRequest, HandlerResult

if _os.path.islink(__file__):  # an editable install (make venv): a module it does not link yet says "run make venv"
    try:
        from .editable import watch
    except ModuleNotFoundError:  # this very check is newer than the install
        raise ImportError("cfn_provider: the editable install predates its source: run `make venv`") from None
    watch(__name__, __file__)

_PUBLIC = {
    "Call": "sdk.call",
    "PropertyError": "sdk.schema",
    "Resource": "sdk.resource",
    "Context": "pipeline.runner",
    "CustomResourceRequest": "sdk.types",
    "HandlerResult": "sdk.types",
    "InProgress": "progress",
}


def __getattr__(name: str) -> Any:
    """The SDK's names, loaded on first use: the daemon's own modules import this package, and
    they need not pay for the SDK's jsonschema at start-up."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

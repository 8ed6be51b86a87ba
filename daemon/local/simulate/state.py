"""The simulated stack's state: its resources (ids, properties, Data), outputs and events, kept in
a JSON state file between invocations and written atomically; the constants every step shares."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import StartupError
from ..template import StackInfo
from .remember import Remembered

STATE_VERSION = 1
DEFAULT_STATE_DIR = ".cfn-simulate"
STACK_TYPE = "AWS::CloudFormation::Stack"
DEFAULT_SERVICE_TIMEOUT = 3600
COMPLETE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE")
UPDATABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")
MAX_EVENTS = 1000  # kept in the state file
# Where a stack is left when the user interrupts an operation: only delete goes on from there.
INTERRUPTED = {"create": "ROLLBACK_FAILED", "update": "UPDATE_ROLLBACK_FAILED", "delete": "DELETE_FAILED"}


class SimulateError(StartupError):
    """Nothing was done: the template, the options or the stack's state do not allow it (exit 2)."""


# ------------------------------------------------------------------------------ the state file
@dataclass
class Resource:
    type: str
    physical_id: str
    properties: dict[str, Any]  # as sent, without ServiceToken
    data: dict[str, Any] = field(default_factory=dict)
    no_echo: bool = False
    status: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "Type": self.type,
            "PhysicalResourceId": self.physical_id,
            "Properties": self.properties,
            "Data": self.data,
            "NoEcho": self.no_echo,
            "Status": self.status,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Resource:
        return cls(
            doc["Type"],
            doc["PhysicalResourceId"],
            dict(doc.get("Properties") or {}),
            dict(doc.get("Data") or {}),
            bool(doc.get("NoEcho")),
            doc.get("Status", ""),
        )


@dataclass
class StackState:
    name: str
    stack_id: str
    region: str
    account_id: str
    template: dict[str, Any]
    template_file: str = ""
    parameter_overrides: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    status_reason: str = ""
    resources: dict[str, Resource] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    created: str = ""
    updated: str = ""
    remembered: Remembered = field(default_factory=Remembered)  # the options the next operation uses again
    emulator: dict[str, Any] | None = None  # the stack's own emulator process (stack_emulator.Record)

    @property
    def info(self) -> StackInfo:
        return StackInfo(self.name, self.stack_id, self.region, self.account_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "Version": STATE_VERSION,
            "StackName": self.name,
            "StackId": self.stack_id,
            "Region": self.region,
            "AccountId": self.account_id,
            "StackStatus": self.status,
            "StackStatusReason": self.status_reason,
            "CreationTime": self.created,
            "LastUpdatedTime": self.updated,
            "TemplateFile": self.template_file,
            "ParameterOverrides": self.parameter_overrides,
            "Parameters": self.parameters,
            "Resources": {k: r.to_json() for k, r in self.resources.items()},
            "Outputs": self.outputs,
            "Template": self.template,
            "Events": self.events[-MAX_EVENTS:],
            "Simulate": self.remembered.to_json(),
            "Emulator": self.emulator,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StackState:
        if doc.get("Version") != STATE_VERSION:
            raise ValueError(f"unknown state file version {doc.get('Version')!r}")
        return cls(
            name=doc["StackName"],
            stack_id=doc["StackId"],
            region=doc["Region"],
            account_id=doc["AccountId"],
            template=doc["Template"],
            template_file=doc.get("TemplateFile", ""),
            parameter_overrides=dict(doc.get("ParameterOverrides") or {}),
            parameters=dict(doc.get("Parameters") or {}),
            status=doc.get("StackStatus", ""),
            status_reason=doc.get("StackStatusReason", ""),
            resources={k: Resource.from_json(v) for k, v in (doc.get("Resources") or {}).items()},
            outputs=dict(doc.get("Outputs") or {}),
            events=list(doc.get("Events") or []),
            created=doc.get("CreationTime", ""),
            updated=doc.get("LastUpdatedTime", ""),
            remembered=Remembered.from_json(doc.get("Simulate")),
            emulator=doc.get("Emulator") or None,
        )


def read_state(path: Path) -> StackState | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SimulateError(f"cannot read the state file {path}: {exc.strerror}") from None
    try:
        return StackState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise SimulateError(
            f"the state file {path} is not one simulate wrote ({exc}); move it away to start over"
        ) from None


def write_state(path: Path, state: StackState) -> None:
    """Atomically: a temporary file in the same directory, then rename over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state.to_json(), fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # mkstemp made it 0600: Data may hold secrets
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

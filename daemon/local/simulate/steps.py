"""One resource at a time, as CloudFormation drives it: the Create, Update and Delete requests, their
events, and what the answers (or their absence) make of the resource in the stack's state."""

from __future__ import annotations

import functools
import json
import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..template import Template, TemplateError
from .backend import Answer, Backend
from .console import Console, Event
from .state import DEFAULT_SERVICE_TIMEOUT, STACK_TYPE, Resource, StackState, now


class _View:
    """A created resource as Template.resolve sees it; records reads of NoEcho Data."""

    def __init__(self, resource: Resource, touched: set[str], logical_id: str):
        self.physical_id = resource.physical_id
        self._resource, self._touched, self._logical_id = resource, touched, logical_id

    @property
    def data(self) -> Mapping[str, Any]:
        if self._resource.no_echo:
            self._touched.add(self._logical_id)
        return self._resource.data


@dataclass
class Op:
    """One forward step of an update, for the rollback."""

    kind: str  # "create" | "update"
    logical_id: str
    before: Resource | None = None  # update: the resource as it was
    attempted: dict[str, Any] | None = None  # update: the properties sent
    current_id: str | None = None  # update: the id the resource has now (new id on a replacement)


class Steps:
    """The per-resource steps of a stack operation (see engine.Engine for the operations)."""

    def __init__(
        self,
        backend: Backend,
        state: StackState,
        console: Console,
        save: Callable[[StackState], None],
        wait_limit: float | None = None,
    ):
        self.backend, self.state, self.console, self.save = backend, state, console, save
        self.wait_limit = wait_limit
        self.stack = backend.stack(state.info)
        self.events: list[Event] = []
        self.failures: list[Event] = []  # resource events ending in _FAILED, for the summary

    # ---------------------------------------------------------------- helpers
    def lookup(self, logical_id: str, touched: set[str] | None = None) -> _View | None:
        resource = self.state.resources.get(logical_id)
        if resource is None or resource.status.endswith("FAILED"):
            return None
        return _View(resource, touched if touched is not None else set(), logical_id)

    def emit(self, logical_id: str, physical_id: str, rtype: str, status: str, reason: str = "") -> None:
        ev = Event(now(), logical_id, physical_id, rtype, status, reason)
        self.events.append(ev)
        if status.endswith("_FAILED") and rtype != STACK_TYPE:
            self.failures.append(ev)
        self.state.events.append(ev.to_json())
        self.console.event(ev)

    def stack_status(self, status: str, reason: str = "") -> None:
        self.state.status, self.state.status_reason = status, reason
        self.state.updated = now()
        self.emit(self.state.name, self.state.stack_id, STACK_TYPE, status, reason)
        self.save(self.state)

    def _request(
        self,
        kind: str,
        logical_id: str,
        rtype: str,
        props: dict[str, Any],
        old: dict[str, Any] | None = None,
        physical_id: str | None = None,
    ) -> tuple[dict[str, Any], int]:
        timeout = service_timeout(props)
        return self.stack.request(
            kind, logical_id, rtype, properties=props, old_properties=old, physical_id=physical_id
        ), timeout

    def _send(self, request: dict[str, Any], timeout: int) -> Answer:
        what = f"{request['LogicalResourceId']} {request['RequestType']}: waiting for the response"
        answer = self.backend.send(
            self.stack,
            request,
            timeout,
            self.wait_limit,
            lambda elapsed, limit: self.console.progress(what, elapsed, limit),
            lambda state: self._polled(request, state),
        )
        self.console.progress_done()
        return answer

    def _polled(self, request: dict[str, Any], state: str) -> None:
        """A long-running request's progress, as a further *_IN_PROGRESS event of its resource."""
        try:
            doc = json.loads(state)
        except ValueError:
            return
        text = json.dumps(doc.get("progress"), separators=(",", ":"))
        reason = f"Long-running {request['RequestType']}: {doc.get('polls', 0)} polls so far; progress {text[:200]}"
        self.console.progress_done()
        physical_id = doc.get("physical_id") or request.get("PhysicalResourceId", "")
        resource = self.state.resources.get(request["LogicalResourceId"])
        if request["RequestType"] == "Create" and resource is not None and physical_id:
            resource.physical_id = physical_id  # the id so far: what an interrupted Create's Delete gets
            self.save(self.state)
        self.emit(
            request["LogicalResourceId"],
            physical_id,
            request["ResourceType"],
            f"{request['RequestType'].upper()}_IN_PROGRESS",
            reason,
        )

    def _outputs(self, template: Template) -> dict[str, dict[str, Any]]:
        outputs = {}
        for name in template.outputs_defs:
            touched: set[str] = set()
            entry = template.output(name, functools.partial(self.lookup, touched=touched))
            if touched:
                entry["Value"] = "****"  # NoEcho: CloudFormation masks it too
            outputs[name] = entry
        return outputs

    # ------------------------------------------------------------ resource steps
    def create_resource(self, template: Template, logical_id: str) -> bool:
        rtype = template.resources[logical_id]["Type"]
        self.emit(logical_id, "", rtype, "CREATE_IN_PROGRESS")
        try:
            props = template.properties(logical_id, self.lookup)
            request, timeout = self._request("Create", logical_id, rtype, props)
        except TemplateError as exc:
            self.emit(logical_id, "", rtype, "CREATE_FAILED", str(exc))
            return False
        self.emit(logical_id, "", rtype, "CREATE_IN_PROGRESS", "Resource creation Initiated")
        # in the state file before the answer: an interrupted Create is still there for `simulate delete`
        self.state.resources[logical_id] = Resource(rtype, "", props, status="CREATE_IN_PROGRESS")
        self.save(self.state)
        answer = self._send(request, timeout)
        if answer.response is None:
            # CloudFormation never learnt an id: it makes one up for the rollback Delete
            physical_id = generated_physical_id(self.state.name, logical_id)
        else:
            physical_id = answer.physical_id or generated_physical_id(self.state.name, logical_id)
        resource = Resource(rtype, physical_id, props, answer.data, answer.no_echo, "CREATE_FAILED")
        self.state.resources[logical_id] = resource
        if not answer.ok:
            self.emit(logical_id, physical_id if answer.response else "", rtype, "CREATE_FAILED", answer.reason())
            self.save(self.state)
            return False
        missing = self._missing_attributes(template, logical_id, resource)
        if missing:
            self.emit(logical_id, physical_id, rtype, "CREATE_FAILED", missing)
            self.save(self.state)
            return False
        resource.status = "CREATE_COMPLETE"
        self.emit(logical_id, physical_id, rtype, "CREATE_COMPLETE")
        self.save(self.state)
        return True

    def interrupted(self, status: str) -> None:
        """Ctrl-C: a Create never answered keeps the id it gave so far (a long-running action's), else one
        CloudFormation would make up, so `simulate delete` sends its Delete."""
        for logical_id, resource in self.state.resources.items():
            if resource.status == "CREATE_IN_PROGRESS":
                resource.physical_id = resource.physical_id or generated_physical_id(self.state.name, logical_id)
                resource.status = "CREATE_FAILED"
        self.stack_status(
            status,
            "interrupted by the user (Ctrl-C): what was created so far, an unanswered Create "
            "included, is in the state file; `cfn-provider simulate delete` cleans it up",
        )

    def _missing_attributes(self, template: Template, logical_id: str, resource: Resource) -> str:
        missing = [a for a in template.attributes_used(logical_id) if a not in resource.data]
        if not missing:
            return ""
        return (
            f"CustomResource attribute error: Vendor response doesn't contain {missing[0]} key in object "
            f"{self.state.stack_id}|{logical_id}|{resource.physical_id} in region {self.state.region}"
            + _returned(resource.data)
        )

    def delete_resource(
        self,
        logical_id: str,
        resource: Resource,
        policy: str = "Delete",
        rolling_back_create: bool = False,
        physical_id: str | None = None,
        policy_name: str = "DeletionPolicy",
    ) -> bool:
        """Delete one resource (or one old id of it, for cleanup); True when it is gone."""
        physical_id = physical_id or resource.physical_id or generated_physical_id(self.state.name, logical_id)
        if policy == "Retain" or (policy == "RetainExceptOnCreate" and not rolling_back_create):
            self.emit(
                logical_id, physical_id, resource.type, "DELETE_SKIPPED", f"{policy_name} {policy}: left in place"
            )
            return True
        self.emit(logical_id, physical_id, resource.type, "DELETE_IN_PROGRESS")
        try:
            request, timeout = self._request(
                "Delete", logical_id, resource.type, resource.properties, physical_id=physical_id
            )
        except TemplateError:
            request, timeout = (
                self.stack.request(
                    "Delete", logical_id, resource.type, properties=resource.properties, physical_id=physical_id
                ),
                DEFAULT_SERVICE_TIMEOUT,
            )
        answer = self._send(request, timeout)
        if not answer.ok:
            self.emit(logical_id, physical_id, resource.type, "DELETE_FAILED", answer.reason())
            resource.status = "DELETE_FAILED"
            return False
        self.emit(logical_id, physical_id, resource.type, "DELETE_COMPLETE")
        return True

    # ------------------------------------------------------------- update steps
    def _update_resource(
        self, template: Template, logical_id: str, existing: Resource, props: dict[str, Any], op: Op
    ) -> bool:
        rtype = existing.type
        self.emit(logical_id, existing.physical_id, rtype, "UPDATE_IN_PROGRESS")
        try:
            request, timeout = self._request(
                "Update", logical_id, rtype, props, old=existing.properties, physical_id=existing.physical_id
            )
        except TemplateError as exc:
            self.emit(logical_id, existing.physical_id, rtype, "UPDATE_FAILED", str(exc))
            return False
        answer = self._send_update(logical_id, rtype, request, timeout, existing.physical_id)
        if answer is None:
            return False
        new_id = answer.physical_id or existing.physical_id
        updated = Resource(rtype, new_id, props, answer.data, answer.no_echo, "UPDATE_COMPLETE")
        self.state.resources[logical_id] = updated
        op.current_id = new_id
        missing = self._missing_attributes(template, logical_id, updated)
        if missing:
            updated.status = "UPDATE_FAILED"
            self.emit(logical_id, new_id, rtype, "UPDATE_FAILED", missing)
            self.save(self.state)
            return False
        self.emit(logical_id, new_id, rtype, "UPDATE_COMPLETE")
        self.save(self.state)
        return True

    def _send_update(
        self, logical_id: str, rtype: str, request: dict[str, Any], timeout: int, current_id: str
    ) -> Answer | None:
        """Send an Update. FAILED: the resource is marked UPDATE_FAILED and None comes back;
        otherwise the answer, a new physical id noted as CloudFormation's events note a replacement."""
        answer = self._send(request, timeout)
        if not answer.ok:
            self.emit(logical_id, current_id, rtype, "UPDATE_FAILED", answer.reason())
            self.state.resources[logical_id].status = "UPDATE_FAILED"
            self.save(self.state)
            return None
        if answer.physical_id and answer.physical_id != current_id:
            self.emit(
                logical_id,
                answer.physical_id,
                rtype,
                "UPDATE_IN_PROGRESS",
                "Requested update required the provider to create a new physical resource",
            )
        return answer


def service_timeout(props: Mapping[str, Any], strict: bool = True) -> int:
    raw = props.get("ServiceTimeout")
    if raw is None:
        return DEFAULT_SERVICE_TIMEOUT
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= DEFAULT_SERVICE_TIMEOUT:
        if not strict:
            return DEFAULT_SERVICE_TIMEOUT
        raise TemplateError(f"Properties validation failed: ServiceTimeout {raw!r} must be an integer from 1 to 3600")
    return value


def generated_physical_id(stack_name: str, logical_id: str) -> str:
    """An id in CloudFormation's own style, for a resource whose Create was never answered."""
    suffix = "".join(random.choices(string.ascii_uppercase + string.digits, k=12))
    return f"{stack_name[:30]}-{logical_id[:30]}-{suffix}"


def _returned(data: Mapping[str, Any] | None) -> str:
    """simulate's note on a missing attribute: the keys the handler did return (names, never values)."""
    keys = sorted(map(str, data or {}))
    return f" (simulate: the answer's Data has {', '.join(keys)})" if keys else " (simulate: the answer had no Data)"

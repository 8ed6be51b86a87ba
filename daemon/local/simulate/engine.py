"""CloudFormation's ordering of a stack operation: create (and its rollback), update (its cleanup
phase, and its rollback), delete; each built from the per-resource steps."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

from ..template import Template, TemplateError
from .state import Resource, now
from .steps import Op, Steps, service_timeout


class Engine(Steps):
    """One stack operation (create / update / delete) on the simulated stack."""

    # --------------------------------------------------------------- operations
    def create(self, template: Template) -> str:
        self.state.created = now()
        self.stack_status("CREATE_IN_PROGRESS", "User Initiated")
        created: list[str] = []
        failed: str | None = None
        for logical_id in template.custom:
            created.append(logical_id)
            if not self.create_resource(template, logical_id):
                failed = logical_id
                break
        if failed is None:
            try:
                self.state.outputs = self._outputs(template)
            except TemplateError as exc:
                failed = "Outputs"
                self.console.warn(f"outputs: {exc}")
        if failed is None:
            self.stack_status("CREATE_COMPLETE")
            return self.state.status
        self.stack_status(
            "ROLLBACK_IN_PROGRESS",
            f"The following resource(s) failed to create: [{failed}]. Rollback requested by user.",
        )
        ok = True
        for logical_id in reversed(created):
            resource = self.state.resources.get(logical_id)
            if resource is None:
                continue
            if self.delete_resource(
                logical_id, resource, template.policy(logical_id, "DeletionPolicy"), rolling_back_create=True
            ):
                del self.state.resources[logical_id]
            else:
                ok = False
            self.save(self.state)
        self.state.outputs = {}
        self.stack_status("ROLLBACK_COMPLETE" if ok else "ROLLBACK_FAILED")
        return self.state.status

    def changes(self, old: Template, new: Template) -> bool:
        """Whether an update to `new` would change anything (resources or outputs)."""
        if set(new.custom) != set(self.state.resources):
            return True
        for logical_id in new.custom:
            try:
                if new.properties(logical_id, self.lookup) != self.state.resources[logical_id].properties:
                    return True
            except TemplateError:
                return True
        try:
            return self._outputs(new) != self.state.outputs
        except TemplateError:
            return True

    def update(
        self, old: Template, new: Template, overrides: Mapping[str, str] | None = None, template_file: str | None = None
    ) -> str:
        """Update to `new` (made with parameter `overrides`, from `template_file`)."""
        self.stack_status("UPDATE_IN_PROGRESS", "User Initiated")
        ops: list[Op] = []
        failed = self._update_resources(new, ops)  # [(logical id, "create" | "update")]
        outputs: dict[str, dict[str, Any]] = {}
        if not failed:
            try:
                outputs = self._outputs(new)
            except TemplateError as exc:
                self.console.warn(f"outputs: {exc}")
                failed.append(("Outputs", "update"))
        if failed:
            return self._rollback_update(old, new, ops, failed)

        self.state.outputs = outputs
        self.state.template = dict(new.doc)
        self.state.parameters = new.parameters
        if overrides is not None:
            self.state.parameter_overrides = dict(overrides)
        if template_file:
            self.state.template_file = template_file
        self.stack_status("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS")
        self._cleanup_replaced(new, ops)
        self._cleanup_removed(old, new)
        self.stack_status("UPDATE_COMPLETE")
        return self.state.status

    def _update_resources(self, new: Template, ops: list[Op]) -> list[tuple[str, str]]:
        """Each resource of `new` created or updated in order (each step in `ops`), up to the first
        failure: [(its logical id, "create" | "update")], or [] when none failed."""
        for logical_id in new.custom:
            failure = self._update_one(new, logical_id, ops)
            if failure:
                return [(logical_id, failure)]
        return []

    def _update_one(self, new: Template, logical_id: str, ops: list[Op]) -> str | None:
        """One resource brought to `new`: None, or what failed ("create" | "update")."""
        rtype = new.resources[logical_id]["Type"]
        existing = self.state.resources.get(logical_id)
        if existing is None:
            ops.append(Op("create", logical_id))
            return None if self.create_resource(new, logical_id) else "create"
        try:
            props = new.properties(logical_id, self.lookup)
        except TemplateError as exc:
            self.emit(logical_id, existing.physical_id, rtype, "UPDATE_FAILED", str(exc))
            return "update"
        if props == existing.properties:
            return None
        op = Op("update", logical_id, copy.deepcopy(existing), props, existing.physical_id)
        ops.append(op)
        return None if self._update_resource(new, logical_id, existing, props, op) else "update"

    def _cleanup_replaced(self, new: Template, ops: list[Op]) -> None:
        """The cleanup phase, first: the old ids of replaced resources."""
        for op in reversed(ops):
            if op.kind == "update" and op.before and op.current_id != op.before.physical_id:
                self.delete_resource(
                    op.logical_id,
                    op.before,
                    new.policy(op.logical_id, "UpdateReplacePolicy"),
                    physical_id=op.before.physical_id,
                    policy_name="UpdateReplacePolicy",
                )
                self.save(self.state)

    def _cleanup_removed(self, old: Template, new: Template) -> None:
        """Then the resources the new template no longer has."""
        removed = [k for k in reversed(old.order) if k in self.state.resources and k not in new.custom]
        removed = [k for k in self.state.resources if k not in new.custom and k not in removed] + removed
        for logical_id in removed:
            resource = self.state.resources.pop(logical_id)
            policy = old.policy(logical_id, "DeletionPolicy") if logical_id in old.all_resources else "Delete"
            if not self.delete_resource(logical_id, resource, policy):
                self.console.warn(
                    f"{logical_id} ({resource.physical_id}) could not be deleted and is no longer part "
                    "of the stack (CloudFormation leaves it behind too)"
                )
            self.save(self.state)

    def _rollback_update(self, old: Template, new: Template, ops: list[Op], failed: list[tuple[str, str]]) -> str:
        parts = []
        for kind in ("create", "update"):
            names = [name for name, k in failed if k == kind]
            if names:
                parts.append(f"The following resource(s) failed to {kind}: [{', '.join(names)}].")
        self.stack_status("UPDATE_ROLLBACK_IN_PROGRESS", " ".join(parts))
        ok = True
        cleanup: list[tuple[str, Resource, str]] = []  # (logical id, resource, id to delete)
        for op in reversed(ops):
            if op.kind == "create":
                resource = self.state.resources.get(op.logical_id)
                if resource is None:
                    continue
                if self.delete_resource(
                    op.logical_id, resource, new.policy(op.logical_id, "DeletionPolicy"), rolling_back_create=True
                ):
                    del self.state.resources[op.logical_id]
                else:
                    ok = False
                self.save(self.state)
                continue
            assert op.before is not None and op.attempted is not None and op.current_id is not None
            ok = self._rollback_resource(op, cleanup) and ok
        self.stack_status("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS")
        for logical_id, resource, physical_id in cleanup:
            self.delete_resource(
                logical_id,
                resource,
                old.policy(logical_id, "UpdateReplacePolicy"),
                physical_id=physical_id,
                policy_name="UpdateReplacePolicy",
            )
            self.save(self.state)
        with contextlib.suppress(TemplateError):
            self.state.outputs = self._outputs(old)
        self.stack_status("UPDATE_ROLLBACK_COMPLETE" if ok else "UPDATE_ROLLBACK_FAILED")
        return self.state.status

    def _rollback_resource(self, op: Op, cleanup: list[tuple[str, Resource, str]]) -> bool:
        """The rollback Update: the old properties, to the id the resource has now."""
        before, logical_id = op.before, op.logical_id
        assert before is not None and op.attempted is not None and op.current_id is not None
        rtype = before.type
        self.emit(logical_id, op.current_id, rtype, "UPDATE_IN_PROGRESS")
        request, timeout = (
            self.stack.request(
                "Update",
                logical_id,
                rtype,
                properties=before.properties,
                old_properties=op.attempted,
                physical_id=op.current_id,
            ),
            service_timeout(before.properties, strict=False),
        )
        answer = self._send_update(logical_id, rtype, request, timeout, op.current_id)
        if answer is None:
            return False
        final_id = answer.physical_id or op.current_id
        self.state.resources[logical_id] = Resource(
            rtype, final_id, before.properties, answer.data, answer.no_echo, "UPDATE_COMPLETE"
        )
        self.emit(logical_id, final_id, rtype, "UPDATE_COMPLETE")
        attempted = Resource(rtype, op.current_id, op.attempted)
        for physical_id, props in ((op.current_id, attempted), (before.physical_id, before)):
            if physical_id != final_id and all(physical_id != c[2] for c in cleanup):
                cleanup.append((logical_id, props, physical_id))
        self.save(self.state)
        return True

    def delete(self, template: Template | None) -> str:
        self.stack_status("DELETE_IN_PROGRESS", "User Initiated")
        order = [k for k in reversed(template.order) if k in self.state.resources] if template else []
        order = [k for k in reversed(list(self.state.resources)) if k not in order] + order
        failed: list[str] = []
        for logical_id in order:
            resource = self.state.resources[logical_id]
            blockers = [
                d
                for d in (template.dependents(logical_id) if template and logical_id in template.resources else [])
                if d in failed
            ]
            if blockers:
                failed.append(logical_id)  # CloudFormation keeps what a surviving resource depends on
                continue
            policy = template.policy(logical_id, "DeletionPolicy") if template else "Delete"
            if self.delete_resource(logical_id, resource, policy):
                del self.state.resources[logical_id]
            else:
                failed.append(logical_id)
            self.save(self.state)
        if failed:
            self.stack_status("DELETE_FAILED", f"The following resource(s) failed to delete: [{', '.join(failed)}]. ")
        else:
            self.state.outputs = {}
            self.stack_status("DELETE_COMPLETE")
        return self.state.status

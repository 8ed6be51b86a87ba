"""What refers to what in a template: Ref / GetAtt / Sub / DependsOn references, checked (an
unresolved one is an error), and the resources' dependency order (a cycle is an error, worded as
CloudFormation words it)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .values import PSEUDO_PARAMETERS, SUB_VARIABLE, TemplateError, intrinsic, is_custom

_FOLLOWED = {"Ref", "Fn::GetAtt", "Fn::Sub", "Fn::If", "Condition"}  # what _references reads inside


class Dependencies:
    """The references and ordering half of a Template (see document.Template)."""

    all_resources: dict[str, Any]
    resources: dict[str, Any]
    outputs_defs: dict[str, Any]
    parameters: dict[str, Any]
    dependencies: dict[str, set[str]]

    if TYPE_CHECKING:

        def condition(self, name: str, _stack: tuple[str, ...] = ()) -> bool: ...
        @staticmethod
        def _getatt_args(arg: Any, where: str) -> tuple[str, Any]: ...
        @staticmethod
        def _sub_args(arg: Any, where: str) -> tuple[str, dict[str, Any]]: ...

    def _references(self, value: Any, where: str) -> Iterator[tuple[str, str | None]]:
        """(name, attribute or None) for each Ref / GetAtt / Sub variable, following only the
        Fn::If branches the conditions choose."""
        found = intrinsic(value)
        if found and found[0] in _FOLLOWED:
            yield from self._intrinsic_references(*found, where)
            return
        if isinstance(value, dict):
            for k, v in value.items():
                yield from self._references(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from self._references(v, f"{where}[{i}]")

    def _intrinsic_references(self, key: str, arg: Any, where: str) -> Iterator[tuple[str, str | None]]:
        """What one of the _FOLLOWED intrinsic functions refers to."""
        if key == "Ref":
            if not isinstance(arg, str):
                raise TemplateError(f"{where}: Ref takes a name")
            yield arg, None
        elif key == "Fn::GetAtt":
            logical_id, attribute = self._getatt_args(arg, where)
            yield logical_id, attribute if isinstance(attribute, str) else "*"
            if not isinstance(attribute, str):
                yield from self._references(attribute, where)
        elif key == "Fn::Sub":
            yield from self._sub_references(arg, where)
        elif key == "Fn::If":
            if not isinstance(arg, list) or len(arg) != 3 or not isinstance(arg[0], str):
                raise TemplateError(f"{where}: Fn::If takes [condition name, value if true, value if false]")
            yield from self._references(arg[1] if self.condition(arg[0]) else arg[2], where)
        # "Condition": refers to a condition, no resource or parameter

    def _sub_references(self, arg: Any, where: str) -> Iterator[tuple[str, str | None]]:
        text, variables = self._sub_args(arg, where)
        for name in SUB_VARIABLE.findall(text):
            name = name.strip()
            if name.startswith("!") or name in variables:
                continue
            head, dot, attribute = name.partition(".")
            if dot and head in self.all_resources:
                yield head, attribute
            else:
                yield name, None
        for v in variables.values():
            yield from self._references(v, where)

    def _validate_references(self) -> None:
        unresolved: list[str] = []
        tokens = [
            (f"{k}.Properties.ServiceToken", r["Properties"]["ServiceToken"])
            for k, r in self.resources.items()
            if is_custom(r["Type"]) and "ServiceToken" in (r.get("Properties") or {})
        ]  # replaced, yet checked
        for where, value in [*self._evaluated_parts(), *tokens]:
            for name, attribute in self._references(value, where):
                if attribute is None and (name in self.parameters or name in PSEUDO_PARAMETERS):
                    continue
                if name not in self.resources and name not in unresolved:
                    unresolved.append(name)
        for logical_id, resource in self.resources.items():
            for name in depends_on(resource, logical_id):
                if name not in self.resources and name not in unresolved:
                    unresolved.append(name)
        if unresolved:
            raise TemplateError(
                f"Template format error: Unresolved resource dependencies [{', '.join(unresolved)}] "
                "in the Resources block of the template"
            )

    def _evaluated_parts(self) -> Iterator[tuple[str, Any]]:
        for logical_id, resource in self.resources.items():
            for key in ("Properties", "Metadata"):
                if key in resource:
                    props = resource[key]
                    if key == "Properties" and is_custom(resource["Type"]):
                        props = {k: v for k, v in props.items() if k != "ServiceToken"}  # replaced, not resolved
                    yield f"{logical_id}.{key}", props
        for name, output in self.outputs_defs.items():
            yield f"Outputs.{name}", output

    def _dependencies_of(self, logical_id: str) -> set[str]:
        resource = self.resources[logical_id]
        deps = set(depends_on(resource, logical_id))
        for key in ("Properties", "Metadata"):
            if key in resource:
                value = resource[key]
                if key == "Properties" and is_custom(resource["Type"]):
                    value = {k: v for k, v in value.items() if k != "ServiceToken"}
                deps.update(name for name, _ in self._references(value, logical_id) if name in self.resources)
        return deps

    def attributes_used(self, logical_id: str) -> list[str]:
        """The attributes the template reads from `logical_id` with Fn::GetAtt (or ${Res.Attr})."""
        used: list[str] = []
        for where, value in self._evaluated_parts():
            for name, attribute in self._references(value, where):
                if name == logical_id and attribute not in (None, "*") and attribute not in used:
                    used.append(attribute)
        return used

    def _topological_order(self) -> list[str]:
        done: list[str] = []
        remaining = list(self.resources)
        while remaining:
            ready = next((r for r in remaining if self.dependencies[r] <= set(done)), None)
            if ready is None:
                cyclic = [r for r in remaining if self._reaches(r, r, set(remaining))]
                raise TemplateError(
                    f"Template format error: Circular dependency between resources: [{', '.join(cyclic or remaining)}]"
                )
            done.append(ready)
            remaining.remove(ready)
        return done

    def _reaches(self, start: str, target: str, within: set[str]) -> bool:
        seen: set[str] = set()
        todo = [d for d in self.dependencies[start] if d in within]
        while todo:
            node = todo.pop()
            if node == target:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(d for d in self.dependencies[node] if d in within)
        return False

    def dependents(self, logical_id: str) -> list[str]:
        return [k for k, deps in self.dependencies.items() if logical_id in deps]


def depends_on(resource: Mapping[str, Any], logical_id: str) -> list[str]:
    value = resource.get("DependsOn", [])
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TemplateError(f"Template format error: {logical_id}.DependsOn must be a name or a list of names")
    return names

"""A small declarative layer on top of the plain handler contract (docs/handlers.md).

    from cfn_provider import Resource

    class Thing(Resource):
        schema = {                                   # JSON Schema for ResourceProperties
            "type": "object",
            "properties": {"Size": {"type": "integer", "minimum": 1}, "Name": {"type": "string"}},
            "required": ["Size"],
            "additionalProperties": False,
        }
        replace_on = ("Name",)                       # a change to these replaces the resource

        async def create(self, props, call):         # props: validated, "3" already became 3
            thing = await make_thing(props["Size"], region=call.region)
            return {"PhysicalResourceId": thing.id, "Data": {"Url": thing.url}}

        async def update(self, props, old, call):    # only for changes outside replace_on
            await resize_thing(call.physical_id, props["Size"])
            return {"Data": {"Url": url_of(call.physical_id)}}

        async def delete(self, props, call):         # never validated; must tolerate "already gone"
            await remove_thing(call.physical_id)

    handler = Thing.handler()                        # register "mypkg.thing:handler"

What the layer does, and nothing more:
- The author sees ResourceProperties without ServiceToken and ServiceTimeout (CloudFormation's and
  the daemon's own), as plain mutable dicts and lists.
- Create and Update check the properties against `schema` first (a failure is a FAILED answer
  naming the property). CloudFormation sends every scalar as a string; where the schema's `type`
  asks for a boolean, an integer or a number (and does not also allow a string) the strings
  "true"/"false", "42", "1.5" are converted, in nested objects and arrays too. `default`s of
  missing properties are filled in. A Delete is never validated (a resource created under an
  older schema must still be deletable): its properties are converted where possible.
- Update: when a property in `replace_on` changed (or the class has no `update` and anything
  changed), `create` runs for a new resource (`call.replacing` is true) and the answer carries
  its new PhysicalResourceId (one is made up if `create` returned none). CloudFormation then
  sends a Delete for the old id, with the old properties. Otherwise `update` runs and keeps the id.
- `call` carries the request (`call.event`, ids, `call.region` from the StackId), the daemon's
  context (`remaining()`, a bound `log`) and the shared aiobotocore `session`, with
  `call.client("ec2")` for a client in the stack's region.

Long-running resources (the poll contract, cfn_provider.progress): an action may return
`InProgress(progress=..., physical_id=..., after=seconds)`; the daemon then calls the matching
poll method with the stored progress until it returns the action's usual result (done), raises
(FAILED), or returns InProgress again:

        def poll_create(self, props, call, progress): ...        # props validated as for create
        def poll_update(self, props, old, call, progress): ...
        def poll_delete(self, props, call, progress): ...        # props never validated
        def is_complete(self, props, call, progress): ...        # for any action without its own

An Update that replaces polls with `poll_create` (or `is_complete`), `call.replacing` true; its
InProgress gets the new PhysicalResourceId made up when it names none.

Actions may be `async def` (run on the event loop; use for aiobotocore) or plain functions (run in
the daemon's thread pool); keep one kind per class (in a class with any async method, the sync
ones run in a thread of their own). The object `Thing.handler()` returns has
plain `create(event, context)` / `update` / `delete` callables, and `poll_create(event, context,
progress)` / `poll_update` / `poll_delete` where the class can poll that action, so the daemon's
router, runner and poll scheduler treat it like any other handler.

The schema rules live in cfn_provider.sdk.schema, the Call in cfn_provider.sdk.call.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from ..progress import InProgress
from .call import Call
from .schema import PropertyError, check_schema, coerce, thaw, validate

__all__ = ["Call", "Handler", "PropertyError", "Resource", "coerce", "validate"]

CLOUDFORMATION_OWN = ("ServiceToken", "ServiceTimeout")  # never shown to the author

# An action's steps: yields (method, args) to call, is sent each result, returns the answer.
_Steps = Generator[tuple[Callable[..., Any], tuple[Any, ...]], Any, Any]
_ACTIONS = ("create", "update", "delete")


class Resource:
    """Subclass, set `schema` / `replace_on`, write create (and update, delete), then
    `handler = MyResource.handler()`."""

    schema: Mapping[str, Any] | None = None
    replace_on: Sequence[str] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.schema is not None:
            check_schema(cls.schema, cls.__name__)
        if isinstance(cls.replace_on, str):
            raise TypeError(f"{cls.__name__}.replace_on must be a sequence of property names, not a str")

    @classmethod
    def handler(cls, *args: Any, **kwargs: Any) -> Handler:
        return Handler(cls(*args, **kwargs))

    # --- what authors write
    def create(self, props: dict[str, Any], call: Call) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement create")

    def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
        """Default: no in-place update; every change replaces (see needs_replacement)."""
        return None

    def delete(self, props: dict[str, Any], call: Call) -> Any:
        return None

    # --- what authors may override
    def needs_replacement(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> bool:
        """True when a `replace_on` property changed, or anything changed and there is no `update`."""
        if not self.updates_in_place():
            return props != old
        return any(props.get(name) != old.get(name) for name in self.replace_on)

    def updates_in_place(self) -> bool:
        """Whether the class has its own `update`."""
        return type(self).update is not Resource.update

    def properties(
        self, event: Mapping[str, Any], key: str = "ResourceProperties", *, check: bool = True
    ) -> dict[str, Any]:
        """`event[key]` without CloudFormation's own keys, converted per schema, validated if `check`."""
        raw = event.get(key)
        props = {k: v for k, v in thaw(raw if isinstance(raw, Mapping) else {}).items() if k not in CLOUDFORMATION_OWN}
        if self.schema is None:
            return props
        coerced: dict[str, Any] = coerce(props, self.schema)
        if check:
            validate(coerced, self.schema)
        return coerced


class Handler:
    """The plain handler (create/update/delete taking the request and the daemon's context)
    around a Resource. The actions are async when any of the Resource's methods is (its sync
    ones then run in a thread), else plain functions (the daemon runs them in its pool)."""

    def __init__(self, resource: Resource):
        if not isinstance(resource, Resource):
            raise TypeError(f"Handler needs a cfn_provider.Resource, not {type(resource).__name__}")
        self.resource = resource
        r = type(resource)
        methods = [getattr(r, name, None) for name in (*_ACTIONS, *(f"poll_{a}" for a in _ACTIONS), "is_complete")]
        shape = any(inspect.iscoroutinefunction(m) for m in methods if m is not None)
        self.create = self._action(self._create, shape)
        self.update = self._action(self._update, shape)
        self.delete = self._action(self._delete, shape)
        # the poll functions the pipeline looks for (poll_function), where the Resource can be polled
        if self._poller("create"):
            self.poll_create = self._action(self._poll_create, shape)
        if self._poller("update") or self._poller("create"):  # an Update may replace: poll_create polls it
            self.poll_update = self._action(self._poll_update, shape)
        if self._poller("delete"):
            self.poll_delete = self._action(self._poll_delete, shape)

    def __repr__(self) -> str:
        return f"<sdk handler {type(self.resource).__module__}.{type(self.resource).__qualname__}>"

    # Each step is a generator: it yields (method, args) to call and receives the result, so
    # one body serves the sync and the async shapes of the action.
    def _create(self, event: Mapping[str, Any], context: Any) -> _Steps:
        props = self.resource.properties(event)
        return (yield self.resource.create, (props, Call(event, context)))

    def _update(self, event: Mapping[str, Any], context: Any) -> _Steps:
        res = self.resource
        props = res.properties(event)
        old = res.properties(event, "OldResourceProperties", check=False)
        call = Call(event, context)
        if not res.needs_replacement(props, old, call):
            return (yield res.update, (props, old, call))
        call.replacing = True
        result = yield res.create, (props, call)
        if isinstance(result, InProgress):  # the new resource's id is known from now on
            result.physical_id = result.physical_id or call.new_physical_id()
            return result
        return _with_new_id(result, call)

    def _delete(self, event: Mapping[str, Any], context: Any) -> _Steps:
        props = self.resource.properties(event, check=False)
        return (yield self.resource.delete, (props, Call(event, context)))

    # The poll steps: the Resource's poll_<action>, else its is_complete, with the stored progress.
    def _poller(self, action: str) -> tuple[Callable[..., Any], bool] | None:
        """The method polling `action`, and whether it is the action's own (poll_<action>)."""
        own = getattr(self.resource, f"poll_{action}", None)
        if callable(own):
            return own, True
        fallback = getattr(self.resource, "is_complete", None)
        return (fallback, False) if callable(fallback) else None

    def _poll(
        self, action: str, props: dict[str, Any], old: dict[str, Any] | None, call: Call, progress: Any
    ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        poller = self._poller(action)
        if poller is None:
            raise NotImplementedError(
                f"{type(self.resource).__name__}.{action} returned InProgress, but the class "
                f"has no poll_{action} or is_complete to poll it with"
            )
        method, own = poller
        if own and old is not None:
            return method, (props, old, call, progress)
        return method, (props, call, progress)

    def _poll_create(self, event: Mapping[str, Any], context: Any, progress: Any) -> _Steps:
        props = self.resource.properties(event)
        return (yield self._poll("create", props, None, Call(event, context), progress))

    def _poll_update(self, event: Mapping[str, Any], context: Any, progress: Any) -> _Steps:
        res = self.resource
        props = res.properties(event)
        old = res.properties(event, "OldResourceProperties", check=False)
        call = Call(event, context)
        if not res.needs_replacement(props, old, call):
            return (yield self._poll("update", props, old, call, progress))
        call.replacing = True  # the id the InProgress named is the answer's unless the poll names one
        return (yield self._poll("create", props, None, call, progress))

    def _poll_delete(self, event: Mapping[str, Any], context: Any, progress: Any) -> _Steps:
        props = self.resource.properties(event, check=False)
        return (yield self._poll("delete", props, None, Call(event, context), progress))

    @staticmethod
    def _action(steps: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
        # The author's methods are called outside the try blocks: a StopIteration they raise is
        # their error, never mistaken for the end of the steps.
        if is_async:

            async def action(event: Mapping[str, Any], context: Any = None, *more: Any) -> Any:
                gen = steps(event, context, *more)
                try:
                    method, args = next(gen)
                except StopIteration as stop:
                    return stop.value
                while True:
                    if inspect.iscoroutinefunction(method):
                        result = await method(*args)
                    elif getattr(method, "__func__", None) in _DEFAULTS:  # trivial: no thread needed
                        result = method(*args)
                    else:  # a sync method in an otherwise async class: off the loop
                        result = await asyncio.to_thread(method, *args)
                    try:
                        method, args = gen.send(result)
                    except StopIteration as stop:
                        return stop.value
        else:
            # the sync variant of `action`: mypy wants both branches' signatures identical (sync vs async)
            def action(event: Mapping[str, Any], context: Any = None, *more: Any) -> Any:  # type: ignore[misc]
                gen = steps(event, context, *more)
                try:
                    method, args = next(gen)
                except StopIteration as stop:
                    return stop.value
                while True:
                    result = method(*args)
                    try:
                        method, args = gen.send(result)
                    except StopIteration as stop:
                        return stop.value

        functools.update_wrapper(action, steps, assigned=("__doc__",))
        action.__name__ = action.__qualname__ = steps.__name__.lstrip("_")
        return action


_DEFAULTS = (Resource.update, Resource.delete)


def _with_new_id(result: Any, call: Call) -> Any:
    """A replacement must answer with a new PhysicalResourceId, or CloudFormation deletes nothing."""
    if result is None:
        result = {}
    elif isinstance(result, str):
        result = {"PhysicalResourceId": result}
    elif isinstance(result, Mapping):
        result = dict(result)
    else:
        return result  # not ours to judge: the daemon answers FAILED for an unusable result
    if not result.get("PhysicalResourceId"):
        result["PhysicalResourceId"] = call.new_physical_id()
    elif result["PhysicalResourceId"] == call.physical_id:
        call.log.warning(
            "sdk.replacement_kept_id",
            physical_id=call.physical_id,
            detail="create returned the old id on a replacement: CloudFormation will not delete it",
        )
    return result

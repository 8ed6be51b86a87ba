"""Tiny importable handlers for tests/pipeline/test_router.py. Each one says who it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _named(name: str) -> Any:
    class _Handler:
        def __repr__(self) -> str:
            return f"<handler {name}>"

        def create(self, event: Mapping[str, Any]) -> str:
            return name

        update = delete = create

    return _Handler()


exact = _named("exact")
short_glob = _named("short_glob")
long_glob = _named("long_glob")
other = _named("other")


class NoDelete:
    """Has create and update but no delete: not a handler."""

    def create(self, event: Mapping[str, Any]) -> None:
        return None

    def update(self, event: Mapping[str, Any]) -> None:
        return None


no_delete = NoDelete()


class NotCallableUpdate:
    """`update` is data, not a callable."""

    update = "not callable"

    def create(self, event: Mapping[str, Any]) -> None:
        return None

    def delete(self, event: Mapping[str, Any]) -> None:
        return None


not_callable_update = NotCallableUpdate()

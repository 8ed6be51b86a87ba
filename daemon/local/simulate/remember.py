"""What simulate remembers between the operations on one stack: the handlers it served, their function
settings, the folders they were imported from, the endpoint, and the poll speed. `create` records
them in the state file; `update` and `delete` use them again, with whatever is given anew on their
command line on top (a `--handler` for a type replaces the remembered one for that type, and adds
others; a `--function TYPE=SETTING=VALUE` replaces the remembered value of that setting)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Remembered:
    handlers: list[str] = field(default_factory=list)  # "TYPE=MODULE[:ATTR]" or a bare "TYPE", as typed
    handler_paths: list[str] = field(default_factory=list)  # absolute folders
    functions: list[str] = field(default_factory=list)  # "TYPE=SETTING=VALUE", as typed (--function)
    endpoint: str | None = None  # --endpoint; None: the stack's own embedded emulator
    region: str | None = None  # --region (with --endpoint)
    poll_every: float | None = None  # --poll-every

    def to_json(self) -> dict[str, Any]:
        return {
            "Handlers": self.handlers,
            "HandlerPaths": self.handler_paths,
            "Functions": self.functions,
            "Endpoint": self.endpoint,
            "Region": self.region,
            "PollEvery": self.poll_every,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> Remembered:
        doc = doc or {}
        every = doc.get("PollEvery")
        return cls(
            [str(h) for h in doc.get("Handlers") or []],
            [str(p) for p in doc.get("HandlerPaths") or []],
            endpoint=doc.get("Endpoint") or None,
            region=doc.get("Region") or None,
            poll_every=float(every) if isinstance(every, (int, float)) else None,
            functions=[str(f) for f in doc.get("Functions") or []],
        )

    def with_options(self, options: Mapping[str, Any]) -> Remembered:
        """These settings with the command line's on top; the current folder is the handler path when
        none is given now or was remembered."""
        by_type = {_type_of(h): h for h in self.handlers}
        by_type.update({_type_of(h): h for h in options.get("handlers") or ()})
        paths = [str(Path(p).expanduser().resolve()) for p in options.get("handler_paths") or ()]
        settings = {_setting_of(f): f for f in self.functions}
        settings.update({_setting_of(f): f for f in options.get("functions") or ()})
        return Remembered(
            handlers=list(by_type.values()),
            handler_paths=paths or self.handler_paths or [str(Path.cwd())],
            functions=list(settings.values()),
            endpoint=options.get("endpoint") or self.endpoint,
            region=options.get("region") or self.region,
            poll_every=options["poll_every"] if options.get("poll_every") is not None else self.poll_every,
        )

    def describe(self) -> str:
        where = ", ".join(self.handler_paths)
        return f"handler modules from installed packages and {where} (--handler-path)"


def _type_of(option: str) -> str:
    return option.partition("=")[0].strip()


def _setting_of(option: str) -> tuple[str, str]:
    """'Custom::X=env.A=1' -> ('Custom::X', 'env.A'): what a later --function of the same setting replaces."""
    rtype, _, rest = option.partition("=")
    return rtype.strip(), rest.partition("=")[0].strip()

"""`python -m bench.ablate_daemon run ...`: the daemon with some of its per-request work taken out.

A diagnostic, like bench.trace_daemon (it patches the daemon from outside, no daemon code
changes), for `python -m bench --only burst --consumers daemon_ablated --ablate NAMES`: the
CPU per request of the daemon without NAMES, beside the daemon's and the durable floor's, says
what those parts cost in the whole request (a micro-benchmark cannot: thread wake-ups, the GIL
and the allocator's state are the whole request's). What it takes out are promises, so no one
may run it for anything else. $BENCH_ABLATE names them, comma-separated:

- `log`: the `request` line is the bare minimum the bench counts by (`{"event":"request",
  "outcome":...}` written to stdout), not the structlog line with its context, timestamp,
  redaction and lock;
- `metrics`: the per-request Prometheus updates (request_done, handler_ran) do nothing;
- `urls`: no ResponseURL rules (scheme, host, bucket, path, prefix);
- `durable`: the answer's body is stored on the event loop's connection in autocommit (no hop
  to the store's thread, no fsync) instead of the store thread's group commit;
- `shields`: a store write and a message's queue bookkeeping are awaited in the message's own
  task, not in a task of their own behind `asyncio.shield` (so a cancel at the grace period's end
  could cut them short);
- `handler` is not a patch: the burst runs this daemon with the trivial handler `async def`
  (no thread hand-off), as the `daemon_async_handler` consumer does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

NAMES = ("log", "metrics", "urls", "durable", "shields", "handler")
Patch = Callable[[Any, str, Any], None]


def _log(patch: Patch) -> None:
    from cfn_provider.pipeline.outcome import Outcome

    def bare_line(self: Outcome, event: str, *_: Any, **__: Any) -> None:
        sys.stdout.write(f'{{"event":"{event}","outcome":"{self.name}"}}\n')

    patch(Outcome, "log", bare_line)


def _metrics(patch: Patch) -> None:
    from cfn_provider.metrics import Metrics

    for name in ("request_done", "handler_ran"):
        patch(Metrics, name, lambda *_, **__: None)


def _urls(patch: Patch) -> None:
    from cfn_provider.trust.urls import ResponseUrlPolicy

    patch(ResponseUrlPolicy, "check", lambda *_, **__: None)


def _durable(patch: Patch) -> None:
    from cfn_provider.stores.sqlite import SQLiteStore

    async def save_on_loop(self: SQLiteStore, key: str, token: str, status: str, body: bytes) -> bool:
        saved = self._on_loop(self._save, key, token, status, body)
        if isinstance(saved, bool):
            return saved
        return await self._run(self._threads, self._save, key, token, status, body)  # the database was busy

    patch(SQLiteStore, "save_response", save_on_loop)


def _shields(patch: Patch) -> None:
    from cfn_provider.intake.poller import Poller
    from cfn_provider.pipeline.store_calls import StoreCalls

    async def settle(self: StoreCalls, aw: Any) -> tuple[Any, bool]:
        return await aw, False

    async def finish(self: Poller, aw: Any) -> None:
        await aw

    patch(StoreCalls, "settle", settle)
    patch(Poller, "_finish", finish)


_PATCHES: dict[str, Callable[[Patch], None]] = {
    "log": _log,
    "metrics": _metrics,
    "urls": _urls,
    "durable": _durable,
    "shields": _shields,
}


def parse(text: str) -> tuple[str, ...]:
    """'log, urls' -> ('log', 'urls'); an unknown name is an error, not a silent no-op."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown ablation {', '.join(unknown)} (known: {', '.join(NAMES)})")
    return names


def install(names: Iterable[str], patch: Patch = setattr) -> None:
    for name in names:
        if name in _PATCHES:
            _PATCHES[name](patch)


def main() -> None:
    install(parse(os.environ.get("BENCH_ABLATE", "")))
    from cfn_provider.cli import main as cli

    sys.argv = ["cfn-provider", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()

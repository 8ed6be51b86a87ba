"""The daemon embedded in simulate: a Service on a thread of its own with its own event loop."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...config import Settings


class EmbeddedDaemon:
    """The daemon (Service) on a thread of its own with its own event loop, so a handler that blocks
    its loop cannot freeze the simulated CloudFormation, which keeps its own clock."""

    def __init__(self, settings: Settings) -> None:
        from ...service import Service

        self.service = Service(settings)  # raises HandlerError for a bad --handler
        self.loop: Any = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._main, name="cfn-simulate-daemon", daemon=True)

    def _main(self) -> None:
        import asyncio

        async def run() -> int:
            self.loop = asyncio.get_running_loop()
            self._started.set()
            return await self.service.run()

        try:
            asyncio.run(run())
        except BaseException as exc:  # noqa: BLE001 - reported by the simulator
            self.error = exc
        finally:
            self._started.set()

    def start(self) -> None:
        self.thread.start()
        self._started.wait(30)

    @property
    def failure(self) -> str | None:
        if self.thread.is_alive():
            return None
        return f"{type(self.error).__name__}: {self.error}" if self.error else "it exited"

    def stop(self, timeout: float = 20.0) -> bool:
        """Stop, waiting up to `timeout` s; False when it is still running (e.g. a handler blocks its loop)."""
        if not self.thread.is_alive():
            return True

        # One stop: the daemon drains (its long poll is 1 s here). A second one is kept for a daemon that
        # does not stop in time, because it abandons in-flight requests (and says so in the log).
        with contextlib.suppress(RuntimeError):  # loop already closed
            self.loop.call_soon_threadsafe(self.service.stop)
        self.thread.join(timeout)
        if self.thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.service.stop)  # a second stop: abandon in-flight work
            self.thread.join(5)
        return not self.thread.is_alive()

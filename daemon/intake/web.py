"""The web transport: an HTTP(S) listener (aiohttp's server) for ROS's `web[options]:<url>` ServiceToken.

ROS POSTs each request's JSON to the ServiceToken's URL, unsigned: the URL's first path segment
is the secret (cfn_provider.trust.web_tokens). The path says the mode, since the body does not:
`/<token>` is asynchronous (`web:`: 200 once the request is durably stored, the answer POSTed to
its ResponseURL), `/<token>/sync` synchronous (`web[sync]:`: the answer is the response body).
One request's way through is in cfn_provider.intake.web_requests.

For the Service this is what the Poller is for a queue (run / stop / abort, tasks, handled, the
health fields). Stopping has two phases: stop() answers new requests 503 (and GET /healthz 503,
so a load balancer drains this member) while those in flight get the grace period; then what is
left is cancelled, and the worker answers FAILED when the deadline is too near, or else lets go
of the claim so that the request's retry runs it elsewhere; then the listener closes. abort():
at once. reload() (SIGHUP) reads the TLS certificate and key and the token file again; open
connections keep going.

Slow clients: a connection has --web-header-timeout seconds to complete its TLS handshake, then as
long again to send a complete request line and headers (aiohttp's keep-alive timer, which also
closes a connection that sends nothing), then --web-body-timeout seconds for its body. Open
connections are capped per source and in all (--web-max-connections-per-source,
--web-max-connections): past a cap a new connection is closed at once (web_connections).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..config import Settings
from ..errors import TransportConfigError
from ..logs import get_logger
from ..metrics import Metrics
from ..pipeline.worker import Worker
from ..trust.web_tokens import TokenError, Tokens
from ..web_settings import web_http_refused
from .poller import drain
from .web_connections import Connections, Listener
from .web_requests import Requests
from .web_tls import ServerTls, TlsError

log = get_logger("web")
SETTLE_SECONDS = 15.0  # at close: how long open connections get (the grace period is over by then)
WAIT_POLL_MAX = 1.0  # seconds, at most, a sync copy waits between looks at the attempt it waits for


class WebListener:
    """The listener: the server, its TLS and tokens, and its stop (see the module docstring)."""

    def __init__(
        self, settings: Settings, worker: Worker, metrics: Metrics, on_ready: Callable[[], object] | None = None
    ) -> None:
        s = self.settings = settings.web
        if bool(s.cert_file) != bool(s.key_file):
            raise TlsError("--web-cert and --web-key go together (the certificate chain and its private key)")
        if not s.tls and not s.allow_http:
            raise TransportConfigError(web_http_refused(s.address))
        self.tls = ServerTls(s.cert_file, s.key_file) if s.cert_file and s.key_file else None
        self.tokens = Tokens(s.token_file)
        self.connections = Connections(per_source=s.max_connections_per_source, total=s.max_connections)
        self.requests = Requests(
            s, worker, self.tokens, metrics, concurrency=settings.concurrency, lease_seconds=settings.visibility_timeout
        )
        self.worker, self.grace_period, self.on_ready = worker, settings.grace_period, on_ready
        # a caller waits on its connection (and holds a slot) while a copy waits: look often
        worker.policy = dataclasses.replace(worker.policy, wait_poll_max=WAIT_POLL_MAX)
        self.port: int | None = None  # once listening (--web-port 0 picks a free one)
        self.last_receive_ok: bool | None = None  # the health file's fields: listening, the last request
        self.last_error: str | None = None  # (a failed reload: still serving what was loaded before)
        self._listening_since: float | None = None
        self._stop = asyncio.Event()
        self._stopped_at: float | None = None  # monotonic time of the first stop: the grace period counts from it
        self._aborted = False

    # ------------------------------------------------------------------ what the Service reads
    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        return self.requests.tasks

    @property
    def handled(self) -> int:
        return self.requests.handled

    @property
    def last_receive_at(self) -> float | None:
        """When the last request was served (else since when the listener listens)."""
        return self.requests.last_request_at or self._listening_since

    def oldest_in_flight(self) -> float:
        return self.requests.oldest_in_flight()

    @property
    def url(self) -> str:
        """The listener's base URL (the ServiceToken's, less its token)."""
        host = self.settings.address
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port or self.settings.port}"

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        s = self.settings
        server = web.Server(
            self.requests,
            handler_cancellation=False,
            access_log=None,
            keepalive_timeout=s.header_timeout,
            lingering_time=min(5.0, s.body_timeout),
        )
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=SETTLE_SECONDS)
        await runner.setup()
        listener = Listener(server, self.connections, self.tls.context if self.tls else None, s.header_timeout)
        try:
            try:
                self.port = listener.open(s.address, s.port)
            except OSError as exc:
                raise TransportConfigError(f"cannot listen on {s.address}:{s.port}: {exc.strerror or exc}") from None
            self.last_receive_ok, self._listening_since = True, time.time()
            log.info(
                "web.listening",
                url=self.url,
                tls=self.tls is not None,
                tokens=len(self.tokens.tokens),
                tenants=self.tokens.tenants(),  # the tokens' names (principals), never the tokens
                paths="/<token>: asynchronous (web:), /<token>/sync: synchronous (web[sync]:)",
                allow_sources=list(s.allow_sources) or "any",
                sync_timeout=s.sync_timeout,
            )
            if self.tls is not None and self.tls.key_exposed():
                log.warning(
                    "web.key_exposed",
                    key_file=self.tls.key_file,
                    detail="the TLS key file can be read by group or others: chmod 600 it",
                )
            if self.on_ready:
                self.on_ready()
            await self._stop.wait()
            await self._drain()
        finally:
            listener.close()
            await runner.cleanup()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """New requests get 503; those in flight drain (idempotent)."""
        self.requests.stopping = True
        self.worker.drain()  # retries waiting on another attempt are answered 503 now
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stop.set()

    def grace_left(self) -> float:
        """Seconds left of the grace period, which starts at the stop (all of it before then)."""
        if self._stopped_at is None:
            return self.grace_period
        return max(0.0, self._stopped_at + self.grace_period - time.monotonic())

    def abort(self) -> None:
        """Second signal: stop now, whatever is in flight."""
        self._aborted = True
        self.stop()
        self.worker.stopping = False  # no more answering or releasing: just go
        for task in list(self.requests.tasks):
            task.cancel()

    async def _drain(self) -> None:
        if not self._aborted:
            await drain(set(self.requests.tasks), self.worker, self.grace_left())

    # ------------------------------------------------------------------ SIGHUP
    def reload(self) -> None:
        """Read the TLS files and the token file again; a failure keeps what was loaded."""
        if self.tls is not None:
            try:
                self.tls.reload()
                log.info(
                    "web.tls_reloaded",
                    cert_file=self.tls.cert_file,
                    loads=self.tls.loads,
                    detail="new connections get the certificate now loaded; open ones keep theirs",
                )
                self.last_error = None
            except TlsError as exc:
                self.last_error = str(exc)
                log.error("web.tls_reload_failed", error=str(exc), detail="still serving the certificate loaded before")
        if self.tokens.file:
            try:
                log.info("web.tokens_reloaded", tokens=self.tokens.reload(), tenants=self.tokens.tenants())
            except TokenError as exc:
                log.error("web.tokens_reload_failed", error=str(exc), detail="the tokens loaded before stay valid")

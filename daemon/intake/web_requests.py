"""One HTTP request to the web listener (cfn_provider.intake.web), from its path to its answer.

    source allowed? -> path token (constant time; its name is the request's principal) -> POST? -> not
    stopping, a free slot? -> the body (size, time) -> the request (JSON, fields, ResponseURL allowlist)
    -> its principal's stack (cfn_provider.pipeline.tenancy) -> the worker's claim, then
      async  /<token>:      stored (durably) for the poll scheduler to run -> 200 {"Accepted":true}
      sync   /<token>/sync: run here -> answer stored -> written as the response body (200)

Refused before anything is stored or run: a source outside --web-allow-source 403 (on every
path, GET /healthz included), no valid token 404 (both logged as `security` events, limited per
source: then 429), another method 405,
stopping or every slot busy 503 + Retry-After (and a sync request whose `lambda:` function has every
process busy: nothing ran, nothing stored, its retry runs it), a body over --web-max-body 413, a body slower
than --web-body-timeout 408, not UTF-8 JSON, a request missing fields or with CloudFormation's ARN
StackId (the transport decides the dialect: this one is ROS's) 400, a ResponseURL
outside the allowlist 403, a StackId another tenant (token name) owns 403. Error bodies are
JSON `{"Error": "..."}`; none shows the path.

A retry of a request (same StackId + RequestId) is never run twice: an async retry is
acknowledged (200), a sync retry waits for the first attempt's answer and gets the stored
body (cfn_provider.pipeline.worker; its outlet here is `WaitingCaller`). A sync retry that cannot
get it within its caller's limit, or finds the request free only after waiting, gets 503 +
Retry-After instead (the seconds until the holder's lease lapses): the retry then runs it with its
full budget, never with what is left of this one's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import time
import uuid
from typing import Any, NoReturn

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from ..errors import Forged, Rejected, TransportError
from ..logs import get_logger
from ..metrics import Metrics
from ..pipeline.disposition import Disposition
from ..pipeline.envelope import Envelope
from ..pipeline.heartbeat import Heartbeat
from ..pipeline.request import Request
from ..pipeline.responder import Delivery
from ..pipeline.runner import deadline_for
from ..pipeline.worker import Worker
from ..trust import sources
from ..trust.web_tokens import ASYNC, SYNC, Mode, Route, Tokens
from ..web_settings import WebSettings

log = get_logger("web")
HEALTH_PATH = (
    "/healthz"  # GET: 200 while serving, 503 once stopping (for a load balancer); no token, allowed sources only
)
ACCEPTED = b'{"Accepted":true}'
RETRY_FULL, RETRY_STOPPING = 1, 5  # Retry-After seconds: every slot busy; this daemon stopping
RETRY_BUSY = 2  # Retry-After seconds: the function serving the request has every process busy
CLOUDFORMATION_STACK_ID = (
    "invalid request: StackId is an ARN, CloudFormation's form: this listener serves ROS's web ServiceToken "
    "only (CloudFormation reaches the provider through SNS)"
)
WRITE_MARGIN = 2.0  # seconds a sync answer keeps back from the caller's limit, to be stored and written


class Refused(TransportError):
    """An HTTP request answered with an error before (or instead of) the worker."""

    def __init__(
        self,
        status: int,
        reason: str,
        retry_after: int | None = None,
        close: bool = False,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(reason)
        self.status, self.retry_after, self.close, self.headers = status, retry_after, close, headers or {}

    def response(self) -> web.Response:
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        resp = web.Response(
            status=self.status,
            headers=headers,
            content_type="application/json",
            body=json.dumps({"Error": str(self)}).encode(),
        )
        if self.close:
            resp.force_close()
        return resp


def held_elsewhere(seconds: float) -> Refused:
    """A sync copy that met its request held by another attempt (running it, or a member that died
    with its lease) and could not wait it out in its caller's time: never run with less than its full
    budget (cfn_provider.pipeline.claim), so 503 until the lease lapses."""
    return Refused(
        503,
        "another attempt holds this request (running it, or a provider that stopped with its lease): retry "
        "after Retry-After seconds, when its answer is stored or its lease has lapsed",
        max(1, math.ceil(seconds)),
    )


class WaitingCaller:
    """The outlet of a web[sync] request (cfn_provider.pipeline.outlets): the stored answer written as
    the HTTP response. The caller's limit (--web-sync-timeout from its arrival) caps the deadline."""

    caller_waits = True

    def __init__(self, http: web.BaseRequest, received_at: float, limit: float) -> None:
        self.http, self.until = http, received_at + limit
        self.waits_until: float | None = self.until - WRITE_MARGIN  # a copy waiting on another answers 503 by then
        self.response: web.StreamResponse | None = None  # once written

    def deadline(self, request: Request, deadline: float) -> float:
        # the worker keeps a response margin back for delivery (runner.handler_budget); here delivery
        # is one write: the handler may run until WRITE_MARGIN before the caller's limit
        now = time.time()
        return min(deadline, now + deadline_for(self.until - WRITE_MARGIN - now, request.service_timeout))

    async def send(self, request: Request, body: bytes, deadline: float | None) -> Delivery:
        response = web.Response(body=body, content_type="application/json")
        try:
            await response.prepare(self.http)
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            return Delivery(
                False,
                None,
                1,
                f"the caller hung up before its answer was written ({type(exc).__name__}); "
                "a retry of the request gets the stored answer",
            )
        self.response = response
        return Delivery(True, 200, 1, "HTTP 200: the answer is the response body")


class Requests:
    """The listener's request handler, its slots (`concurrency` requests worked on at once) and the
    tasks in flight (for the two-phase stop: cfn_provider.intake.web.WebListener)."""

    def __init__(
        self,
        settings: WebSettings,
        worker: Worker,
        tokens: Tokens,
        metrics: Metrics,
        *,
        concurrency: int,
        lease_seconds: int,
    ) -> None:
        self.settings, self.worker, self.tokens, self.metrics = settings, worker, tokens, metrics
        self.allow = sources.networks(settings.allow_sources)
        self.limiter = sources.RefusalLimiter()
        self.concurrency, self.free, self.lease_seconds = concurrency, concurrency, lease_seconds
        self.tasks: set[asyncio.Task[Any]] = set()  # aiohttp's request handler tasks
        self.started_at: dict[asyncio.Task[Any], float] = {}
        self.stopping = False
        self.handled = 0
        self.last_request_at: float | None = None

    async def __call__(self, http: web.BaseRequest) -> web.StreamResponse:
        structlog.contextvars.clear_contextvars()
        peer = http.remote or "-"
        structlog.contextvars.bind_contextvars(transport="web", source=peer)
        mode: Mode | None = None
        try:
            self._source(http, peer)
            if http.path == HEALTH_PATH and http.method in ("GET", "HEAD"):
                return self._health()
            route = self._authorize(http, peer)
            mode = route.mode
            if http.method != "POST":
                raise Refused(405, "only POST is served here", headers={"Allow": "POST"})
            if self.stopping:
                raise Refused(503, "this provider is stopping: retry (another one may take it)", RETRY_STOPPING, True)
            if self.free <= 0:
                raise Refused(503, f"all {self.concurrency} slots are busy: retry", RETRY_FULL)
            response = await self._in_slot(http, route)
        except Refused as exc:
            response = exc.response()
        self.metrics.web_answered(mode, response.status)
        return response

    def _health(self) -> web.Response:
        status, text = (503, "stopping") if self.stopping else (200, "ok")
        body = {"Status": text, "InFlight": len(self.tasks), "Handled": self.handled}
        return web.Response(status=status, content_type="application/json", body=json.dumps(body).encode())

    # ------------------------------------------------------------------ who may ask
    def _source(self, http: web.BaseRequest, peer: str) -> None:
        """Refused (403, 429 past the source's limit) for a source outside --web-allow-source: every path,
        /healthz included."""
        if not sources.allowed(peer, self.allow):
            self._refuse(peer, http.method, "source address is not in --web-allow-source", 403, "forbidden")

    def _authorize(self, http: web.BaseRequest, peer: str) -> Route:
        """The mode the path asks for and its token's tenant; Refused (404, 429 past the source's limit)
        otherwise. A valid token is never limited: behind a load balancer a scanner and ROS share one
        source address."""
        route = self.tokens.route(http.path)
        if route.mode is None:
            self._refuse(peer, http.method, "no valid path token", 404, "not found")
        return route

    def _refuse(self, peer: str, method: str, why: str, status: int, said: str) -> NoReturn:
        self.metrics.message_rejected("security")
        if not self.limiter.refused(peer):
            self._say_limited(peer)
            raise Refused(429, "too many refused requests from this address", int(1 / sources.RATE) + 1)
        log.warning("security", reason=why, method=method[:16], status=status)  # never the path: it may be a token
        raise Refused(status, said)

    def _say_limited(self, peer: str) -> None:
        count = self.limiter.summary_due(peer)
        if count:
            log.warning(
                "security.limited",
                refused=count,
                detail="refused requests from this address past its limit, answered 429 and not logged one by one",
            )

    # ------------------------------------------------------------------ one request, in a slot
    async def _in_slot(self, http: web.BaseRequest, route: Route) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self.free -= 1
        self.tasks.add(task)
        self.started_at[task] = time.monotonic()
        try:
            return await self._serve(http, route)
        except Refused:
            raise
        except Exception:  # noqa: BLE001 - one request must never take the listener down
            log.exception("web.crashed")
            return Refused(500, "the provider failed on this request: retry it").response()
        finally:
            self.free += 1
            self.tasks.discard(task)
            self.started_at.pop(task, None)
            self.last_request_at = time.time()

    async def _serve(self, http: web.BaseRequest, route: Route) -> web.StreamResponse:
        started, received, mode = time.monotonic(), dt.datetime.now(dt.UTC), route.mode
        body = await self._read(http)
        message_id = f"web-{uuid.uuid4().hex[:16]}"
        structlog.contextvars.bind_contextvars(
            message_id=message_id, mode=mode, dialect=self.worker.dialect.name, tenant=route.tenant
        )
        request = await self._admit(body, route.tenant)
        envelope = Envelope(message="", message_id=message_id, timestamp=received)
        outlet = WaitingCaller(http, received.timestamp(), self.settings.sync_timeout) if mode == SYNC else None
        heartbeat = Heartbeat(None, None, self.lease_seconds)  # the store lease is all that holds the request
        heartbeat.start()
        try:
            disposition = await self.worker.handle(
                envelope, request, heartbeat, started, outlet=outlet, run_here=mode == SYNC
            )
        finally:
            heartbeat.stop()
        self.handled += 1
        if outlet is not None and outlet.response is not None:
            return outlet.response
        if mode == ASYNC and disposition is Disposition.DELETE:  # claimed and stored, acknowledged, or replayed
            return web.Response(status=200, content_type="application/json", body=ACCEPTED)
        if disposition is Disposition.DEFER and not self.stopping and heartbeat.defer_seconds is not None:
            return held_elsewhere(heartbeat.defer_seconds).response()
        return self._status(disposition).response()

    def _status(self, disposition: Disposition) -> Refused:
        """What a request the worker did not answer in the response gets (a DELETE here is sync's)."""
        if disposition is Disposition.DELETE:  # a sync copy of a request another mode answers
            return Refused(
                409,
                "this request is answered at its ResponseURL (it is a long-running action, "
                "or was sent to the asynchronous path): it is not answered here",
            )
        if disposition is Disposition.RELEASE and not self.stopping and not self.worker.stopping:
            # handed back while serving: nothing ran (its function's every process busy), nothing stored
            return Refused(503, "the handler of this request is busy: retry", RETRY_BUSY)
        if disposition in (Disposition.RELEASE, Disposition.DEFER):
            return Refused(503, "this provider is stopping: retry (another one may take it)", RETRY_STOPPING, True)
        return Refused(500, "another provider took this request over: retry it")

    async def _read(self, http: web.BaseRequest) -> bytes:
        limit = self.settings.max_body
        if http.content_length is not None and http.content_length > limit:
            raise Refused(413, f"the body is {http.content_length} bytes; at most {limit} are accepted", close=True)
        if http.headers.get("Expect", "").lower() == "100-continue" and http.version >= (1, 1):
            await http.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for it otherwise
        try:
            return await asyncio.wait_for(self._body(http, limit), self.settings.body_timeout)
        except TimeoutError:
            raise Refused(408, f"the body did not arrive within {self.settings.body_timeout:g} s", close=True) from None
        except (RequestPayloadError, ConnectionError) as exc:
            raise Refused(400, f"the body could not be read ({type(exc).__name__})", close=True) from None

    @staticmethod
    async def _body(http: web.BaseRequest, limit: int) -> bytes:
        chunks, size = [], 0
        while chunk := await http.content.readany():
            size += len(chunk)
            if size > limit:
                raise Refused(413, f"the body is over {limit} bytes, the most accepted", close=True)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _admit(self, body: bytes, tenant: str) -> Request:
        """The request in the body, from `tenant` (the path token's name), or Refused (400; 403 for a
        ResponseURL outside the allowlist or a StackId another tenant owns)."""
        try:
            request = self.worker.admit_request(body.decode("utf-8"), tenant)
            if not request.problems:
                await self.worker.tenancy.admit(request)  # its tenant's stack (pipeline.tenancy)
        except UnicodeDecodeError:
            raise self._rejected(400, "the body is not UTF-8 text") from None
        except (Rejected, Forged) as exc:  # "message is not JSON", "ResponseURL ... rejected", ...
            forged = isinstance(exc, Forged)
            raise self._rejected(403 if forged else 400, f"the body: {exc}", forged) from None
        if request.problems:
            raise self._rejected(400, "invalid request: " + "; ".join(request.problems))
        if request.stack_id.startswith("arn:"):  # the transport decides the dialect: this one is ROS's only
            raise self._rejected(400, CLOUDFORMATION_STACK_ID)
        return request

    def _rejected(self, status: int, reason: str, security: bool = False) -> Refused:
        self.metrics.message_rejected("security" if security else "rejected")
        getattr(log, "warning" if security else "error")(
            "security" if security else "rejected", reason=reason, status=status
        )
        return Refused(status, reason)

    def oldest_in_flight(self) -> float:
        return time.monotonic() - min(self.started_at.values()) if self.started_at else 0.0

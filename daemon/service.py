"""Build the daemon from Settings and run it until stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import replace

import aiobotocore.session
import aiohttp

from . import aws_start, loops
from . import function_isolation as isolation
from .config import Settings, health_path
from .dialects.base import CLOUDFORMATION
from .dialects.ros import ROS, ResponseUrlChoice, inside_alibaba_cloud
from .errors import TransportConfigError
from .functions import fc_target
from .functions.function import LambdaFunction
from .functions.host import FunctionHost
from .intake.dead_letters import DeadLetterWatcher, watcher_for
from .intake.poll_scheduler import PollScheduler, scheduler_for
from .intake.poller import Poller
from .intake.web import WebListener
from .logs import get_logger
from .metrics import Metrics
from .ops import health
from .pipeline.envelope import MNS_FORMS, SNS_FORMS
from .pipeline.responder import Responder
from .pipeline.router import Router
from .pipeline.worker import Policy, Worker
from .stores import open_store
from .stores.base import Store
from .stores.probe import probe
from .transports.mns import MnsQueue, load_credentials
from .transports.queue import Queue, SqsQueue
from .trust.at_rest import secure_key_files
from .trust.signature import SignatureVerifier
from .trust.tenants import from_options
from .trust.topics import allowlist
from .trust.urls import ResponseUrlPolicy, redact

log = get_logger("service")
HEALTH_INTERVAL = 10.0  # seconds between health-file refreshes
SCRUB_INTERVAL = 60.0  # seconds between passes taking NoEcho Data out of bodies past the replay window


class Service:
    """The running daemon. `await run()`; `stop()` drains; a second `stop()` aborts."""

    def __init__(self, settings: Settings, on_ready: Callable[[], object] | None = None):
        self.settings = settings
        self.on_ready = on_ready
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        fc_target.refuse_on(settings.transport, settings.handlers)  # before any function is loaded
        isolation.isolate(settings)  # before the router checks a function: it does so in its sandbox
        self.router = Router(
            settings.handlers,
            use_entry_points=settings.use_entry_points,
            functions=settings.functions,
            handler_paths=settings.handler_paths,
        )
        self.poller: Poller | WebListener | None = None  # what brings requests in: the queue's poller, or the listener
        self.dead_letters: DeadLetterWatcher | None = None
        self.polls: PollScheduler | None = None
        self.health_file = health_path(settings.state, settings.health_file, settings.daemon)
        self.metrics = Metrics(resource_label=self._resource_label)
        self.metrics.on_refused = self._refused
        self._refused_written = 0.0
        self._stop_requests = 0
        self._early_stop = False

    def stop(self) -> None:
        self._stop_requests += 1
        health.sd_notify("STOPPING=1")
        if self.poller is None:
            self._early_stop = True
        elif self._stop_requests == 1:
            log.info("stopping", detail="no longer receiving; draining in-flight requests")
            self.poller.stop()
            if self.dead_letters is not None:
                self.dead_letters.stop()
            if self.polls is not None:
                self.polls.stop()
        else:
            log.warning("stopping_now", detail="second stop request: abandoning in-flight requests")
            self.poller.abort()

    def _resource_label(self, resource_type: str) -> str:
        """A metric label: the route that serves it (its pattern for a glob), else `other`."""
        route = self.router.route(resource_type)
        return route.pattern if route is not None else "other"

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        if self.settings.transport == "web":
            loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        """SIGHUP (transport web): the listener reads its TLS certificate and token file again."""
        if isinstance(self.poller, WebListener):
            self.poller.reload()

    async def run(self) -> int:
        s = self.settings
        policy = self._policy()  # before anything is opened: a bad --mns-topic is refused at once
        secure_key_files()  # before anything is served: a key open to others is fixed or refused
        store: Store = open_store(s.state, region=s.region)
        executor = ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="handler")
        try:
            aws_start.check(s.region, s.transport, s.state)  # before any AWS call: a region and credentials
            async with AsyncExitStack() as stack:
                session = aiobotocore.session.get_session()
                http = await stack.enter_async_context(aiohttp.ClientSession())
                await self._start_functions(stack)
                queue = await self._open_queue(session, stack) if s.transport != "web" else None
                if not await probe(store, lambda: self._stop_requests > 0):  # before READY: the store answers
                    return 0
                worker = self._worker(store, executor, session, http, policy)
                self.poller = self._intake(queue, worker)
                await self._serve(self.poller, worker, queue, store)
        finally:
            await store.close()
            executor.shutdown(wait=False, cancel_futures=True)
        aborted = self._stop_requests > 1
        log.info("stopped", handled=self.poller.handled if self.poller else 0, aborted=aborted)
        return 1 if aborted else 0

    def _worker(
        self,
        store: Store,
        executor: ThreadPoolExecutor,
        session: aiobotocore.session.AioSession,
        http: aiohttp.ClientSession,
        policy: Policy,
    ) -> Worker:
        s = self.settings
        sns = s.transport == "sqs"  # SNS signatures and topics exist only on that path
        verifier = SignatureVerifier(http, s.trust_signing_cert_urls) if s.verify_signatures and sns else None
        inside = s.alibaba_cloud if s.alibaba_cloud is not None else inside_alibaba_cloud()
        return Worker(
            router=self.router,
            store=store,
            responder=Responder(http, on_retry=self.metrics.put_retried),
            url_policy=ResponseUrlPolicy(s.allow_response_urls),
            verifier=verifier,
            policy=policy,
            executor=executor,
            owner=self.owner,
            session=session,
            metrics=self.metrics,
            dialect=CLOUDFORMATION if sns else ROS,
            url_choice=ResponseUrlChoice(s.ros_response_url, inside),
        )

    def _intake(self, queue: Queue | None, worker: Worker) -> Poller | WebListener:
        """What brings requests in: the queue's poller, or (no queue) the web listener."""
        s = self.settings
        if queue is None:
            return WebListener(s, worker, self.metrics, on_ready=self._ready)
        return Poller(
            queue,
            worker,
            concurrency=s.concurrency,
            visibility_timeout=s.visibility_timeout,
            wait_seconds=s.wait_seconds,
            grace_period=s.grace_period,
            max_backoff=s.max_backoff,
            on_ready=self._ready,
            on_receive_error=self.metrics.receive_failed,
        )

    async def _serve(self, poller: Poller | WebListener, worker: Worker, queue: Queue | None, store: Store) -> None:
        """Serve until stopped: the intake, beside it housekeeping, the poll scheduler and the
        dead-letter watcher; then stop those, each within what is left of the grace period."""
        s = self.settings
        self.metrics.watch(lambda: len(poller.tasks), poller.oldest_in_flight)
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_port, s.metrics_address)
            log.info("metrics_listening", address=s.metrics_address, port=s.metrics_port)
        self._log_start(queue)
        if self._early_stop:
            poller.stop()
        housekeeping = asyncio.create_task(self._housekeeping(store))
        polls = self.polls = scheduler_for(
            worker,
            store,
            owner=self.owner,
            concurrency=s.concurrency,
            lease_seconds=s.visibility_timeout,
            interval=s.poll_interval,
        )
        polling = asyncio.create_task(polls.run())
        if self._early_stop:
            polls.stop()
        watching = await self._watch_dead_letters(queue, worker)
        try:
            await poller.run()
        finally:
            housekeeping.cancel()
            await self._stop_watching(watching)
            await polls.drain(self._grace_left())
            polling.cancel()

    async def _watch_dead_letters(self, queue: Queue | None, worker: Worker) -> asyncio.Task[None] | None:
        """The dead-letter watcher's task, when the queue has a dead-letter queue to watch."""
        s = self.settings
        self.dead_letters = (
            await watcher_for(queue, worker, interval=s.dead_letter_interval, visibility_timeout=s.visibility_timeout)
            if queue
            else None
        )
        watching = asyncio.create_task(self.dead_letters.run()) if self.dead_letters else None
        if self._early_stop and self.dead_letters:
            self.dead_letters.stop()
        return watching

    async def _start_functions(self, stack: AsyncExitStack) -> None:
        """`lambda:` functions: the answer listener, and a warm process each (closed after the last
        request is settled: their processes end with the daemon's run)."""
        functions = [h for h in (r.handler() for r in self.router.routes()) if isinstance(h, LambdaFunction)]
        if not functions:
            return
        isolation.say_in_force()
        host = await stack.enter_async_context(FunctionHost())
        started = time.monotonic()
        await host.warm(functions)
        log.info(
            "functions_started", functions=[f.name for f in functions], seconds=round(time.monotonic() - started, 2)
        )

    def _policy(self) -> Policy:
        """The trust policy of the transport: SNS signatures and TopicArns on SQS; on MNS its topic
        allowlist, and bare messages only without one (or with --mns-allow-bare-messages)."""
        s = self.settings
        tenants = from_options(s.tenant_handlers, s.tenant_topics)  # TenantError: a start-up error
        if s.transport == "sqs":
            return Policy(s.verify_signatures, s.topic_arns, s.visibility_timeout, forms=SNS_FORMS, tenants=tenants)
        try:
            topics = allowlist(s.mns_topics, s.mns_endpoint or "")
            mns_forms = allowlist(list(tenants.topics), s.mns_endpoint or "")  # as a notification names them
            tenants = replace(tenants, topics=dict(zip(mns_forms, tenants.topics.values(), strict=True)))
        except ValueError as exc:
            raise TransportConfigError(str(exc)) from None
        bare = not topics or s.mns_allow_bare_messages
        web = s.transport == "web"  # a token's name is a principal: every stack has its owner
        return Policy(
            False, topics, s.visibility_timeout, forms=MNS_FORMS, bare_messages=bare, tenants=tenants, owners=web
        )

    async def _stop_watching(self, watching: asyncio.Task[None] | None) -> None:
        """Let the dead-letter pass in progress finish its messages within the grace period (none
        after a second stop request), then stop it."""
        if watching is None:
            return
        assert self.dead_letters is not None
        self.dead_letters.stop()
        if not watching.done():
            await asyncio.wait({watching}, timeout=self._grace_left())
        watching.cancel()
        await asyncio.wait({watching})

    def _grace_left(self) -> float:
        """What is left of the grace period, counted from the first stop request (none after a second)."""
        if self._stop_requests > 1:
            return 0.0
        return self.poller.grace_left() if self.poller is not None else self.settings.grace_period

    def _ready(self) -> None:
        """First successful receive: the daemon is serving."""
        health.sd_notify("READY=1")
        self._write_health()
        if self.on_ready:
            self.on_ready()

    def _refused(self) -> None:
        """A message was not run: say so in the health file now (at most once a second), where
        `cfn-provider invoke` looks for why its request got no answer."""
        if time.monotonic() - self._refused_written >= 1.0:
            self._refused_written = time.monotonic()
            self._write_health()

    def _write_health(self) -> None:
        p = self.poller
        if p is None:
            return
        try:
            health.write(
                self.health_file,
                health.Health(
                    pid=os.getpid(),
                    updated_at=time.time(),
                    last_receive_ok=p.last_receive_ok,
                    last_receive_at=p.last_receive_at,
                    last_error=p.last_error,
                    in_flight=len(p.tasks),
                    handled=p.handled,
                    daemon=self.settings.daemon,
                    refused=list(self.metrics.refusals),
                ),
            )
        except OSError as exc:
            log.warning("health.write_failed", path=str(self.health_file), error=str(exc))

    async def _housekeeping(self, store: Store | None = None) -> None:
        """From the event loop itself, so a wedged loop stops both: health file and watchdog.
        Also takes NoEcho Data out of stored bodies past the replay window (cfn_provider.trust.retention)."""
        watchdog = health.watchdog_interval()
        interval = min(HEALTH_INTERVAL, watchdog or HEALTH_INTERVAL, self.settings.summary_interval)
        next_summary = time.monotonic() + self.settings.summary_interval
        next_scrub = time.monotonic()
        while True:
            if store is not None and time.monotonic() >= next_scrub:
                next_scrub = time.monotonic() + SCRUB_INTERVAL
                try:
                    scrubbed = await store.scrub_due()
                    if scrubbed:
                        log.info("noecho.scrubbed", records=scrubbed)
                except Exception as exc:  # noqa: BLE001 - retried next round; serving goes on
                    log.warning("noecho.scrub_failed", error=f"{type(exc).__name__}: {exc}"[:200])
            self._write_health()
            if watchdog:
                health.sd_notify("WATCHDOG=1")
            if time.monotonic() >= next_summary:
                next_summary += self.settings.summary_interval
                log.info("summary", period_seconds=self.settings.summary_interval, **self.metrics.summary())
            await asyncio.sleep(interval)

    async def _open_queue(self, session: aiobotocore.session.AioSession, stack: AsyncExitStack) -> Queue:
        s = self.settings
        if s.transport == "mns":
            return await MnsQueue.open(
                s.mns_endpoint or "", s.mns_queue or "", load_credentials(), stack, allow_http=s.mns_allow_http
            )
        return await SqsQueue.open(session, s.queue_url, s.region, stack)

    def _log_start(self, queue: Queue | None) -> None:
        s = self.settings
        where = {"queue_url": redact(queue.url)} if queue else {"listen": f"{s.web.address}:{s.web.port}"}
        log.info(
            "started",
            **where,
            transport=s.transport,
            owner=self.owner,
            concurrency=s.concurrency,
            state=s.state.split("?")[0],
            event_loop=loops.running(),
            health_file=str(self.health_file),
            handlers=[f"{r.pattern}={r.spec}" for r in self.router.routes()],
            not_served=[r.pattern for r in self.router.available],
        )
        if not self.router.routes():
            log.warning(
                "no_handlers",
                detail="no handler is named, so every request is answered FAILED "
                "'no handler for TYPE': name them with --handler TYPE[=MODULE[:ATTR]]",
            )
        if s.transport == "web":
            log.info(
                "web_trust",
                ros_response_url=s.ros_response_url,
                detail="ROS does not sign web requests: trust "
                "rests on the URL's path token (and --web-allow-source, if given)",
            )
        elif s.transport == "mns":
            self._log_mns_trust()
        else:
            self._log_sns_trust()

    def _log_mns_trust(self) -> None:
        s = self.settings
        log.info(
            "mns_trust",
            ros_response_url=s.ros_response_url,
            topics=list(s.mns_topics),
            bare_messages=not s.mns_topics or s.mns_allow_bare_messages,
            detail="MNS messages carry no signature: trust rests on who may send to the queue (RAM policy)",
        )
        if not s.mns_topics:
            log.warning(
                "topics_unrestricted",
                detail="no --mns-topic given: notifications from any MNS topic, and bare messages, are accepted",
            )

    def _log_sns_trust(self) -> None:
        s = self.settings
        if not s.verify_signatures:
            log.warning(
                "signatures_off", detail="SNS signature verification is OFF: trust rests on the queue policy alone"
            )
        if not s.topic_arns:
            log.warning(
                "topics_unrestricted", detail="no --topic-arn given: notifications from any SNS topic are accepted"
            )
        if s.trust_signing_cert_urls:
            log.warning(
                "cert_urls_trusted",
                prefixes=list(s.trust_signing_cert_urls),
                detail="SNS signing certificates are also trusted from these non-AWS prefixes",
            )

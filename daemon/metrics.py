"""What the daemon counts, for Prometheus (`--metrics-port`) and for a once-a-minute log line.

Each Service has its own registry, so several daemons in one process (tests) never mix.
Nothing here carries a request's properties, Data or URL: only types, outcomes and timings.

Label values are bounded: every one that comes from a message is mapped onto a fixed set first.
A request type is Create, Update, Delete or `other`; a ResourceType is one the operator named
(a glob route counts as its pattern) or `other`. Otherwise anyone who can publish to the topic
could mint a new time series per message and grow the daemon's memory (and the scraper's)
without end.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .errors import StartupError

_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600)
OTHER = "other"
# the request types a label may name (pipeline.request.REQUEST_TYPES, the wire's; a test ties them)
REQUEST_TYPES = ("Create", "Update", "Delete")


def request_type_label(request_type: str | None) -> str:
    if not request_type:
        return "-"
    return request_type if request_type in REQUEST_TYPES else OTHER


class MetricsListenError(StartupError):
    """The metrics endpoint cannot listen (its port is in use)."""


class Metrics:
    """`resource_label` maps a message's ResourceType onto a bounded set (the Service gives the
    router's: the route's pattern, or `other`); without one every ResourceType counts as `other`."""

    def __init__(self, resource_label: Callable[[str], str] | None = None) -> None:
        self._resource_label = resource_label or (lambda _rtype: OTHER)
        self.refusals: deque[dict[str, Any]] = deque(maxlen=5)
        self.on_refused: Callable[[], object] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "cfn_provider_requests",
            "Messages handled, by request type, outcome and status",
            ["request_type", "outcome", "status"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "cfn_provider_rejected_messages",
            "Messages not run, by kind (rejected, security)",
            ["kind"],
            registry=self.registry,
        )
        self.handler_seconds = Histogram(
            "cfn_provider_handler_seconds",
            "Handler run time",
            ["resource_type", "request_type"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.receive_errors = Counter(
            "cfn_provider_receive_errors", "Failed receives from the queue", registry=self.registry
        )
        self.put_retries = Counter(
            "cfn_provider_response_put_retries", "Retried response uploads", registry=self.registry
        )
        self.polls = Counter(
            "cfn_provider_polls",
            "Long-running requests: polls started, and poll steps by outcome "
            "(waiting, answered, failed, timed-out, lost)",
            ["outcome"],
            registry=self.registry,
        )
        self.web_responses = Counter(
            "cfn_provider_web_responses",
            "Web listener responses, by mode (sync, async, - before the path was known) and HTTP status",
            ["mode", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge("cfn_provider_in_flight", "Messages being worked on", registry=self.registry)
        self.oldest_in_flight = Gauge(
            "cfn_provider_oldest_in_flight_seconds", "Age of the oldest message being worked on", registry=self.registry
        )
        self._in_flight: Callable[[], float] = lambda: 0
        self._oldest: Callable[[], float] = lambda: 0.0
        self._since = {"answered": 0.0, "failed": 0.0, "rejected": 0.0, "receive_errors": 0.0, "put_retries": 0.0}

    def watch(self, in_flight: Callable[[], float], oldest_age: Callable[[], float]) -> None:
        """Gauges read at scrape time from the poller's own state."""
        self._in_flight, self._oldest = in_flight, oldest_age
        self.in_flight.set_function(in_flight)
        self.oldest_in_flight.set_function(oldest_age)

    def request_done(self, request_type: str, outcome: str, status: str | None) -> None:
        self.requests.labels(request_type_label(request_type), outcome, status or "-").inc()
        if outcome == "answered":
            self._since["answered" if status == "SUCCESS" else "failed"] += 1

    def message_rejected(self, kind: str, reason: str = "") -> None:
        self.rejected.labels(kind).inc()
        self._since["rejected"] += 1
        self.message_refused(kind, reason)

    def message_refused(self, kind: str, reason: str) -> None:
        """Keep the last few refusals (rejected, security, deferred) for the health file, where
        `invoke` reads why a request it sent was never answered; `on_refused` is told at once."""
        self.refusals.append({"at": round(time.time(), 3), "event": kind, "reason": reason[:300]})
        if self.on_refused is not None:
            self.on_refused()

    def handler_ran(self, resource_type: str, request_type: str, seconds: float) -> None:
        self.handler_seconds.labels(self._resource_label(resource_type), request_type_label(request_type)).observe(
            seconds
        )

    def web_answered(self, mode: str | None, status: int) -> None:
        """One web listener response (`mode` None: not a valid path; `status` one the listener sends)."""
        self.web_responses.labels(mode or "-", str(status)).inc()

    def poll_ran(self, outcome: str) -> None:
        self.polls.labels(outcome).inc()

    def receive_failed(self) -> None:
        self.receive_errors.inc()
        self._since["receive_errors"] += 1

    def put_retried(self) -> None:
        self.put_retries.inc()
        self._since["put_retries"] += 1

    def summary(self) -> dict[str, float]:
        """Counts since the last summary, plus the gauges now (for the minute log line)."""
        counts, self._since = self._since, dict.fromkeys(self._since, 0.0)
        return {
            **{k: int(v) for k, v in counts.items()},
            "in_flight": int(self._in_flight()),
            "oldest_in_flight_seconds": round(self._oldest(), 1),
        }

    def serve(self, port: int, address: str) -> None:
        """The /metrics endpoint; a port already in use (or an address not this host's) stops the start."""
        try:
            start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise MetricsListenError(
                f"--metrics-port {port}: cannot listen on {address}:{port} ({exc.strerror or exc})"
            ) from None

"""Deliver a response body to its presigned ResponseURL.

PUT with an empty Content-Type (a SigV2 presigned URL signs it), the URL exactly as given
(no re-quoting: that would break the signature), connect/read timeouts, and retries with
jittered exponential backoff on connection errors, 5xx, 408, 429 and S3's `400 RequestTimeout`
(S3 did not get the body in time: retryable, S3's error docs say) until the URL expires.
Other 4xx are final: retrying cannot change the answer.

That is CloudFormation's dialect; `send` takes the request's dialect for the method and headers
(ROS: POST, application/json and a GMT Date) and may be given several URLs: on a connection
error it moves on to the next (ROS's intranet URL first, then the public one).

One delivery has an overall deadline: the URL's expiry or the request's own deadline (after it
CloudFormation no longer listens), whichever comes first, across every attempt and backoff. The
socket read timeout alone cannot bound it: a server that trickles a byte every few seconds never
trips it, and would otherwise hold the request's slot until the URL expired, or for ever. The
request's deadline always leaves `min_delivery` seconds (default 30) from the start of the
delivery: an answer made at or after it (a stale message, a host clock ahead of SNS's) still gets
a real try, which CloudFormation ignores if it no longer waits and needs if it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential
from yarl import URL

from ..dialects.base import CLOUDFORMATION, Dialect
from ..errors import TransportError
from ..logs import get_logger
from ..trust.urls import expires_at, redact
from .retries import first_try_then

log = get_logger("responder")
RETRYABLE_STATUS = {408, 429}
RETRYABLE_S3_CODES = {"RequestTimeout"}  # S3 sends these with 400: the body came too slowly, try again
UNKNOWN_EXPIRY_BUDGET = 3600.0  # a URL that states no expiry is retried this long
MIN_DELIVERY = 30.0  # seconds a delivery always gets, whatever the request's deadline says


class _Retryable(TransportError):
    """A PUT of the answer that failed in a way worth trying again (a 5xx, a connection error, ...)."""


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    status: int | None  # last HTTP status, None when no answer came
    attempts: int
    detail: str

    @property
    def expired(self) -> bool:
        return self.status == 403


class Responder:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        connect_timeout: float = 10,
        read_timeout: float = 30,
        max_backoff: float = 30,
        on_retry: Callable[[], object] | None = None,
        min_delivery: float = MIN_DELIVERY,
    ):
        self.session, self.min_delivery = session, min_delivery
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self.max_backoff = max_backoff
        self.on_retry = on_retry

    async def put(self, url: str, body: bytes, deadline: float | None = None) -> Delivery:
        return await self.send([url], body, deadline=deadline)

    async def send(
        self, urls: Sequence[str], body: bytes, dialect: Dialect = CLOUDFORMATION, deadline: float | None = None
    ) -> Delivery:
        """Deliver `body`; `deadline` (epoch seconds) is the request's, if known: no attempt or
        wait goes past it (but `min_delivery` from now) or the URL's expiry, whichever is first."""
        urls = list(urls)
        url = urls.pop(0)
        give_up_at = expires_at(url) or time.time() + UNKNOWN_EXPIRY_BUDGET
        if deadline is not None:
            give_up_at = min(give_up_at, max(deadline, time.time() + self.min_delivery))
        if time.time() >= give_up_at:
            return Delivery(False, None, 0, "URL expired before the first attempt")
        sending = _Sending(self, url, urls, body, dialect, give_up_at)
        try:
            await first_try_then(sending.attempt, sending.retrying)
        except _Retryable:
            return Delivery(
                False,
                sending.status,
                sending.attempts,
                f"gave up at URL expiry or the request's deadline: {sending.detail}",
            )
        except ValueError as exc:  # the HTTP client refuses the URL itself: final
            return Delivery(False, None, sending.attempts, f"unusable URL: {str(exc)[:200]}")
        status = sending.status
        return Delivery(status is not None and 200 <= status < 300, status, sending.attempts, sending.detail)

    async def _attempt(self, url: str, body: bytes, dialect: Dialect, give_up_at: float) -> tuple[int | None, str]:
        # the whole attempt ends at the delivery's deadline, however slowly the bytes come (the
        # waits between attempts never pass it either: `stop` sees the next sleep)
        timeout = aiohttp.ClientTimeout(
            total=max(0.001, give_up_at - time.time()),
            sock_connect=self.timeout.sock_connect,
            sock_read=self.timeout.sock_read,
        )
        try:
            async with self.session.request(
                dialect.method,
                URL(url, encoded=True),
                data=body,
                headers=dialect.headers(),
                timeout=timeout,
                allow_redirects=False,
            ) as resp:
                text = (await resp.content.read(512)).decode("utf-8", "replace")
                return resp.status, f"HTTP {resp.status} {_s3_error_code(text)}".strip()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]


class _Sending:
    """One delivery's attempts: the URL tried now (the next on a connection error), the last answer,
    and the retry policy that stops at `give_up_at`."""

    def __init__(
        self, responder: Responder, url: str, fallbacks: list[str], body: bytes, dialect: Dialect, give_up_at: float
    ):
        self.responder, self.url, self.fallbacks = responder, url, fallbacks
        self.body, self.dialect, self.give_up_at = body, dialect, give_up_at
        self.status: int | None = None
        self.detail = "no answer before the delivery deadline"
        self.attempts = 0

    def stop(self, state: RetryCallState) -> bool:
        return time.time() + (state.upcoming_sleep or 0) >= self.give_up_at

    def before_sleep(self, state: RetryCallState) -> None:
        if self.responder.on_retry:
            self.responder.on_retry()
        log.warning(
            "response.retry",
            url=redact(self.url),
            attempt=state.attempt_number,
            detail=self.detail,
            sleep=round(state.upcoming_sleep, 2),
        )

    def retrying(self) -> AsyncRetrying:  # built only once the first attempt has failed
        return AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            wait=wait_random_exponential(multiplier=0.5, max=self.responder.max_backoff),
            stop=self.stop,
            before_sleep=self.before_sleep,
            reraise=True,
        )

    async def attempt(self) -> None:
        self.attempts += 1
        status, detail = await self.responder._attempt(self.url, self.body, self.dialect, self.give_up_at)
        if status is not None or time.time() < self.give_up_at:  # one cut by the deadline tells nothing
            self.status, self.detail = status, detail
        if status is None and self.fallbacks:  # unreachable: try the next URL
            log.warning("response.fallback", url=redact(self.url), detail=detail, to=redact(self.fallbacks[0]))
            self.url = self.fallbacks.pop(0)
        if status is None or status >= 500 or status in RETRYABLE_STATUS or _retryable_400(status, detail):
            raise _Retryable(detail)


def _retryable_400(status: int, detail: str) -> bool:
    """A 400 whose S3 error code (read from the XML body, in `detail`) says the request may be retried."""
    return status == 400 and detail.rpartition(" ")[2] in RETRYABLE_S3_CODES


def _s3_error_code(text: str) -> str:
    start = text.find("<Code>")
    end = text.find("</Code>", start)
    return text[start + 6 : end] if 0 <= start < end else ""

"""Who may talk to the web listener: an optional allowlist of source networks, and a per-source
limit on refused requests (a wrong or missing path token, a source outside the allowlist).

The limit is a token bucket per source address: BURST refusals at once, then one every
1/RATE seconds. Past it a refused request is answered 429 (Retry-After) instead of 403/404, and
the source's refusals are logged once a minute as a count instead of once each, so a scanner
cannot fill the log. Requests that carry a valid token are never limited: behind a load balancer
every request, ROS's and a scanner's, comes from the balancer's address.
At most MAX_SOURCES addresses are remembered (the least recently refused are forgotten first).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

BURST = 10.0  # refusals a source may have at once
RATE = 1.0  # refusals a second, after the burst
MAX_SOURCES = 10_000
SUMMARY_EVERY = 60.0  # seconds between a limited source's summary log lines

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(values: Iterable[str]) -> tuple[Network, ...]:
    """--web-allow-source values (addresses or CIDR networks); ValueError naming a bad one."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"--web-allow-source {value!r} is not an IP address or network (e.g. 10.0.0.0/8)"
            ) from None
    return tuple(out)


def allowed(address: str | None, allow: tuple[Network, ...]) -> bool:
    """Whether a peer may be served: any when there is no allowlist, else one inside it."""
    if not allow:
        return True
    try:
        ip = ipaddress.ip_address((address or "").split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in allow)


@dataclass
class _Bucket:
    level: float
    at: float
    limited: int = 0  # refusals past the limit since the last summary
    said_at: float = field(default=0.0)


class RefusalLimiter:
    """`refused(source)`: count one refusal; True while the source is within its limit."""

    def __init__(
        self,
        burst: float = BURST,
        rate: float = RATE,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.burst, self.rate, self.clock, self.max_sources = burst, rate, clock, max_sources
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def refused(self, source: str) -> bool:
        """Count a refusal of `source`; False when it was past the limit (answer 429, log only a summary)."""
        now = self.clock()
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = self._buckets[source] = _Bucket(self.burst, now)
            if len(self._buckets) > self.max_sources:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(source)
        bucket.level, bucket.at = self._level(bucket), now
        if bucket.level >= 1.0:
            bucket.level -= 1.0
            return True
        bucket.limited += 1
        return False

    def summary_due(self, source: str) -> int:
        """Refusals past the limit not yet logged, when a summary line is due for `source` (else 0)."""
        bucket = self._buckets.get(source)
        if bucket is None or not bucket.limited or self.clock() - bucket.said_at < SUMMARY_EVERY:
            return 0
        count, bucket.limited, bucket.said_at = bucket.limited, 0, self.clock()
        return count

    def _level(self, bucket: _Bucket) -> float:
        return min(self.burst, bucket.level + (self.clock() - bucket.at) * self.rate)

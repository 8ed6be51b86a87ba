"""cfn_provider.trust.sources: the source-network allowlist and the per-source limit on refused requests."""

from __future__ import annotations

import pytest

from cfn_provider.trust.sources import SUMMARY_EVERY, RefusalLimiter, allowed, networks


def test_networks_and_allowed():
    allow = networks(["10.0.0.0/8", "192.168.1.7", "2001:db8::/32"])
    assert allowed("10.1.2.3", allow) and allowed("192.168.1.7", allow) and allowed("2001:db8::1", allow)
    assert allowed("::ffff:10.9.9.9", allow)  # an IPv4 client on a dual-stack socket
    assert not allowed("192.168.1.8", allow) and not allowed("127.0.0.1", allow) and not allowed(None, allow)
    assert not allowed("not-an-address", allow)
    assert allowed("203.0.113.5", ()) and allowed(None, ())  # no allowlist: anyone (the token decides)
    with pytest.raises(ValueError, match="'10.0.0.300/8'"):
        networks(["10.0.0.300/8"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_source_gets_a_burst_then_a_rate_and_a_summary():
    clock = Clock()
    limiter = RefusalLimiter(burst=3, rate=0.5, clock=clock)
    assert [limiter.refused("a") for _ in range(5)] == [True, True, True, False, False]
    assert limiter.refused("b")  # per source
    assert limiter.summary_due("a") == 2 and limiter.summary_due("a") == 0  # said once ...
    limiter.refused("a")
    assert limiter.summary_due("a") == 0  # ... and not again within the minute
    clock.now += SUMMARY_EVERY
    assert limiter.summary_due("a") == 1
    assert [limiter.refused("a") for _ in range(4)] == [True, True, True, False]  # a minute on: a full burst again
    clock.now += 2  # 0.5 a second: one more allowed
    assert limiter.refused("a") and not limiter.refused("a")


def test_memory_is_bounded():
    limiter = RefusalLimiter(burst=1, rate=0.001, clock=Clock(), max_sources=100)
    for i in range(1000):
        limiter.refused(f"10.0.{i // 256}.{i % 256}")
    assert len(limiter._buckets) == 100
    assert not limiter.refused("10.0.3.231") and limiter.refused("10.0.0.0")  # the oldest were forgotten

"""How noisy the machine is while the bench runs: a fixed CPU spin, timed several times.

On a quiet machine every spin takes the same wall time and the process gets the CPU for all of
it; on a shared one the spins spread out and part of each is spent waiting for a CPU. The bench
prints both at its start and end, so a reader knows how far to trust a ratio's spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _spin(n: int) -> None:
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1000003


def calibrate(spins: int = 9, n: int = 400_000) -> dict[str, Any]:
    """Wall ms per spin (min / median / max), their spread ((max - min) / median) and the share
    of wall time this process got a CPU."""
    _spin(n // 10)  # warm up
    walls, cpus = [], []
    for _ in range(spins):
        w0, c0 = time.perf_counter(), time.process_time()
        _spin(n)
        walls.append(1000 * (time.perf_counter() - w0))
        cpus.append(1000 * (time.process_time() - c0))
    median = statistics.median(walls)
    return {
        "spins": spins,
        "min_ms": min(walls),
        "median_ms": median,
        "max_ms": max(walls),
        "spread": (max(walls) - min(walls)) / median if median else float("nan"),
        "cpu_share": sum(cpus) / sum(walls) if sum(walls) else float("nan"),
    }


def describe(label: str, c: dict[str, Any]) -> str:
    return (
        f"{label} {c['spins']} equal CPU spins took {c['min_ms']:.0f} / {c['median_ms']:.0f} / {c['max_ms']:.0f} ms "
        f"(min / median / max, spread {c['spread']:.0%}); the bench got a CPU {c['cpu_share']:.0%} of that time"
    )


def spread(values: list[float]) -> dict[str, Any]:
    """min / median / max of a figure over its rounds (nan-free values only)."""
    vals = [v for v in values if v == v]
    if not vals:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan"), "rounds": []}
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals), "rounds": vals}

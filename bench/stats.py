"""Timing helpers: percentiles and a stopwatch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def pct(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of samples, by nearest rank."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and count of samples (seconds in, milliseconds out)."""
    return {
        "p50_ms": pct(samples, 50) * 1e3,
        "p99_ms": pct(samples, 99) * 1e3,
        "mean_ms": statistics.fmean(samples) * 1e3,
        "n": len(samples),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result

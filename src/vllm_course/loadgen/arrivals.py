"""Send-time schedules for open-loop load: all at once, constant rate, Poisson, gamma burstiness.

Pure functions, no I/O. A schedule is an array of send offsets in seconds from the start of the
run, one per request, non-decreasing. The closed-loop concurrency cap is not a schedule: the load
generator applies it on top of one (see :mod:`vllm_course.loadgen`).
"""

from __future__ import annotations

import math

import numpy as np


def schedule(n: int, rate_rps: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Send offsets for ``n`` requests at a mean rate of ``rate_rps`` requests/s.

    Inter-arrival gaps follow gamma(shape=burstiness, scale=1/(rate*burstiness)), the process
    ``vllm bench serve --burstiness`` uses: burstiness 1 is a Poisson process (exponential gaps),
    below 1 is burstier, above 1 smoother, ``inf`` is a constant rate. Unlike ``vllm bench serve``
    the gaps are not rescaled to end exactly at ``n/rate``, so the achieved rate shows the
    randomness of the process; the first request is sent at t=0.

    Args:
        n: number of requests (>= 0).
        rate_rps: mean rate in requests/s (> 0); ``math.inf`` sends every request at t=0.
        burstiness: gamma shape (> 0).
        seed: seed of numpy's ``default_rng``; the same arguments give the same schedule.

    Returns:
        float64 array of shape ``(n,)``, in seconds, starting at 0.

    Raises:
        ValueError: for ``n < 0``, ``rate_rps <= 0`` or ``burstiness <= 0``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not rate_rps > 0:
        raise ValueError(f"rate_rps must be > 0 (use inf for all at once), got {rate_rps}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if n == 0:
        return np.zeros(0)
    if math.isinf(rate_rps):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n - 1, 1.0 / rate_rps)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def achieved_rate(offsets_s: np.ndarray) -> float:
    """Requests/s a schedule actually delivers: ``(n - 1) / (last - first)``; ``inf`` if instant."""
    if len(offsets_s) < 2:
        return math.inf
    span = float(offsets_s[-1] - offsets_s[0])
    return math.inf if span == 0 else (len(offsets_s) - 1) / span

"""Confidence intervals for repeated measurements, by SciPy.

Two ways to ask "is setting B different from baseline A?" from a few repeats of each:

* ``welch`` (default): Welch's unequal-variance t-test (Welch 1947) on the logarithms of the
  values (``scipy.stats.ttest_ind(..., equal_var=False)``). The difference of mean logs and its
  interval, exponentiated, are the ratio of geometric means and its interval: a ratio, as
  tuning is usually stated ("1.8x the tokens/s"), whose interval never goes below 0. It
  assumes roughly log-normal noise; with 3 repeats it is the method that still gives honest
  (wide) intervals.
* ``bootstrap``: the percentile bootstrap (Efron & Tibshirani 1993, ch. 13) of the ratio of
  means, each group resampled independently (``scipy.stats.bootstrap``, 10,000 resamples).
  It assumes nothing about the noise's shape, but with fewer than about 10 repeats its
  intervals are too narrow: prefer ``welch`` there.

Either way the verdict is "significant" when the ratio's interval excludes 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Method = Literal["welch", "bootstrap"]
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """An estimate with a confidence interval (same unit as the data)."""

    estimate: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        """True if ``low <= value <= high``."""
        return self.low <= value <= self.high


def _values(x: Sequence[float], what: str, positive: bool = False) -> np.ndarray:
    arr = np.asarray([float(v) for v in x])
    if arr.size < 2 or not np.all(np.isfinite(arr)) or (positive and np.any(arr <= 0)):
        kind = "finite, positive" if positive else "finite"
        raise ValueError(f"{what} needs at least 2 {kind} values, got {list(x)}")
    return arr


def _flat(arr: np.ndarray) -> bool:
    """True if the values differ by no more than floating-point rounding."""
    return float(np.ptp(arr)) <= 1e-12 * max(1.0, float(np.abs(arr).max()))


def mean_interval(x: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of ``x`` with Student's t interval, ``mean +- t(1 - alpha/2, n - 1) s / sqrt(n)``.

    Raises:
        ValueError: for fewer than 2 values or a non-finite one.
    """
    from scipy import stats

    arr = _values(x, "a mean's interval")
    mean = float(arr.mean())
    sem = float(arr.std(ddof=1)) / math.sqrt(arr.size)
    if _flat(arr):
        return Interval(mean, mean, mean)
    low, high = stats.t.interval(confidence, arr.size - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high))


def ratio_interval(x: Sequence[float], y: Sequence[float], confidence: float = 0.95,
                   method: Method = "welch", seed: int = 0) -> Interval:
    """How ``x`` compares with the baseline ``y``, as a ratio with its interval (see the module
    docstring): the ratio of geometric means by Welch's t-test on logs, or the ratio of means
    by the percentile bootstrap (``seed`` makes it reproducible).

    Raises:
        ValueError: a sample with fewer than 2 values, a non-finite one, or one <= 0.
    """
    from scipy import stats

    a, b = _values(x, "a ratio", positive=True), _values(y, "a ratio", positive=True)
    if method == "welch":
        la, lb = np.log(a), np.log(b)
        diff = float(la.mean() - lb.mean())
        if _flat(la) and _flat(lb):   # no spread (up to rounding): no interval to compute
            return Interval(math.exp(diff), math.exp(diff), math.exp(diff))
        ci = stats.ttest_ind(la, lb, equal_var=False).confidence_interval(confidence)
        return Interval(math.exp(diff), math.exp(float(ci.low)), math.exp(float(ci.high)))
    if method == "bootstrap":
        res = stats.bootstrap((a, b), lambda p, q, axis: p.mean(axis) / q.mean(axis),
                              confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                              method="percentile", vectorized=True,
                              rng=np.random.default_rng(seed))
        ci = res.confidence_interval
        return Interval(float(a.mean() / b.mean()), float(ci.low), float(ci.high))
    raise ValueError(f"method must be 'welch' or 'bootstrap', got {method!r}")


def describe_method(method: Method) -> str:
    """The method's name as the output states it."""
    if method == "welch":
        return "Welch's t-test on log values (ratio of geometric means)"
    return f"percentile bootstrap of the ratio of means ({BOOTSTRAP_RESAMPLES:,} resamples)"

"""``vllm_course.loadgen.arrivals``: send-time schedules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vllm_course.loadgen.arrivals import achieved_rate, schedule


def test_zero_requests() -> None:
    out = schedule(0, 5.0)
    assert out.shape == (0,)
    assert out.dtype == np.float64
    assert schedule(0, math.inf).shape == (0,)


def test_one_request_starts_at_zero() -> None:
    assert schedule(1, 3.0).tolist() == [0.0]
    assert schedule(1, 3.0, burstiness=math.inf).tolist() == [0.0]


def test_infinite_rate_sends_everything_at_zero() -> None:
    out = schedule(7, math.inf, burstiness=0.3, seed=5)
    assert out.tolist() == [0.0] * 7
    assert out.dtype == np.float64


def test_constant_rate_exact_gaps() -> None:
    out = schedule(5, 4.0, burstiness=math.inf)
    assert out.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    gaps = np.diff(schedule(101, 8.0, burstiness=math.inf))
    assert np.all(gaps == 0.125)
    # non-power-of-two rate: gaps equal to 1/rate up to float rounding of the cumsum
    out = schedule(11, 3.0, burstiness=math.inf)
    assert np.allclose(np.diff(out), 1 / 3, rtol=0, atol=1e-12)
    assert out[-1] == pytest.approx(10 / 3, abs=1e-12)


def test_constant_rate_ignores_seed() -> None:
    a = schedule(6, 2.0, math.inf, seed=1)
    assert a.tolist() == schedule(6, 2.0, math.inf, seed=2).tolist()


def test_poisson_mean_gap() -> None:
    rate = 5.0
    out = schedule(20000, rate, burstiness=1.0, seed=0)
    assert out.shape == (20000,)
    assert out[0] == 0.0
    gaps = np.diff(out)
    assert np.all(gaps >= 0)
    # mean gap 1/rate: standard error is 0.2/sqrt(19999) ~ 0.0014 s; allow ~3 sigma
    assert gaps.mean() == pytest.approx(1 / rate, abs=0.0045)
    # exponential gaps: CV = 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    assert achieved_rate(out) == pytest.approx(rate, rel=0.03)


def test_gamma_burstiness_cv() -> None:
    k = 0.5
    gaps = np.diff(schedule(20000, 10.0, burstiness=k, seed=123))
    # gamma(shape=k): CV = 1/sqrt(k) = sqrt(2) for k = 0.5; the mean stays 1/rate
    assert gaps.std() / gaps.mean() == pytest.approx(math.sqrt(1 / k), rel=0.05)
    assert gaps.mean() == pytest.approx(0.1, rel=0.04)


def test_smoother_burstiness_cv() -> None:
    gaps = np.diff(schedule(20000, 10.0, burstiness=4.0, seed=9))
    assert gaps.std() / gaps.mean() == pytest.approx(0.5, rel=0.05)


def test_gaps_match_numpy_gamma_for_the_seed() -> None:
    # the process vllm bench serve uses: gamma(shape=b, scale=1/(rate*b)), no rescaling
    rng = np.random.default_rng(42)
    gaps = rng.gamma(shape=0.7, scale=1 / (3.0 * 0.7), size=9)
    expected = np.concatenate([[0.0], np.cumsum(gaps)])
    assert schedule(10, 3.0, 0.7, seed=42).tolist() == expected.tolist()


def test_seeded_schedules_are_reproducible() -> None:
    a = schedule(500, 7.0, 1.0, seed=3)
    b = schedule(500, 7.0, 1.0, seed=3)
    c = schedule(500, 7.0, 1.0, seed=4)
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()
    assert np.all(np.diff(a) >= 0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 1.0), "n must be >= 0"),
        ((3, 0.0), "rate_rps must be > 0"),
        ((3, -2.0), "rate_rps must be > 0"),
        ((3, math.nan), "rate_rps must be > 0"),
        ((3, 1.0, 0.0), "burstiness must be > 0"),
        ((3, 1.0, -1.0), "burstiness must be > 0"),
        ((3, 1.0, math.nan), "burstiness must be > 0"),
    ],
)
def test_bad_arguments(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        schedule(*args)


def test_achieved_rate() -> None:
    assert achieved_rate(np.array([0.0, 0.5, 1.0])) == 2.0
    assert achieved_rate(np.array([0.0])) == math.inf
    assert achieved_rate(np.zeros(4)) == math.inf
    assert achieved_rate(schedule(9, 4.0, math.inf)) == 4.0

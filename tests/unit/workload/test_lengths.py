"""Length distributions: sample statistics, bounds, integer output, seeding, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from vllm_course.workload.lengths import Empirical, Fixed, LengthDist, LogNormal, Normal, Uniform

N = 50_000
ADAPTER = TypeAdapter(LengthDist)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed_is_constant():
    x = Fixed(value=7).sample(100, _rng())
    assert x.dtype == np.int64 and set(x.tolist()) == {7}


def test_uniform_covers_both_ends_evenly():
    x = Uniform(low=3, high=6).sample(N, _rng())
    assert set(x.tolist()) == {3, 4, 5, 6}
    assert np.bincount(x)[3:].min() > N / 4 * 0.95
    assert abs(x.mean() - 4.5) < 0.03


def test_normal_mean_std_and_bounds():
    x = Normal(mean=500, std=50).sample(N, _rng())
    assert abs(x.mean() - 500) < 1.5 and abs(x.std() - 50) < 1.5
    clipped = Normal(mean=10, std=30, min=4, max=20).sample(N, _rng())
    assert clipped.min() == 4 and clipped.max() == 20
    assert Normal(mean=-100, std=1).sample(10, _rng()).tolist() == [1] * 10  # never below 1


def test_lognormal_median_and_sigma():
    x = LogNormal(median=100, sigma=0.5).sample(N, _rng())
    assert abs(np.median(x) - 100) <= 2
    assert abs(np.log(x).std() - 0.5) < 0.01


def test_lognormal_mean_parametrisation():
    d = LogNormal(mean=214.5, sigma=0.8)
    assert d.scale == pytest.approx(214.5 * math.exp(-0.32))
    assert abs(d.sample(N, _rng()).mean() - 214.5) < 214.5 * 0.02


def test_lognormal_clipping():
    x = LogNormal(median=50, sigma=2, min=4, max=1024).sample(N, _rng())
    assert x.min() == 4 and x.max() == 1024


def test_empirical_reproduces_edges_as_percentiles():
    edges = [32, 207, 396, 1020, 1189, 2735, 4142, 7192]
    weights = [0.10, 0.15, 0.25, 0.25, 0.15, 0.09, 0.01]
    x = Empirical(edges=edges, weights=weights).sample(N, _rng())
    assert x.min() >= 32 and x.max() <= 7191
    for edge, below in zip(edges[1:], np.cumsum(weights), strict=True):
        assert abs((x < edge).mean() - below) < 0.01


def test_empirical_integer_bins_are_exact_and_normalised():
    x = Empirical(edges=[1, 2, 3, 5], weights=[2, 2, 4]).sample(N, _rng())
    counts = np.bincount(x, minlength=5)[1:] / N
    assert counts == pytest.approx([0.25, 0.25, 0.25, 0.25], abs=0.01)
    assert Empirical(edges=[1, 100], weights=[1], max=10).sample(N, _rng()).max() == 10


@pytest.mark.parametrize("dist", [
    Fixed(value=3), Uniform(low=1, high=9), Normal(mean=5, std=9), LogNormal(median=5, sigma=3),
    Empirical(edges=[1, 4, 9], weights=[1, 1]),
])
def test_samples_are_ints_of_at_least_one_and_seeded(dist):
    a, b = dist.sample(1000, _rng(1)), dist.sample(1000, _rng(1))
    assert a.dtype == np.int64 and a.min() >= 1 and a.shape == (1000,)
    assert np.array_equal(a, b)
    assert dist.sample(0, _rng()).shape == (0,)
    if not isinstance(dist, Fixed):
        assert not np.array_equal(a, dist.sample(1000, _rng(2)))
    assert dist.describe()


@pytest.mark.parametrize("data", [
    {"kind": "uniform", "low": 5, "high": 4},
    {"kind": "normal", "mean": 5, "std": -1},
    {"kind": "normal", "mean": 5, "std": 1, "min": 10, "max": 5},
    {"kind": "lognormal", "median": 5, "mean": 6, "sigma": 1},
    {"kind": "lognormal", "sigma": 1},
    {"kind": "empirical", "edges": [1, 2], "weights": [1, 1]},
    {"kind": "empirical", "edges": [3, 2, 4], "weights": [1, 1]},
    {"kind": "empirical", "edges": [0, 2], "weights": [1]},
    {"kind": "empirical", "edges": [1, 2], "weights": [0]},
    {"kind": "fixed", "value": 0},
    {"kind": "fixed", "value": 3, "extra": 1},
    {"kind": "zipf", "a": 1.1},
])
def test_bad_parameters_are_rejected(data):
    with pytest.raises(ValidationError):
        ADAPTER.validate_python(data)


def test_yaml_kind_selects_the_model_and_an_int_means_fixed():
    text = "a: {kind: lognormal, mean: 69.5, sigma: 1, min: 4, max: 1024}\nb: 12\n"
    data = yaml.safe_load(text)
    assert isinstance(ADAPTER.validate_python(data["a"]), LogNormal)
    assert ADAPTER.validate_python(data["b"]) == Fixed(value=12)


def test_distributions_are_frozen():
    d = Uniform(low=1, high=2)
    with pytest.raises(ValidationError):
        d.low = 3

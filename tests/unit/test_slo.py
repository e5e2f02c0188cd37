"""SLO search with a fake runner: bracketing, bisection, verdicts, warnings, the cache."""

from __future__ import annotations

import asyncio

import fake_runs
import pytest
from pydantic import ValidationError

from vllm_course.config import SLO, LoadSpec, SyntheticWorkload
from vllm_course.tuning.slo import (
    MIN_REQUESTS,
    SLOPoint,
    SLOSearchResult,
    SLOSearchSpec,
    monotonic_warnings,
    next_level,
    slo_search,
)


def _spec(**kw) -> SLOSearchSpec:
    base = dict(name="s", start=4.0, slo=SLO(ttft_ms=500),
                workload=SyntheticWorkload(num_requests=300, input_len=16, output_len=4),
                load=LoadSpec(num_warmups=1))
    return SLOSearchSpec(**{**base, **kw})


def _rate_knee(capacity: float):
    def model(config):
        level = config.load.rate_rps
        if config.load.max_concurrency is not None:
            level = config.load.max_concurrency
        return [(0.05 if level <= capacity else 5.0, 0.01)] * config.workload.num_requests
    return model


def test_spec_needs_an_objective_and_enough_requests_for_a_p99():
    with pytest.raises(ValidationError, match="at least one objective"):
        _spec(slo=None)
    with pytest.raises(ValidationError, match="at least one objective"):
        _spec(slo=SLO())
    with pytest.raises(ValidationError, match=r"299 requests per point.*at least 300.*"
                                              r"1 - 0.99\^n"):
        _spec(workload=SyntheticWorkload(num_requests=299))
    with pytest.raises(ValidationError, match="whole number"):
        _spec(level_kind="max_concurrency", start=2.5)
    assert MIN_REQUESTS == 300
    assert _spec(slo=SLO(ttft_ms=500, tpot_ms=50), percentile=90).objectives == {
        "ttft_p90_ms": 500, "tpot_p90_ms": 50}


def test_next_level_brackets_by_the_factor_then_bisects_to_the_tolerance():
    spec = _spec(tolerance=0.1)
    assert next_level(spec, [4.0], []) == 8.0
    assert next_level(spec, [], [4.0]) == 2.0
    assert next_level(spec, [4.0, 8.0], [16.0]) == 12.0
    assert next_level(spec, [10.0], [11.0]) is None          # (11 - 10) / 10 <= 0.1
    conc = _spec(level_kind="max_concurrency", start=4)
    assert next_level(conc, [4], [8]) == 6
    assert next_level(conc, [6], [7]) is None
    assert next_level(conc, [], [1]) is None                 # nothing lower to try


def test_search_finds_the_knee_within_tolerance_and_confirms(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _rate_knee(13.0))
    spec = _spec(tolerance=0.1, confirm=[0.9, 1.5])
    result = asyncio.run(slo_search(spec, pool=fake_runs.FakePool(), results_root=tmp_path))
    levels = [p.level for p in result.points if p.phase == "search"]
    assert levels == [4.0, 8.0, 16.0, 12.0, 14.0, 13.0]
    assert (result.best, result.lowest_failing, result.converged) == (13.0, 14.0, True)
    confirm = [(p.level, p.passed) for p in result.points if p.phase == "confirm"]
    assert confirm == [(pytest.approx(11.7), True), (pytest.approx(19.5), False)]
    assert result.warnings == []
    assert result.summary() == ("highest load meeting P99 TTFT <= 500 ms: 13 req/s "
                                "(14 req/s failed)")
    # every point is a separate run with 300 requests; confirmations have other seeds
    assert all(c.workload.num_requests == 300 for c in calls)
    assert calls[-1].workload.seed != calls[0].workload.seed
    assert result.points[0].goodput_rps is not None
    loaded = SLOSearchResult.load(result.path)
    assert loaded.best == 13.0 and loaded.points[0].result is not None


def test_a_rerun_reads_every_point_from_the_cache(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _rate_knee(13.0))
    first = asyncio.run(slo_search(_spec(), pool=fake_runs.FakePool(), results_root=tmp_path))
    n = len(calls)
    pool = fake_runs.FakePool()
    again = asyncio.run(slo_search(_spec(), pool=pool, results_root=tmp_path))
    assert len(calls) == n and pool.started == []
    assert again.best == first.best and all(p.cached for p in again.points)


def test_no_passing_level_and_a_search_that_runs_out_of_points(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _rate_knee(0.0))
    spec = _spec(level_kind="max_concurrency", start=4)
    result = asyncio.run(slo_search(spec, pool=fake_runs.FakePool(), results_root=tmp_path))
    assert [p.level for p in result.points] == [4, 2, 1]
    assert result.best is None and result.summary().startswith("no level met P99 TTFT <= 500 "
                                                               "ms: even 1 in flight failed")
    fake_runs.install(monkeypatch, _rate_knee(100.0))
    short = asyncio.run(slo_search(_spec(max_points=3), pool=fake_runs.FakePool(),
                                   results_root=tmp_path / "b"))
    assert not short.converged and short.best == 16.0
    assert short.warnings[-1].startswith("stopped after 3 points without a bracket")


def test_a_level_that_passed_above_a_failing_one_is_reported():
    def point(level, passed):
        return SLOPoint(level=level, passed=passed, values={})
    warnings = monotonic_warnings([point(8, True), point(16, False), point(12, False),
                                   point(14, True)], "req/s")
    assert warnings == ["not monotonic: 14 req/s passed but 12 req/s failed; latency did not "
                        "grow with load here (noise, or too few requests per point): read the "
                        "answer as approximate"]


def test_failed_requests_fail_the_level(monkeypatch, tmp_path):
    from vllm_course.tuning.slo import judge

    fake_runs.install(monkeypatch, _rate_knee(100.0))
    result = asyncio.run(slo_search(_spec(max_points=2), pool=fake_runs.FakePool(),
                                    results_root=tmp_path))
    run = result.points[0].result
    summary = run.summary.model_copy(update={"failed": 1})
    assert not judge(_spec(), run.model_copy(update={"summary": summary}), 4.0).passed

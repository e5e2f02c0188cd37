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
    with pytest.raises(ValidationError, match="not 1"):
        _spec(confirm=[1.0])
    # an infinite start overflowed a concurrency and repeated one rate max_points times
    for kind in ("rate_rps", "max_concurrency"):
        with pytest.raises(ValidationError, match=r"start\n.*finite number"):
            _spec(level_kind=kind, start=float("inf"))
    assert MIN_REQUESTS == 300
    assert _spec(slo=SLO(ttft_ms=500, tpot_ms=50), percentile=90).objectives == {
        "p90_ttft_ms": 500, "p90_tpot_ms": 50}


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


def test_a_point_whose_client_limited_the_run_is_named_in_the_warnings(monkeypatch, tmp_path):
    # a failure at 16 req/s that the client caused says nothing of the server's limit
    fake_runs.install(monkeypatch, _rate_knee(13.0), client_limited=lambda c: (
        c.load.rate_rps == 16.0))
    result = asyncio.run(slo_search(_spec(), pool=fake_runs.FakePool(), results_root=tmp_path,
                                    cache=None))
    assert result.warnings == [
        "search at 16 req/s: the client, not the server, limited this run (92% of inter-token "
        "gaps were 0): its latencies include the client's delay"]
    assert SLOSearchResult.load(result.path).warnings == result.warnings


def test_a_search_stopped_by_ctrl_c_keeps_the_points_it_measured(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _rate_knee(13.0), interrupt_after=3)
    notes = []
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(slo_search(_spec(), pool=fake_runs.FakePool(), results_root=tmp_path,
                               cache=None, progress=notes.append))
    (folder,) = [p.parent for p in tmp_path.glob("s-*/slo.json")]
    kept = SLOSearchResult.load(folder)
    assert [(p.level, p.passed) for p in kept.points] == [(4.0, True), (8.0, True),
                                                           (16.0, False)]
    assert (kept.best, kept.lowest_failing, kept.converged) == (8.0, 16.0, False)
    assert kept.warnings[0].startswith("stopped after 3 point(s) (KeyboardInterrupt)")
    assert any(n.kind == "note" and str(folder) in n.message for n in notes)


def test_a_rerun_reads_every_point_from_the_cache(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _rate_knee(13.0))
    first = asyncio.run(slo_search(_spec(), pool=fake_runs.FakePool(), results_root=tmp_path))
    n = len(calls)
    pool = fake_runs.FakePool()
    again = asyncio.run(slo_search(_spec(), pool=pool, results_root=tmp_path))
    assert len(calls) == n and pool.started == []
    assert again.best == first.best and all(p.cached for p in again.points)


def test_no_passing_level_stops_at_the_floor(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _rate_knee(0.0))
    spec = _spec(level_kind="max_concurrency", start=4)
    result = asyncio.run(slo_search(spec, pool=fake_runs.FakePool(), results_root=tmp_path))
    assert [p.level for p in result.points] == [4, 2, 1]
    assert result.best is None and result.summary().startswith("no level met P99 TTFT <= 500 "
                                                               "ms: even 1 in flight failed")
    assert result.warnings == []
    # a rate search goes down to start / factor**3 (each point at r takes 300 / r s), no further
    rates = asyncio.run(slo_search(_spec(), pool=fake_runs.FakePool(),
                                   results_root=tmp_path / "r"))
    assert [p.level for p in rates.points] == [4.0, 2.0, 1.0, 0.5]
    assert rates.summary().endswith("even 0.5 req/s failed") and rates.warnings == []


def test_concurrency_confirmations_are_rounded_away_from_the_answer(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _rate_knee(6))
    spec = _spec(level_kind="max_concurrency", start=4, confirm=[0.9, 1.1])
    result = asyncio.run(slo_search(spec, pool=fake_runs.FakePool(), results_root=tmp_path))
    assert result.best == 6
    assert [(p.level, p.passed) for p in result.points if p.phase == "confirm"] == [
        (5, True), (7, False)]
    assert result.warnings == []


def test_a_confirmation_that_contradicts_the_answer_is_reported(monkeypatch, tmp_path):
    # a server that misses the SLO at 11.7 req/s only: the curve is not monotonic there
    def model(config):
        rate = config.load.rate_rps
        bad = rate > 13 or abs(rate - 11.7) < 0.01
        return [(5.0 if bad else 0.05, 0.01)] * config.workload.num_requests
    fake_runs.install(monkeypatch, model)
    result = asyncio.run(slo_search(_spec(confirm=[0.9]), pool=fake_runs.FakePool(),
                                    results_root=tmp_path))
    assert result.best == 13.0
    assert result.warnings == [
        "not monotonic: 12 req/s passed but 11.7 req/s failed; latency did not grow with load "
        "here (noise, or too few requests per point): read the answer as approximate",
        "not monotonic: 13 req/s passed but 11.7 req/s failed; latency did not grow with load "
        "here (noise, or too few requests per point): read the answer as approximate",
        "confirmation at 11.7 req/s failed, expected a pass"]


def test_a_file_with_too_few_requests_is_refused_before_any_run(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _rate_knee(13.0))
    path = tmp_path / "w.jsonl"
    path.write_text('{"prompt": "hi there", "output_len": 4}\n' * 50)
    spec = _spec(workload={"kind": "file", "path": str(path)})
    with pytest.raises(ValueError, match="has 50 requests per point; an SLO search needs at "
                                         "least 300"):
        asyncio.run(slo_search(spec, pool=fake_runs.FakePool(), results_root=tmp_path))
    assert calls == []


def test_a_search_that_runs_out_of_points(monkeypatch, tmp_path):
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

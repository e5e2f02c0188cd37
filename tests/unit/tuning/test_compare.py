"""Compares with a fake runner: run order, repeats, verdicts, the cache; the statistics."""

from __future__ import annotations

import asyncio
import math

import fake_runs
import numpy as np
import pytest
from pydantic import ValidationError

from vllm_course.config import LoadSpec, ServerConfig, SyntheticWorkload
from vllm_course.tuning import stats
from vllm_course.tuning.comparison import (
    SIGNIFICANT,
    WITHIN_NOISE,
    CompareResult,
    CompareSpec,
    compare,
)

A = ServerConfig(args={"max-num-seqs": 1})
B = ServerConfig()


def _spec(**kw) -> CompareSpec:
    base = dict(name="cmp", servers={"one": A, "default": B}, repeats=3,
                workload=SyntheticWorkload(num_requests=8, input_len=16, output_len=4, seed=5),
                load=LoadSpec(max_concurrency=4))
    return CompareSpec(**{**base, **kw})


def _noisy(factor_by_seqs: dict[int, float]):
    """TPOT of 10 ms x a factor per max-num-seqs, times +-3 % noise drawn from the run's seed."""
    def model(config):
        rng = np.random.default_rng(config.workload.seed)
        f = factor_by_seqs.get(config.server.args.get("max-num-seqs", 0), 1.0)
        return [(0.02, 0.010 * f * rng.uniform(0.97, 1.03))] * config.workload.num_requests
    return model


def _run(spec, pool, tmp_path, **kw):
    return asyncio.run(compare(spec, pool=pool, results_root=tmp_path, **kw))


def test_spec_is_checked_before_anything_runs():
    with pytest.raises(ValidationError, match="at least two server settings"):
        _spec(servers={"one": A})
    with pytest.raises(ValidationError, match="at least 3"):
        _spec(repeats=2)
    with pytest.raises(ValidationError, match="unknown metric 'tok_s'"):
        _spec(metrics=["tok_s"])
    with pytest.raises(ValidationError, match="baseline 'x' is not one of"):
        _spec(baseline="x")
    with pytest.raises(ValidationError, match="goodput needs an SLO"):
        _spec(metrics=["goodput_rps"])


def test_repeats_are_interleaved_in_alternating_rounds_when_the_servers_fit(monkeypatch,
                                                                           tmp_path):
    calls = fake_runs.install(monkeypatch, _noisy({}))
    result = _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path, cache=None)
    assert [c.name for c in calls] == ["cmp-one-1", "cmp-default-1", "cmp-default-2",
                                       "cmp-one-2", "cmp-one-3", "cmp-default-3"]
    assert result.order.startswith("interleaved in 3 rounds of alternating order (one default, "
                                   "default one, one default)")
    # every run has its own prompts and arrival seed; the same setting's server serves them all
    assert len({(c.workload.seed, c.load.seed) for c in calls}) == 6
    assert all(c.load.reset_prefix_cache for c in calls)


def test_settings_run_one_after_another_when_the_pool_holds_one_server(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _noisy({}))
    result = _run(_spec(), fake_runs.FakePool(max_live=1), tmp_path, cache=None)
    assert [c.name for c in calls] == [f"cmp-{lb}-{r}" for lb in ("one", "default")
                                       for r in (1, 2, 3)]
    assert result.order.startswith("one setting after another: 2 servers do not fit at once")


def test_a_large_difference_is_significant_and_noise_is_within_noise(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _noisy({1: 3.0}))   # max-num-seqs 1: 3x the TPOT
    result = _run(_spec(servers={"default": B, "one": A, "default-again": B}),
                  fake_runs.FakePool(max_live=2), tmp_path)
    tpot = result.stat("one", "p99_tpot_ms")
    assert tpot.verdict == SIGNIFICANT and tpot.better is False
    assert tpot.ratio == pytest.approx(3.0, rel=0.05) and tpot.ratio_low < 3 < tpot.ratio_high
    assert result.stat("one", "output_throughput_tok_s").better is False
    same = result.stat("default-again", "p99_tpot_ms")
    assert same.verdict == WITHIN_NOISE and same.better is None
    assert result.stat("default", "p99_tpot_ms").verdict == "baseline"
    # 2 settings beside the baseline x 3 metrics = 6 intervals, each at 1 - 0.05 / 6
    assert result.spec.interval_confidence == pytest.approx(1 - 0.05 / 6)
    assert result.order.endswith("on 2 server(s)")   # default and default-again share one
    report = result.report()
    assert report.splitlines()[0] == (
        "compare cmp: Welch's t-test on log values (ratio of geometric means); 95 % family-wise "
        "over 6 comparison(s) (Bonferroni: each interval 99.17 %); 3 repeats per setting, each "
        "from an empty prefix cache")
    assert f"significant: {tpot.ratio:.2f}x ({tpot.ratio_low:.2f}-" in report
    assert result.to_dataframe().shape == (9, 10)


def test_a_rerun_reads_every_repeat_from_the_cache(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _noisy({1: 2.0}))
    first = _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path)
    assert len(calls) == 6
    pool = fake_runs.FakePool(max_live=2)
    again = _run(_spec(), pool, tmp_path)
    assert len(calls) == 6 and pool.started == []
    assert again.stats == first.stats
    loaded = CompareResult.load(again.path)
    assert loaded.stats == first.stats and len(loaded.runs["one"]) == 3


def test_without_a_progress_callback_the_plan_runs_and_verdicts_are_printed(monkeypatch,
                                                                          tmp_path, capsys):
    fake_runs.install(monkeypatch, _noisy({}))
    _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("compare cmp: 2 server start(s), 6 point(s): 6 to run, 0 from the "
                             "cache; ~")
    assert [ln.split("]")[0] for ln in out if ln.startswith("[")] == [f"[{k}/6" for k in
                                                                       range(1, 7)]
    assert any(ln.startswith("compare cmp: Welch's t-test") for ln in out)


def test_a_server_start_is_announced_and_kept_out_of_the_eta_of_the_points(monkeypatch,
                                                                         tmp_path):
    # A fake clock: a run that starts its server takes its ready_s (12.5 s, fake_runs) more
    # than the 1 s every run takes. The ETA must rescale the point estimates by 1 s per point
    # and add the estimated start (49 s on the CPU profile) of the server not started yet; a
    # start counted in its point would make the first ETA 5 x 13.5 = 67.5 s with no start left.
    from vllm_course.tuning import comparison

    fake_runs.install(monkeypatch, _noisy({}))
    fake_runs.fake_clock(monkeypatch, comparison)
    steps = []
    _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path, progress=steps.append)
    assert [s.message for s in steps if s.kind == "server"] == [
        "starting a vLLM server for one", "starting a vLLM server for default"]
    assert [s.eta_s for s in steps if s.kind == "point"] == pytest.approx([54, 4, 3, 2, 1, 0])


def test_failed_requests_and_zero_values_are_reported_not_averaged_away(monkeypatch,
                                                                        tmp_path):
    from vllm_course.config import SLO
    from vllm_course.tuning.comparison import NO_RATIO

    # max-num-seqs 1 misses a 100 ms TTFT SLO on every request: its goodput is 0
    def model(config):
        ttft = 0.5 if config.server.args.get("max-num-seqs") == 1 else 0.02
        return [(ttft, 0.01)] * config.workload.num_requests
    fake_runs.install(monkeypatch, model)
    result = _run(_spec(metrics=["goodput_rps", "p99_ttft_ms"], slo=SLO(ttft_ms=100)),
                  fake_runs.FakePool(max_live=2), tmp_path, cache=None)
    assert result.stat("one", "goodput_rps").values == [0.0] * 3    # the baseline
    goodput = result.stat("default", "goodput_rps")
    assert goodput.verdict == NO_RATIO and goodput.sentence == NO_RATIO and goodput.ratio is None
    assert result.stat("default", "p99_ttft_ms").better is True
    from vllm_course.tuning.comparison import _failures

    run = result.runs["one"][0]
    broken = run.model_copy(update={"summary": run.summary.model_copy(
        update={"failed": 2, "errors": {"HTTP 500": 2}})})
    assert _failures("one repeat 1", broken) == "one repeat 1: 2 request(s) failed (HTTP 500)"
    assert _failures("x", run.model_copy(update={"stopped_early": "the vLLM server died"})) \
        == "x stopped early (the vLLM server died): its numbers cover part of the run"


def test_a_repeat_whose_client_limited_the_run_is_named_in_the_warnings(monkeypatch,
                                                                         tmp_path):
    fake_runs.install(monkeypatch, _noisy({}), client_limited=lambda c: (
        c.server.args.get("max-num-seqs") == 1 and c.workload.seed == _spec().workload.seed))
    result = _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path, cache=None)
    assert result.warnings == [
        "one repeat 1: the client, not the server, limited this run (92% of inter-token gaps "
        "were 0): its latencies include the client's delay"]
    assert CompareResult.load(result.path).warnings == result.warnings
    assert "warning: one repeat 1: the client" in result.report()


def test_a_server_that_cannot_take_the_workload_stops_the_compare_before_any_run(
        monkeypatch, tmp_path):
    from vllm_course.workload import WorkloadError

    calls = fake_runs.install(monkeypatch, _noisy({}))
    short = ServerConfig(args={"max-model-len": 12})          # 16 + 4 tokens do not fit
    with pytest.raises(WorkloadError, match="max_model_len"):
        _run(_spec(servers={"one": A, "short": short}, baseline="one"),
             fake_runs.FakePool(max_live=2), tmp_path, cache=None)
    assert calls == []                                        # not after "one" ran


def test_too_few_usable_repeats_is_a_failed_run_that_names_its_runs(monkeypatch, tmp_path):
    from vllm_course.tuning.comparison import _save_result

    fake_runs.install(monkeypatch, _noisy({}))
    result = _run(_spec(), fake_runs.FakePool(max_live=2), tmp_path, cache=None)
    one = {label: runs[:1] for label, runs in result.runs.items()}   # 1 repeat each
    with pytest.raises(RuntimeError, match="a comparison needs at least 2") as info:
        _save_result(result.spec, one, [], result.order, tmp_path)
    assert result.runs["one"][0].path in str(info.value)


# -- the statistics ------------------------------------------------------------------------

def test_welch_ratio_is_the_ratio_of_geometric_means_with_a_t_interval():
    x, y = [2.0, 2.2, 1.8], [1.0, 1.1, 0.9]
    r = stats.ratio_interval(x, y, 0.95)
    gm = math.exp(np.mean(np.log(x)) - np.mean(np.log(y)))
    assert r.estimate == pytest.approx(gm) and r.low < gm < r.high
    # the same relative spread on both sides: df = 4, half width t(0.975, 4) * se on the log
    se = math.sqrt(2 * np.var(np.log(x), ddof=1) / 3)
    assert math.log(r.high / gm) == pytest.approx(2.776 * se, rel=1e-3)
    assert stats.ratio_interval([5.0, 5.0], [5.0, 5.0]) == stats.Interval(1.0, 1.0, 1.0)


def test_bootstrap_ratio_is_reproducible_and_brackets_the_ratio_of_means():
    x, y = [2.0, 2.2, 1.8, 2.1, 1.9], [1.0, 1.1, 0.9, 1.05, 0.95]
    a = stats.ratio_interval(x, y, 0.95, "bootstrap", seed=3)
    assert a == stats.ratio_interval(x, y, 0.95, "bootstrap", seed=3)
    assert a.estimate == pytest.approx(2.0) and a.low < 2.0 < a.high


def test_mean_interval_is_students_t():
    ci = stats.mean_interval([1.0, 2.0, 3.0], 0.95)
    assert (ci.estimate, ci.high - ci.estimate) == pytest.approx((2.0, 4.303 / math.sqrt(3)),
                                                                  rel=1e-3)


@pytest.mark.parametrize("x", [[1.0], [1.0, math.nan], [1.0, 0.0]])
def test_ratio_needs_two_positive_finite_values(x):
    with pytest.raises(ValueError, match="needs at least 2 finite, positive values"):
        stats.ratio_interval(x, [1.0, 2.0])

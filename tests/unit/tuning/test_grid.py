"""Sweeps with a fake runner: one start per setting, the cache, resuming, errors, plan, frames."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import fake_runs
import pytest
from pydantic import ValidationError

from vllm_course.config import SLO, LoadSpec, ServerConfig, SyntheticWorkload
from vllm_course.tuning.grid import SweepResult, SweepSpec, plan, sweep
from vllm_course.tuning.points import estimate_point_s, estimate_start_s
from vllm_course.tuning.progress import Eta

REPO = Path(__file__).resolve().parents[3]
SERVERS = {"base": ServerConfig(), "eight": ServerConfig(args={"max-num-seqs": 8}),
           "one": ServerConfig(args={"max-num-seqs": 1})}


def _spec(**kw) -> SweepSpec:
    base = dict(name="grid", servers=SERVERS, max_concurrency=[1, 2, 4, 8],
                workload=SyntheticWorkload(num_requests=10, input_len=16, output_len=4),
                load=LoadSpec(num_warmups=1), slo=SLO(ttft_ms=100))
    return SweepSpec(**{**base, **kw})


def _model(config):
    """TTFT grows with the concurrency cap and shrinks with max-num-seqs (a made-up server)."""
    c = config.load.max_concurrency or 1
    seqs = config.server.args.get("max-num-seqs", 128)
    return [(0.01 * c * (1 + 8 / seqs), 0.005)] * config.workload.num_requests


def _sweep(spec, pool, tmp_path, **kw):
    return asyncio.run(sweep(spec, pool=pool, results_root=tmp_path, **kw))


def test_spec_needs_exactly_one_kind_of_level():
    with pytest.raises(ValidationError, match="exactly one"):
        _spec(rate_rps=[1.0])
    with pytest.raises(ValidationError, match="exactly one"):
        _spec(max_concurrency=[])
    with pytest.raises(ValidationError, match="distinct and > 0"):
        _spec(max_concurrency=[2, 2])
    with pytest.raises(ValidationError, match="duration_s"):
        _spec(duration_s=10)
    with pytest.raises(ValidationError, match="plain folder name"):
        _spec(servers={"a/b": ServerConfig()})


def test_servers_given_as_a_list_are_labelled_by_their_flags():
    spec = _spec(servers=[{}, {"args": {"max-num-seqs": 8}}, {"args": {"max-num-seqs": 8}}])
    assert list(spec.servers) == ["default", "max-num-seqs=8", "max-num-seqs=8-2"]


def test_point_config_sets_the_level_and_duration_bounds_requests():
    spec = _spec()
    c = spec.point_config("eight", 4)
    assert c.name == "grid-eight-c4" and c.load.max_concurrency == 4
    assert math.isinf(c.load.rate_rps) and c.load.num_warmups == 1
    assert c.server.args == {"max-num-seqs": 8} and c.slo == SLO(ttft_ms=100)
    timed = _spec(max_concurrency=None, rate_rps=[2.5, 10], duration_s=12)
    assert timed.point_config("base", 2.5).workload.num_requests == 30
    assert timed.point_config("base", 10).workload.num_requests == 120
    assert timed.point_config("base", 10).name == "grid-base-r10"


def test_examples_parse():
    spec = SweepSpec.from_file(REPO / "examples" / "sweep.yaml")
    assert len(spec.servers) == 3 and len(spec.levels) == 4


def test_sweep_starts_each_server_once_and_rerun_reads_the_cache(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _model)
    pool, steps = fake_runs.FakePool(), []
    result = _sweep(_spec(), pool, tmp_path, progress=steps.append)
    assert len(calls) == 12 and [c.args for c in pool.started] == [
        {}, {"max-num-seqs": 8}, {"max-num-seqs": 1}]
    assert result.complete and result.errors == [] and result.server_starts == [
        "base", "eight", "one"]
    df = result.to_dataframe()
    assert list(df["setting"]) == ["base"] * 4 + ["eight"] * 4 + ["one"] * 4
    assert list(df["max_concurrency"][:4]) == [1, 2, 4, 8]
    # P99 TTFT is the model's: 10 ms x c x (1 + 8/seqs)
    assert df["p99_ttft_ms"].tolist() == pytest.approx(
        [10 * c * (1 + 8 / s) for s in (128, 8, 1) for c in (1, 2, 4, 8)])
    assert not df["cached"].any() and (df["failed"] == 0).all()
    assert steps[0].kind == "plan" and "3 server start(s), 12 point(s): 12 to run" in \
        steps[0].message
    points = [s for s in steps if s.kind == "point"]
    assert [s.done for s in points] == list(range(1, 13)) and points[-1].total == 12
    assert steps[-1].kind == "done"
    saved = json.loads((Path(result.path) / "sweep.json").read_text())
    assert len(saved["points"]) == 12 and saved["complete"] is True
    assert (Path(result.path) / "latency_throughput.png").stat().st_size > 0

    pool2 = fake_runs.FakePool()
    again = _sweep(_spec(), pool2, tmp_path)
    assert len(calls) == 12 and pool2.started == [] and again.server_starts == []
    assert again.to_dataframe()["cached"].all()
    assert again.to_dataframe()["p99_ttft_ms"].tolist() == df["p99_ttft_ms"].tolist()


def test_an_interrupted_sweep_resumes_with_only_the_missing_points(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _model, interrupt_after=6)
    pool = fake_runs.FakePool()
    with pytest.raises(KeyboardInterrupt):
        _sweep(_spec(), pool, tmp_path)
    assert len(calls) == 6
    partial = json.loads(next(tmp_path.glob("grid-*/sweep.json")).read_text())
    assert partial["complete"] is False and len(partial["points"]) == 6

    calls2 = fake_runs.install(monkeypatch, _model)
    pool2 = fake_runs.FakePool()
    result = _sweep(_spec(), pool2, tmp_path)
    # base's 4 points and eight's first 2 were done: only eight's last 2 and one's 4 run, and
    # base's server is never started
    assert [(c.server.args, c.load.max_concurrency) for c in calls2] == [
        ({"max-num-seqs": 8}, 4), ({"max-num-seqs": 8}, 8)] + [
        ({"max-num-seqs": 1}, c) for c in (1, 2, 4, 8)]
    assert [c.args for c in pool2.started] == [{"max-num-seqs": 8}, {"max-num-seqs": 1}]
    assert result.to_dataframe()["cached"].tolist() == [True] * 6 + [False] * 6


def test_live_servers_go_first(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _model)
    pool = fake_runs.FakePool()
    pool.acquire(SERVERS["one"])
    _sweep(_spec(), pool, tmp_path, cache=None)
    assert [c.server.args for c in calls[:4]] == [{"max-num-seqs": 1}] * 4


def test_a_server_that_fails_marks_its_points_and_the_rest_runs(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _model,
                              crash=lambda c: c.server.args.get("max-num-seqs") == 8)
    steps = []
    result = _sweep(_spec(), fake_runs.FakePool(), tmp_path, progress=steps.append)
    assert len(calls) == 8 and result.complete
    assert len(result.errors) == 4 and all(e.startswith("eight at ") for e in result.errors)
    assert "crashed" in result.errors[0]
    assert any(s.kind == "note" and "remaining points are skipped" in s.message for s in steps)
    assert result.to_dataframe()["error"].notna().sum() == 4


def test_a_point_whose_client_limited_the_run_is_named_in_the_warnings(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _model, client_limited=lambda c: c.load.max_concurrency == 8)
    spec, steps = _spec(servers={"base": ServerConfig()}), []
    result = _sweep(spec, fake_runs.FakePool(), tmp_path, cache=None, progress=steps.append)
    assert steps[-1].kind == "done" and steps[-1].message.endswith(
        "\nwarning: " + result.warnings[0])
    assert result.warnings == [
        "base at 8: the client, not the server, limited this run (92% of inter-token gaps "
        "were 0): its latencies include the client's delay"]
    assert json.loads((Path(result.path) / "sweep.json").read_text())["warnings"] == \
        result.warnings


def test_without_cache_every_point_runs_again(monkeypatch, tmp_path):
    calls = fake_runs.install(monkeypatch, _model)
    spec = _spec(servers={"base": ServerConfig()}, max_concurrency=[1, 2])
    for _ in range(2):
        result = _sweep(spec, fake_runs.FakePool(), tmp_path, cache=None)
    assert len(calls) == 4 and not (tmp_path / "cache").exists()
    assert all(p.path.startswith(result.path) for p in result.points)


def test_plan_counts_starts_points_and_time(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _model, interrupt_after=5)
    with pytest.raises(KeyboardInterrupt):
        _sweep(_spec(), fake_runs.FakePool(), tmp_path)
    p = plan(_spec(), results_root=tmp_path)
    assert (p.server_starts, p.points, p.cached, p.starts) == (2, 12, 5, ("eight", "one"))
    assert str(p).startswith("2 server start(s), 12 point(s): 7 to run, 5 from the cache; ~")
    # eight's start is estimated from its cached point's measured ready_s (the fake's 12.5 s)
    todo = [_spec().point_config(lb, c) for lb, c in
            [("eight", 2), ("eight", 4), ("eight", 8)] + [("one", c) for c in (1, 2, 4, 8)]]
    assert p.estimate_s == pytest.approx(12.5 + estimate_start_s("cpu")
                                        + sum(estimate_point_s(c) for c in todo))
    assert plan(_spec(), cache=None).cached == 0


def test_estimates_use_rate_or_guessed_throughput():
    spec = _spec(max_concurrency=None, rate_rps=[4.0, math.inf])
    assert estimate_point_s(spec.point_config("base", 4.0)) == pytest.approx(10 / 4 + 3)
    # 10 requests x 4 tokens at min(200 x 10, 1000) tok/s
    assert estimate_point_s(spec.point_config("base", math.inf)) == pytest.approx(0.04 + 3)


def test_eta_rescales_by_measured_time():
    eta = Eta([10, 10, 20])
    assert eta.remaining_s() == 40
    eta.finish(20)   # took twice the estimate
    assert eta.scale == 2 and eta.remaining_s() == 60


def test_result_loads_back_and_plots(monkeypatch, tmp_path):
    fake_runs.install(monkeypatch, _model)
    result = _sweep(_spec(), fake_runs.FakePool(), tmp_path)
    loaded = SweepResult.load(result.path)
    assert loaded.to_dataframe()["p99_ttft_ms"].tolist() == \
        result.to_dataframe()["p99_ttft_ms"].tolist()
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    assert result.plot(ax=ax) is ax and len(ax.lines) == 3 + 1   # 3 settings + the SLO line
    ax2 = Figure().subplots()
    result.plot_levels("p99_ttft_ms", ax=ax2)
    assert [list(line.get_xdata()) for line in ax2.lines] == [[1, 2, 4, 8]] * 3
    assert "<table" in result._repr_html_()


def test_eta_rescales_by_measured_time_and_skipped_items_cost_nothing():
    eta = Eta([10.0, 20.0, 30.0])
    eta.finish(20.0)                       # took twice its estimate
    assert eta.scale == 2.0 and eta.remaining_s() == 100.0
    eta.skip()                             # a point skipped after its server failed
    assert eta.scale == 2.0 and eta.remaining_s() == 60.0


def test_a_server_start_is_kept_out_of_the_eta_of_the_points(monkeypatch, tmp_path):
    # A fake clock: every point takes 1 s, and the point that starts its setting's server 12.5 s
    # more (its ready_s, fake_runs). The ETA rescales the estimates by 1 s per point and adds
    # 49 s (a CPU start) per server not started yet; counted in its point, a start would scale
    # every later estimate by ~13.
    from vllm_course.tuning import grid

    fake_runs.install(monkeypatch, _model)
    fake_runs.fake_clock(monkeypatch, grid)
    steps = []
    spec = _spec(max_concurrency=[1, 2])
    _sweep(spec, fake_runs.FakePool(), tmp_path, progress=steps.append)
    est = [estimate_point_s(spec.point_config("base", c)) for c in (1, 2)] * 3
    starts_after = [2, 2, 1, 1, 0, 0]      # servers not started yet after each point
    expected = [sum(est[k:]) * k / sum(est[:k]) + n * estimate_start_s("cpu")
                for k, n in zip(range(1, 7), starts_after, strict=True)]
    assert [s.eta_s for s in steps if s.kind == "point"] == pytest.approx(expected)


def test_every_level_sends_the_same_prompts_to_an_emptied_prefix_cache():
    spec = _spec()
    configs = [spec.point_config("base", c) for c in (1, 2, 4, 8)]
    assert {c.workload for c in configs} == {spec.workload}
    assert all(c.load.reset_prefix_cache for c in configs)
    assert spec.point_config("one", 8).load.seed == 0   # the arrival seed is the spec's


def test_without_a_progress_callback_the_plan_starts_and_numbered_points_are_printed(
        monkeypatch, tmp_path, capsys):
    fake_runs.install(monkeypatch, _model)
    _sweep(_spec(max_concurrency=[1, 2]), fake_runs.FakePool(), tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sweep grid: 3 server start(s), 6 point(s): 6 to run, 0 from "
                               "the cache; ~")
    assert [ln for ln in lines if ln.startswith("starting")] == [
        f"starting a vLLM server for {lb}" for lb in ("base", "eight", "one")]
    points = [ln for ln in lines if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in points] == [f"[{k}/6" for k in range(1, 7)]
    assert points[0].startswith("[1/6] base at 1 in flight: ") and ", ETA " in points[0]
    assert lines[-1].startswith("sweep grid: 6 point(s) in ")

"""``vllm_course.plots`` on synthetic runs (real RunResult/TimeSeries objects, no server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from vllm_course import metrics, plots  # noqa: E402
from vllm_course.config import SLO, LoadSpec, RunConfig  # noqa: E402
from vllm_course.prom import TimePoint, TimeSeries  # noqa: E402
from vllm_course.records import RequestRecord  # noqa: E402
from vllm_course.results import RunResult  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _record(index: int, ttft: float, gap: float, n: int = 4) -> RequestRecord:
    sent = 0.01 * index
    chunks = [sent + ttft + gap * k for k in range(n)]
    return RequestRecord(
        index=index,
        prompt_len=16,
        max_tokens=n,
        sent_s=sent,
        chunk_s=chunks,
        chunk_tokens=[1] * n,
        last_choice_s=chunks[-1],
        end_s=chunks[-1] + 0.001,
        prompt_tokens=16,
        output_tokens=n,
        finish_reason="length",
    )


def _records(ttft: float, gap: float = 0.02) -> list[RequestRecord]:
    return [_record(i, ttft * (1 + i / 10), gap) for i in range(5)]


def _run(
    name: str,
    records: list[RequestRecord],
    load: LoadSpec | None = None,
    duration_s: float | None = None,
    slo: SLO | None = None,
    tmp_path: Path | None = None,
    series: TimeSeries | None = None,
) -> RunResult:
    """A RunResult; saved and loaded back (so records()/timeseries() work) given ``tmp_path``."""
    result = RunResult(
        name=name,
        created_at="2026-01-02T03:04:05+00:00",
        config=RunConfig(name=name, load=load or LoadSpec()),
        summary=metrics.summarize(records, slo=slo, duration_s=duration_s),
    )
    if tmp_path is None:
        return result
    run_dir = tmp_path / name
    run_dir.mkdir()
    result.save(run_dir)
    (run_dir / "requests.jsonl").write_text(
        "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    )
    if series is not None:
        (run_dir / "timeseries.json").write_text(series.model_dump_json())
    return RunResult.load(run_dir)


KV = [0.1, 0.5, 0.9, None]
GPU = [20.0, 80.0, 95.0, 90.0]


def _series(telemetry: bool = True) -> TimeSeries:
    points = [
        TimePoint(
            t_s=float(i),
            running=float(i + 1),
            waiting=float(3 - i),
            kv_cache_usage=KV[i],
            preemptions=float(i // 2),
            prompt_tok_s=100.0 * i,
            generation_tok_s=50.0 * i,
            tokens_per_step=2.0 + i,
            telemetry={"gpu_util_pct": GPU[i], "gpu_power_w": 300.0 + i} if telemetry else {},
        )
        for i in range(4)
    ]
    return TimeSeries(interval_s=1.0, points=points)


def _twin(ax, ylabel: str):
    """The twin y axis of ``ax`` labelled ``ylabel``."""
    found = [
        other
        for other in ax.figure.axes
        if other is not ax and other.bbox.bounds == ax.bbox.bounds
        and other.get_ylabel() == ylabel
    ]
    assert len(found) == 1, [o.get_ylabel() for o in ax.figure.axes]
    return found[0]


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


# -- time series --------------------------------------------------------------------------------


def test_timeseries_panels_plot_the_inputs() -> None:
    before = plt.get_fignums()
    fig = Figure(constrained_layout=True)
    a, b, c, d = plots.plot_timeseries(_series(), axes=fig.subplots(2, 2))
    assert plt.get_fignums() == before  # axes given: pyplot untouched
    for ax in (a, b, c, d):
        assert ax.get_xlabel() == "time since start (s)"
        assert np.array_equal(ax.get_lines()[0].get_xdata(), [0.0, 1.0, 2.0, 3.0])
    assert a.get_ylabel() == "requests (count)"
    assert [line.get_label() for line in a.get_lines()] == ["running", "waiting"]
    assert list(a.get_lines()[1].get_ydata()) == [3.0, 2.0, 1.0, 0.0]
    assert a.get_legend() is not None

    assert b.get_ylabel() == "KV cache usage (%)"
    (kv,) = b.get_lines()
    np.testing.assert_allclose(kv.get_ydata(), [10.0, 50.0, 90.0, np.nan])
    pre = _twin(b, "preemptions (count)").get_lines()[0]
    assert list(pre.get_ydata()) == [0.0, 0.0, 1.0, 1.0]
    assert b.get_legend() is not None  # KV line + preemptions on the twin

    assert c.get_ylabel() == "throughput (tok/s)"
    assert [line.get_label() for line in c.get_lines()] == ["generation", "prompt"]
    assert list(c.get_lines()[0].get_ydata()) == [0.0, 50.0, 100.0, 150.0]
    assert list(_twin(c, "tokens per step (tok)").get_lines()[0].get_ydata()) == [2, 3, 4, 5]

    assert d.get_ylabel() == "GPU utilisation (%)"
    assert list(d.get_lines()[0].get_ydata()) == GPU
    assert list(_twin(d, "GPU power (W)").get_lines()[0].get_ydata()) == [300, 301, 302, 303]
    assert "no telemetry" not in _texts(d)


def test_timeseries_axes_start_at_zero_and_a_flat_zero_is_drawn_at_the_bottom() -> None:
    """Counts, shares and rates are never negative: no axis shows negative values, also when a
    series stayed at 0 (no preemptions, where matplotlib alone would span -0.04 to 0.04), and
    the largest value stays in view."""
    series = TimeSeries(interval_s=1.0, points=[
        p.model_copy(update={"preemptions": 0.0}) for p in _series().points])
    a, b, c, d = plots.plot_timeseries(series)
    assert _twin(b, "preemptions (count)").get_ylim() == (0.0, 1.0)
    assert b.get_ylim()[0] == 0.0 and b.get_ylim()[1] >= 90.0          # KV cache up to 90 %
    assert a.get_ylim()[0] == 0.0 and a.get_ylim()[1] >= 3.0
    assert c.get_ylim()[0] == 0.0 and c.get_ylim()[1] >= 150.0
    assert _twin(d, "GPU power (W)").get_ylim()[0] == 0.0


def test_timeseries_without_telemetry_notes_it() -> None:
    a, b, c, d = plots.plot_timeseries(_series(telemetry=False))
    assert d.get_lines() == []
    assert "no telemetry" in _texts(d)
    assert d.get_ylabel() == "CPU (cores)"
    assert len(a.get_lines()) == 2 and len(b.get_lines()) == 1


def test_timeseries_falls_back_to_server_cpu() -> None:
    series = TimeSeries(
        points=[TimePoint(t_s=t, telemetry={"server_cpu_cores": 1.5 * t}) for t in (0.0, 1.0)]
    )
    a, b, c, d = plots.plot_timeseries(series)
    assert d.get_ylabel() == "CPU (cores)"
    assert list(d.get_lines()[0].get_ydata()) == [0.0, 1.5]
    assert [line.get_label() for line in d.get_lines()] == ["server"]   # no machine reading
    # the server panels have nothing to draw: a note, no lines, no twin axis
    for ax in (a, b, c):
        assert ax.get_lines() == [] and _texts(ax) == ["no data"]
    assert len(a.figure.axes) == 4


def test_timeseries_from_a_saved_run_and_png(tmp_path: Path) -> None:
    with_series = _run("ts", _records(0.1), tmp_path=tmp_path, series=_series())
    axes = plots.plot_timeseries(with_series)
    assert len(axes) == 4
    np.testing.assert_allclose(axes[1].get_lines()[0].get_ydata(), [10.0, 50.0, 90.0, np.nan])

    before = plt.get_fignums()
    out = tmp_path / "ts.png"
    plots.save_timeseries_png(with_series, str(out), title="ts")
    assert out.read_bytes().startswith(PNG)
    # a run saved without timeseries.json gives an empty series: notes, no crash
    empty = _run("empty", _records(0.1), tmp_path=tmp_path)
    plots.save_timeseries_png(empty, str(tmp_path / "empty.png"))
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG)
    assert plt.get_fignums() == before


# -- CDFs ---------------------------------------------------------------------------------------


def test_cdfs_one_line_per_run(tmp_path: Path) -> None:
    fast = _run("fast", _records(0.1), tmp_path=tmp_path)
    slow = _run("slow", _records(0.3), tmp_path=tmp_path)
    ax = plots.plot_cdfs([fast, slow])
    assert ax.get_xlabel() == "TTFT (ms)"
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["fast", "slow"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fast", "slow"]
    expected = sorted(metrics.ttft_s(r) * 1000 for r in fast.records())
    np.testing.assert_allclose(lines[0].get_xdata(), expected)
    np.testing.assert_allclose(lines[0].get_ydata(), [0.2, 0.4, 0.6, 0.8, 1.0])

    ax = plots.plot_cdfs([fast.records(), slow.records()], metric="itl", labels=["a", "b"])
    assert ax.get_xlabel() == "ITL (ms)"
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert len(ax.get_lines()[0].get_xdata()) == 15  # 3 gaps x 5 requests, pooled
    with pytest.raises(ValueError, match="ttft, tpot, itl, e2el"):
        plots.plot_cdfs([fast], metric="latency")


def test_latency_distributions_png_still_works(tmp_path: Path) -> None:
    out = tmp_path / "latency.png"
    plots.save_latency_png(_records(0.1), str(out), title="t")
    assert out.read_bytes().startswith(PNG)
    axes = plots.plot_latency_distributions(_records(0.1))
    assert [ax.get_xlabel() for ax in axes] == ["TTFT (ms)", "TPOT (ms)", "E2EL (ms)"]


# -- latency-throughput -------------------------------------------------------------------------


def _rate_runs(ttft_scale: float = 1.0) -> list[RunResult]:
    # given out of order; output tok/s = 20 tokens / duration
    return [
        _run(f"r{rate}", _records(ttft_scale * rate / 10), LoadSpec(rate_rps=rate), 20 / tok_s)
        for rate, tok_s in ((8.0, 160.0), (2.0, 40.0), (4.0, 80.0))
    ]


def test_latency_throughput_one_point_per_run() -> None:
    runs = _rate_runs()
    ax = plots.plot_latency_throughput(runs, slo_ms=500)
    assert ax.get_xlabel() == "output throughput (tok/s)"
    assert ax.get_ylabel() == "P99 TTFT (ms)"
    curve, slo = ax.get_lines()
    np.testing.assert_allclose(curve.get_xdata(), [40.0, 80.0, 160.0])
    by_rate = {r.config.load.rate_rps: r.summary.ttft_ms.p99 for r in runs}
    np.testing.assert_allclose(curve.get_ydata(), [by_rate[2.0], by_rate[4.0], by_rate[8.0]])
    assert _texts(ax) == ["2 req/s", "4 req/s", "8 req/s"]
    assert list(slo.get_ydata()) == [500, 500]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["SLO 500 ms"]


def test_latency_throughput_curves_per_setting() -> None:
    conc = [
        _run(f"c{c}", _records(0.05 * c), LoadSpec(max_concurrency=c), 20 / (30.0 * c))
        for c in (4, 1)
    ] + [_run("inf", _records(0.5), LoadSpec(), 20 / 150.0)]
    ax = plots.plot_latency_throughput(
        {"baseline": _rate_runs(), "chunked": conc}, latency="tpot", stat="mean",
        x="request_throughput_rps",
    )
    assert ax.get_ylabel() == "mean TPOT (ms)"
    assert ax.get_xlabel() == "request throughput (req/s)"
    assert [line.get_label() for line in ax.get_lines()] == ["baseline", "chunked"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["baseline", "chunked"]
    assert _texts(ax)[3:] == ["c=1", "c=4", "inf"]
    xs = ax.get_lines()[1].get_xdata()
    assert list(xs) == sorted(xs)
    with pytest.raises(ValueError, match="unknown metric 'p42_ttft_ms'"):
        plots.plot_latency_throughput(conc, stat="p42")


# -- comparison ---------------------------------------------------------------------------------


def test_compare_bars_values_and_ratios() -> None:
    slo = SLO(ttft_ms=125)
    base = _run("base", _records(0.1), duration_s=1.0, slo=slo)
    new = _run("new", _records(0.2), duration_s=2.0, slo=slo)
    fig = Figure()
    axes = plots.plot_compare(
        [base, new],
        metrics=("output_throughput_tok_s", "p50_ttft_ms", "goodput_rps"),
        axes=fig.subplots(1, 3),
    )
    assert len(axes) == 3
    thr, ttft, good = axes
    assert [ax.get_ylabel() for ax in axes] == [
        "output throughput (tok/s)", "P50 TTFT (ms)", "goodput (req/s)"
    ]
    for ax in axes:
        assert len(ax.patches) == 2
        assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "new"]
    assert [p.get_height() for p in thr.patches] == [20.0, 10.0]
    assert _texts(thr) == ["20\n1.00x", "10\n0.50x"]
    assert [p.get_height() for p in ttft.patches] == pytest.approx([120.0, 240.0])
    assert _texts(ttft) == ["120\n1.00x", "240\n2.00x"]
    # base: 3 of 5 requests meet TTFT <= 125 ms in 1 s; new: none in 2 s
    assert _texts(good) == ["3\n1.00x", "0\n0.00x"]


def test_compare_baseline_labels_and_missing_values() -> None:
    a = _run("a", _records(0.1), duration_s=1.0)
    b = _run("b", _records(0.1), duration_s=4.0)
    axes = plots.plot_compare(
        [a, b], metrics=("request_throughput_rps", "goodput_rps"), labels=["A", "B"], baseline=1
    )
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["A", "B"]
    assert _texts(axes[0]) == ["5\n4.00x", "1.25\n1.00x"]
    assert _texts(axes[1]) == ["n/a", "n/a"]  # no SLO, no goodput


def test_compare_rejects_unknown_metric() -> None:
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="unknown metric 'ttft_p99_ms'.*p99_ttft_ms"):
        plots.plot_compare([_run("a", _records(0.1))], metrics=("ttft_p99_ms",))
    assert plt.get_fignums() == before  # nothing drawn


def test_metric_names_and_labels() -> None:
    names = plots.metric_names()
    assert "output_throughput_tok_s" in names and "p90_e2el_ms" in names
    assert plots.metric_label("mean_itl_ms") == "mean ITL (ms)"
    assert plots.metric_label("p99_tpot_ms") == "P99 TPOT (ms)"
    assert plots.load_label(LoadSpec(rate_rps=0.5, max_concurrency=2)) == "0.5 req/s"


def test_timeseries_draws_the_whole_machine_beside_the_server() -> None:
    series = TimeSeries(points=[
        TimePoint(t_s=t, telemetry={"server_cpu_cores": 1.5 * t, "machine_cpu_cores": 1.9 * t})
        for t in (0.0, 1.0)])
    d = plots.plot_timeseries(series)[3]
    assert [line.get_label() for line in d.get_lines()] == ["server", "whole machine"]
    assert list(d.get_lines()[1].get_ydata()) == [0.0, 1.9]
    assert d.get_legend() is not None

"""Plots (matplotlib, imported lazily). Each function takes ``ax=None`` (or ``axes=None``) and
returns what it drew on; with axes given, pyplot's global state is never touched.

* :func:`plot_cdf`, :func:`plot_latency_distributions`, :func:`plot_cdfs`: latency CDFs (ms);
* :func:`plot_timeseries`: a run's server time series (requests, KV cache, tok/s, hardware);
* :func:`plot_latency_throughput`: latency against throughput across load levels;
* :func:`plot_compare`: one bar chart per metric, runs side by side, with ratios to a baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_course.metrics import e2el_s, itl_s, tpot_s, ttft_s
from vllm_course.prom import TimeSeries
from vllm_course.records import RequestRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D

    from vllm_course.config import LoadSpec
    from vllm_course.metrics import RunSummary
    from vllm_course.results import RunResult

TIME_LABEL = "time since start (s)"

# per-request latency samples in seconds, by the short name the summary uses
LATENCY_SAMPLES: dict[str, Callable[[RequestRecord], list[float | None]]] = {
    "ttft": lambda r: [ttft_s(r)],
    "tpot": lambda r: [tpot_s(r)],
    "itl": itl_s,
    "e2el": lambda r: [e2el_s(r)],
}
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99")
SUMMARY_METRICS: dict[str, str] = {
    "output_throughput_tok_s": "output throughput (tok/s)",
    "total_throughput_tok_s": "total throughput (tok/s)",
    "request_throughput_rps": "request throughput (req/s)",
    "goodput_rps": "goodput (req/s)",
    "peak_output_tok_s": "peak output throughput (tok/s)",
}


# -- metric names -------------------------------------------------------------------------------


def metric_names() -> list[str]:
    """Every metric name :func:`plot_compare` and :func:`plot_latency_throughput` understand."""
    latencies = [f"{s}_{m}_ms" for m in LATENCY_SAMPLES for s in LATENCY_STATS]
    return [*SUMMARY_METRICS, *latencies]


def _parse_latency(name: str) -> tuple[str, str] | None:
    """``"p99_ttft_ms"`` (the key style of ``vllm bench serve --save-result``) ->
    ``("ttft", "p99")``; None for anything else."""
    parts = name.split("_")
    if len(parts) == 3 and parts[1] in LATENCY_SAMPLES and parts[0] in LATENCY_STATS:
        if parts[2] == "ms":
            return parts[1], parts[0]
    return None


def metric_label(name: str) -> str:
    """Axis label with units, e.g. ``"P99 TTFT (ms)"``, ``"output throughput (tok/s)"``.

    Raises:
        ValueError: for a name not in :func:`metric_names`, listing the valid ones.
    """
    if name in SUMMARY_METRICS:
        return SUMMARY_METRICS[name]
    latency = _parse_latency(name)
    if latency is None:
        raise ValueError(f"unknown metric {name!r}; valid: {', '.join(metric_names())}")
    metric, stat = latency
    return f"{stat.upper() if stat != 'mean' else 'mean'} {metric.upper()} (ms)"


def metric_value(summary: RunSummary | None, name: str) -> float | None:
    """The value of metric ``name`` in ``summary`` (None if the run has no such value)."""
    metric_label(name)  # validates the name
    if summary is None:
        return None
    latency = _parse_latency(name)
    if latency is None:
        return getattr(summary, name)
    return getattr(getattr(summary, f"{latency[0]}_ms"), latency[1])


def load_label(load: LoadSpec) -> str:
    """The load level of a run: ``"8 req/s"``, ``"c=4"`` (concurrency cap, no rate) or ``"inf"``."""
    if math.isfinite(load.rate_rps):
        return f"{load.rate_rps:g} req/s"
    if load.max_concurrency is not None:
        return f"c={load.max_concurrency}"
    return "inf"


def _new_axes(rows: int, cols: int, figsize: tuple[float, float]) -> Any:
    import matplotlib.pyplot as plt

    _, axes = plt.subplots(rows, cols, figsize=figsize, constrained_layout=True, squeeze=False)
    return axes


def _axes(ax: Axes | None) -> Axes:
    return ax if ax is not None else _new_axes(1, 1, (5, 3.5))[0, 0]


def _legend_if_labelled(ax: Axes) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)


# -- latency CDFs -------------------------------------------------------------------------------


def _cdf_line(ax: Axes, values_ms: Sequence[float], label: str) -> np.ndarray:
    """Draw one empirical CDF as a step line; returns the sorted values."""
    v = np.sort(np.asarray(values_ms, dtype=float))
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label)
    return v


def _cdf_frame(ax: Axes, xlabel: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


def plot_cdf(values_ms: Sequence[float], label: str, ax: Axes | None = None) -> Axes:
    """Empirical CDF of one latency sample (ms), with P50 and P99 marked."""
    ax = _axes(ax)
    v = _cdf_line(ax, values_ms, label)
    if len(v):
        for p, style in ((50, ":"), (99, "--")):
            x = float(np.percentile(v, p))
            ax.axvline(x, color="grey", linestyle=style, linewidth=0.8)
            ax.annotate(
                f"P{p} {x:.1f}",
                (x, 0.02 if p == 50 else 0.1),
                fontsize=7,
                rotation=90,
                ha="right",
                va="bottom",
            )
    _cdf_frame(ax, f"{label} (ms)")
    return ax


def plot_latency_distributions(
    records: Sequence[RequestRecord], axes: Sequence[Axes] | None = None, title: str | None = None
) -> Sequence[Axes]:
    """CDFs of TTFT, TPOT and E2EL (ms) of the successful requests, side by side.

    Returns:
        The three Axes (made in a new 1x3 figure when ``axes`` is ``None``).
    """
    if axes is None:
        axes = _new_axes(1, 3, (12, 3.6))[0]
        if title:
            axes[0].figure.suptitle(title)
    for ax, metric in zip(axes, ("ttft", "tpot", "e2el"), strict=True):
        plot_cdf(latency_ms(records, metric), metric.upper(), ax=ax)
    return axes


def save_latency_png(records: Sequence[RequestRecord], path: str, title: str | None = None) -> None:
    """Write :func:`plot_latency_distributions` to a PNG without touching pyplot's state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.6), constrained_layout=True)
    if title:
        fig.suptitle(title)
    plot_latency_distributions(records, axes=fig.subplots(1, 3))
    fig.savefig(path, dpi=110)


def latency_ms(records: Sequence[RequestRecord], metric: str) -> list[float]:
    """Per-request samples of ``metric`` (ttft/tpot/itl/e2el) in ms, successful requests only
    (ITL: every gap of every request, pooled)."""
    if metric not in LATENCY_SAMPLES:
        raise ValueError(f"unknown latency {metric!r}; valid: {', '.join(LATENCY_SAMPLES)}")
    sample = LATENCY_SAMPLES[metric]
    return [v * 1000.0 for r in records for v in sample(r) if v is not None]


def plot_cdfs(
    runs: Sequence[RunResult | Sequence[RequestRecord]],
    metric: str = "ttft",
    ax: Axes | None = None,
    labels: Sequence[str] | None = None,
) -> Axes:
    """Latency CDFs (ms) of several runs on one Axes, one step line per run.

    Args:
        runs: saved/loaded RunResults (their ``records()`` are read) or lists of records.
        metric: ``ttft``, ``tpot``, ``itl`` or ``e2el``.
        labels: one per run; default the run names (``run 1``, ... for record lists).

    A run without a single sample of ``metric`` draws no line.
    """
    if metric not in LATENCY_SAMPLES:
        raise ValueError(f"unknown latency {metric!r}; valid: {', '.join(LATENCY_SAMPLES)}")
    ax = _axes(ax)
    for i, run in enumerate(runs):
        records = run.records() if hasattr(run, "records") else run
        label = labels[i] if labels is not None else getattr(run, "name", f"run {i + 1}")
        _cdf_line(ax, latency_ms(records, metric), label)
    _cdf_frame(ax, f"{metric.upper()} (ms)")
    _legend_if_labelled(ax)
    return ax


# -- time series --------------------------------------------------------------------------------


def _floats(values: Sequence[float | None], scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if v is None else v * scale for v in values], dtype=float)


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")


def _panel(
    ax: Axes,
    t: np.ndarray,
    left: Sequence[tuple[np.ndarray, str]],
    ylabel: str,
    right: tuple[np.ndarray, str, str] | None = None,
    empty: str = "no data",
) -> None:
    """Lines ``left`` on ``ax`` and ``right`` (values, label, y label) on a twin y axis; series
    that are all missing are skipped, and a panel with none left shows ``empty``. Every series
    of a time series is a count, a share or a rate, never below 0: each y axis starts at 0 and
    reaches at least 1 (a series that stayed at 0, such as no preemptions, is a line at the
    bottom, not on an axis from -0.04 to 0.04)."""
    lines: list[Line2D] = []
    for y, label in left:
        if np.isfinite(y).any():
            lines += ax.plot(t, y, label=label)
    if lines:
        ax.set_ylim(0, max(ax.get_ylim()[1], 1))
    if right is not None and np.isfinite(right[0]).any():
        twin = ax.twinx()
        lines += twin.plot(t, right[0], color="tab:red", linestyle="--", label=right[1])
        twin.set_ylabel(right[2])
        twin.set_ylim(0, max(twin.get_ylim()[1], 1))
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if not lines:
        _note(ax, empty)
    elif len(lines) > 1:
        ax.legend(handles=lines, fontsize=7, loc="upper left")


def plot_timeseries(series_or_result: TimeSeries | RunResult, axes: Any = None) -> list[Axes]:
    """A run's server time series, against time since the run start (s), in four panels:

    1. requests running and waiting in the server (count);
    2. KV cache usage (%), with preemptions since the start (cumulative count) on a twin axis;
    3. generation and prompt throughput (tok/s), with mean tokens per engine step on a twin axis;
    4. hardware: GPU utilisation (%) with GPU power (W) on a twin axis when the run sampled the
       GPU, else the server's CPU use and the whole machine's (cores: the gap between them is
       the client and anything else that ran); "no telemetry" when there is neither.

    A series that is missing at every point is skipped; an empty panel says so.

    Args:
        series_or_result: a :class:`~vllm_course.prom.TimeSeries`, or a saved/loaded RunResult
            (its ``timeseries()`` is read).
        axes: four Axes (any shape); default a new 2x2 figure.

    Returns:
        The four Axes, flat, in the order above (twin axes hang off them: ``ax.figure.axes``).
    """
    ts = series_or_result if isinstance(series_or_result, TimeSeries) else (
        series_or_result.timeseries()
    )
    if axes is None:
        axes = _new_axes(2, 2, (11, 6.5))
    a, b, c, d = list(np.ravel(axes))
    col = ts.column
    t = _floats(col("t_s"))
    _panel(a, t, [(_floats(col("running")), "running"), (_floats(col("waiting")), "waiting")],
           "requests (count)")
    _panel(b, t, [(_floats(col("kv_cache_usage"), 100.0), "KV cache usage")],
           "KV cache usage (%)",
           right=(_floats(col("preemptions")), "preemptions (cumulative)", "preemptions (count)"))
    _panel(c, t, [(_floats(col("generation_tok_s")), "generation"),
                  (_floats(col("prompt_tok_s")), "prompt")],
           "throughput (tok/s)",
           right=(_floats(col("tokens_per_step")), "tokens per step", "tokens per step (tok)"))
    gpu = _floats(col("gpu_util_pct"))
    if np.isfinite(gpu).any():
        _panel(d, t, [(gpu, "GPU utilisation")], "GPU utilisation (%)",
               right=(_floats(col("gpu_power_w")), "GPU power", "GPU power (W)"))
    else:
        _panel(d, t, [(_floats(col("server_cpu_cores")), "server"),
                      (_floats(col("machine_cpu_cores")), "whole machine")], "CPU (cores)",
               empty="no telemetry")
    titles = ("requests", "KV cache", "token throughput", "hardware")
    for ax, title in zip((a, b, c, d), titles, strict=True):
        ax.set_title(title, fontsize=9)
    return [a, b, c, d]


def save_timeseries_png(
    series: TimeSeries | RunResult, path: str, title: str | None = None
) -> None:
    """Write :func:`plot_timeseries` to a PNG without touching pyplot's state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.5), constrained_layout=True)
    if title:
        fig.suptitle(title)
    plot_timeseries(series, axes=fig.subplots(2, 2))
    fig.savefig(path, dpi=110)


# -- across runs --------------------------------------------------------------------------------


def _curve(
    ax: Axes, runs: Sequence[RunResult], x: str, y: str, label: str | None
) -> None:
    """One latency-throughput curve: points sorted by ``x``, each annotated with its load."""
    points = []
    for r in runs:
        px, py = metric_value(r.summary, x), metric_value(r.summary, y)
        if px is not None and py is not None:
            points.append((px, py, load_label(r.config.load)))
    points.sort()
    if not points:
        return
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    for px, py, text in points:
        ax.annotate(text, (px, py), textcoords="offset points", xytext=(4, 4), fontsize=7)


def plot_latency_throughput(
    runs: Sequence[RunResult] | Mapping[str, Sequence[RunResult]],
    latency: str = "ttft",
    stat: str = "p99",
    ax: Axes | None = None,
    x: str = "output_throughput_tok_s",
    label: str | None = None,
    slo_ms: float | None = None,
) -> Axes:
    """Latency against throughput across load levels: one point per run, joined in ``x`` order,
    each annotated with its load (``"8 req/s"``, ``"c=4"`` or ``"inf"``).

    Args:
        runs: the runs of one curve, or ``{label: runs}`` for one curve per server setting.
        latency, stat: the y value, e.g. ``ttft``/``p99`` is P99 TTFT (ms).
        x: a throughput metric (default output tok/s; any name of :func:`metric_names`).
        label: legend label of a single curve.
        slo_ms: draw the latency SLO (ms) as a horizontal dashed line.

    Runs without a summary are skipped.
    """
    y = f"{stat}_{latency}_ms"
    ylabel, xlabel = metric_label(y), metric_label(x)
    ax = _axes(ax)
    curves = runs.items() if isinstance(runs, Mapping) else [(label, runs)]
    for name, group in curves:
        _curve(ax, group, x, y, name)
    if slo_ms is not None:
        ax.axhline(slo_ms, color="tab:red", linestyle="--", linewidth=1,
                   label=f"SLO {slo_ms:g} ms")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.margins(x=0.1)  # room for the load labels
    ax.grid(alpha=0.3)
    _legend_if_labelled(ax)
    return ax


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _bar_text(value: float | None, base: float | None) -> str:
    if value is None:
        return "n/a"
    if base is None or base == 0:
        return _fmt(value)
    return f"{_fmt(value)}\n{value / base:.2f}x"


def plot_compare(
    runs: Sequence[RunResult],
    metrics: Sequence[str] = ("output_throughput_tok_s", "p99_ttft_ms", "p99_tpot_ms"),
    axes: Any = None,
    labels: Sequence[str] | None = None,
    baseline: int = 0,
) -> list[Axes]:
    """Runs side by side: one bar chart per metric (one bar per run), each bar labelled with its
    value and its ratio to run ``baseline`` (e.g. ``"0.62x"``).

    Args:
        runs: RunResults (their ``summary`` is read).
        metrics: names from :func:`metric_names`, e.g. ``output_throughput_tok_s`` (tok/s),
            ``p99_ttft_ms`` (ms), ``goodput_rps`` (req/s).
        axes: one Axes per metric; default a new 1xN figure.
        labels: one per run; default the run names.
        baseline: index of the run the ratios are relative to.

    Raises:
        ValueError: for an unknown metric name (before anything is drawn).
    """
    ylabels = [metric_label(m) for m in metrics]
    names = list(labels) if labels is not None else [r.name for r in runs]
    if axes is None:
        axes = _new_axes(1, len(metrics), (3.6 * len(metrics), 3.4))
    axes = list(np.ravel(axes))
    for ax, metric, ylabel in zip(axes, metrics, ylabels, strict=True):
        values = [metric_value(r.summary, metric) for r in runs]
        heights = [0.0 if v is None else v for v in values]
        bars = ax.bar(range(len(runs)), heights, color=[f"C{i % 10}" for i in range(len(runs))])
        base = values[baseline]
        ax.bar_label(bars, labels=[_bar_text(v, base) for v in values], fontsize=7)
        ax.set_xticks(range(len(runs)), names, rotation=20, ha="right")
        ax.set_ylabel(ylabel)
        ax.set_title("lower is better" if metric.endswith("_ms") else "higher is better",
                     fontsize=8)
        ax.margins(y=0.2)
    return axes

"""Plots (matplotlib, imported lazily). Each function takes ``ax=None`` and returns its Axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vllm_course import metrics
from vllm_course.records import RequestRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.figure(figsize=(5, 3.5)).add_subplot()


def plot_cdf(values_ms: Sequence[float], label: str, ax: Axes | None = None) -> Axes:
    """Empirical CDF of one latency sample (ms), with P50 and P99 marked."""
    ax = _axes(ax)
    v = np.sort(np.asarray(values_ms, dtype=float))
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label)
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
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    return ax


def plot_latency_distributions(
    records: Sequence[RequestRecord], axes: Sequence[Axes] | None = None, title: str | None = None
) -> Sequence[Axes]:
    """CDFs of TTFT, TPOT and E2EL (ms) of the successful requests, side by side.

    Returns:
        The three Axes (made in a new 1x3 figure when ``axes`` is ``None``).
    """
    if axes is None:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), constrained_layout=True)
        if title:
            fig.suptitle(title)
    samples = {
        "TTFT": [metrics.ttft_s(r) for r in records],
        "TPOT": [metrics.tpot_s(r) for r in records],
        "E2EL": [metrics.e2el_s(r) for r in records],
    }
    for ax, (label, values) in zip(axes, samples.items()):
        plot_cdf([v * 1000 for v in values if v is not None], label, ax=ax)
    return axes


def save_latency_png(records: Sequence[RequestRecord], path: str, title: str | None = None) -> None:
    """Write :func:`plot_latency_distributions` to a PNG without touching pyplot's state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.6), constrained_layout=True)
    if title:
        fig.suptitle(title)
    plot_latency_distributions(records, axes=fig.subplots(1, 3))
    fig.savefig(path, dpi=110)

"""The server's view of a run, from vLLM's Prometheus ``/metrics``.

``snapshot`` parses one exposition into a :class:`Snapshot` (:func:`scrape` fetches one);
``window`` turns two snapshots (and the scrapes between) into a run's :class:`ServerMetrics`;
``timeseries`` turns the scrapes into a :class:`TimeSeries`; ``sampler`` scrapes in the
background while a run goes on.

May import: third-party libraries only (nothing else from ``vllm_course``), so it sits at the
bottom layer and opens a socket only in :class:`Sampler`.
"""

from vllm_course.prom.sampler import Sampler, Telemetry
from vllm_course.prom.snapshot import (
    ALIASES,
    FAMILIES,
    ITERATION_TOKENS,
    LATENCY_HISTOGRAMS,
    MAX_OVER_LABELS,
    Histogram,
    Snapshot,
    parse,
    scrape,
    vllm_lines,
)
from vllm_course.prom.timeseries import TimePoint, TimeSeries, time_series
from vllm_course.prom.window import HistogramStats, ServerMetrics, summarize_window

__all__ = [
    "ALIASES", "FAMILIES", "ITERATION_TOKENS", "LATENCY_HISTOGRAMS", "MAX_OVER_LABELS",
    "Histogram", "HistogramStats", "Sampler", "ServerMetrics", "Snapshot", "Telemetry",
    "TimePoint", "TimeSeries", "parse", "scrape", "summarize_window", "time_series", "vllm_lines",
]

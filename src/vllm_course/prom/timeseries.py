"""A run as a time series: one :class:`TimePoint` per scrape (queue, KV cache, token rates), for
the plots that show when a run went wrong."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vllm_course.prom.snapshot import ITERATION_TOKENS, Snapshot
from vllm_course.prom.window import _delta, _hist_delta


class TimePoint(BaseModel):
    """One sample of a run's time series (see :func:`time_series`).

    Attributes:
        t_s: seconds since the run started (negative for the scrape taken just before it).
        running, waiting: ``vllm:num_requests_running`` / ``_waiting`` (requests).
        kv_cache_usage: ``vllm:kv_cache_usage_perc`` (fraction 0-1).
        preemptions: preemptions since the run started (cumulative count).
        prefix_cache_hits, prefix_cache_queries: since the run started (cumulative tokens).
        prompt_tok_s, generation_tok_s: prompt / generated tokens per second since the previous
            sample (tok/s).
        tokens_per_step: mean tokens per observed engine step since the previous sample (see
            :attr:`ServerMetrics.tokens_per_step_mean` for what vLLM observes).
        steps_per_s: observed engine steps per second since the previous sample.
        telemetry: hardware samples taken at the same moment (``vllm_course.env.telemetry``), e.g.
            ``server_cpu_cores``, ``machine_cpu_cores``, ``gpu_util_pct``,
            ``gpu_mem_used_bytes``, ``gpu_power_w``, ``gpu_sm_clock_mhz``.
    """

    model_config = ConfigDict(frozen=True)
    t_s: float
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    preemptions: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    prompt_tok_s: float | None = None
    generation_tok_s: float | None = None
    tokens_per_step: float | None = None
    steps_per_s: float | None = None
    telemetry: dict[str, float] = Field(default_factory=dict)


class TimeSeries(BaseModel):
    """A run's server time series: one :class:`TimePoint` per scrape (``timeseries.json``)."""

    model_config = ConfigDict(frozen=True)
    interval_s: float | None = None
    points: list[TimePoint] = Field(default_factory=list)

    def column(self, name: str) -> list[float | None]:
        """One field of every point (a ``TimePoint`` field or a telemetry key), in time order."""
        if name in TimePoint.model_fields:
            return [getattr(p, name) for p in self.points]
        return [p.telemetry.get(name) for p in self.points]

    def to_dataframe(self):
        """A pandas DataFrame, one row per point, telemetry keys as columns (needs pandas)."""
        import pandas as pd

        rows = [{**p.model_dump(exclude={"telemetry"}), **p.telemetry} for p in self.points]
        return pd.DataFrame(rows)


def time_series(
    snapshots: list[Snapshot], start_t: float, interval_s: float | None = None
) -> TimeSeries:
    """Turn scrapes (``before``, in-run samples, ``after``; in time order) into a time series.

    Cumulative counters count from the first snapshot; rates and tokens per step are over the
    interval since the previous snapshot. ``start_t`` is the run's start (``time.time()``).
    """
    if not snapshots:
        return TimeSeries(interval_s=interval_s)
    first = snapshots[0]

    def since_first(s: Snapshot, name: str) -> float | None:
        return _delta(first, s, name)

    points = []
    prev: Snapshot | None = None
    for s in snapshots:
        rates: dict[str, float | None] = {}
        if prev is not None and s.t > prev.t:
            dt = s.t - prev.t
            for key, name in (("prompt_tok_s", "vllm:prompt_tokens_total"),
                              ("generation_tok_s", "vllm:generation_tokens_total")):
                d = _delta(prev, s, name)
                rates[key] = None if d is None else d / dt
            h = _hist_delta(prev, s, ITERATION_TOKENS)
            if h is not None:
                rates["tokens_per_step"] = h.mean
                rates["steps_per_s"] = h.count / dt
        points.append(TimePoint(
            t_s=round(s.t - start_t, 3),
            running=s.get("vllm:num_requests_running"),
            waiting=s.get("vllm:num_requests_waiting"),
            kv_cache_usage=s.get("vllm:kv_cache_usage_perc"),
            preemptions=since_first(s, "vllm:num_preemptions_total"),
            prefix_cache_hits=since_first(s, "vllm:prefix_cache_hits_total"),
            prefix_cache_queries=since_first(s, "vllm:prefix_cache_queries_total"),
            telemetry=dict(s.telemetry),
            **rates,
        ))
        prev = s
    return TimeSeries(interval_s=interval_s, points=points)


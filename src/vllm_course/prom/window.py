"""A run window on the server's side: counter and histogram deltas between two scrapes, and the
means of the gauges scraped in between (:class:`ServerMetrics`, as a run summary reports them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vllm_course.prom.snapshot import (
    ALIASES,
    ITERATION_TOKENS,
    LATENCY_HISTOGRAMS,
    Histogram,
    Snapshot,
)


class HistogramStats(BaseModel):
    """A server-side latency histogram over a run window, in ms.

    ``mean`` is exact (Δsum/Δcount); the percentiles are bucket estimates
    (:meth:`Histogram.quantile`, as Prometheus's ``histogram_quantile``).
    """

    model_config = ConfigDict(frozen=True)
    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, h: Histogram, scale: float = 1000.0) -> HistogramStats:
        """Stats of ``h`` with values multiplied by ``scale`` (s -> ms by default)."""

        def scaled(v: float | None) -> float | None:
            return None if v is None else v * scale

        return cls(
            count=round(h.count),
            mean=scaled(h.mean),
            p50=scaled(h.quantile(0.5)),
            p90=scaled(h.quantile(0.9)),
            p99=scaled(h.quantile(0.99)),
        )


class ServerMetrics(BaseModel):
    """What the server's metrics say about a run window (after minus before), plus gauges.

    Token counts are tokens; KV usage is a fraction 0-1; ``*_mean`` are over the scrapes taken
    during the run (``samples`` of them, every ``interval_s`` seconds), ``*_peak`` over those and
    the scrapes just before and after it; all of them are ``None`` when ``samples`` is 0.

    Attributes:
        latency_ms: server-side latency histograms over the window by short name (``ttft``,
            ``itl``, ``tpot``, ``e2el``, ``queue``, ``prefill``, ``decode``; see
            :data:`LATENCY_HISTOGRAMS`), in ms. The server's TTFT starts when the API server
            received the request (no network, no client queue).
        engine_steps: Δcount of ``vllm:iteration_tokens_total``: engine steps that returned at
            least one request output (steps that only prefilled a chunk are not observed).
        tokens_per_step_mean: Δsum/Δcount of that histogram, in tokens. vLLM observes a prompt's
            computed tokens in the step where its prefill finishes, so under chunked prefill this
            mean can exceed ``max_num_batched_tokens``; its buckets are not per-step token counts.
        busy_fraction: share of in-run samples with at least one running request.
        running_time_avg: time-averaged number of running requests over the run, by Little's
            law: the summed prefill + decode time (``vllm:request_prefill_time_seconds`` +
            ``vllm:request_decode_time_seconds``, from first scheduled to last token) of the
            requests that finished in the window, divided by the run's span (``duration_s``
            as the caller gives it: from the first request sent to the last one finished).
            Read from counters, so it needs no in-run sample (a starved 2-core machine may
            answer ``/metrics`` too late for any); ``None`` without the histograms or a span.
        waiting_time_avg: the same for the server's queue: summed
            ``vllm:request_queue_time_seconds`` over the same span (requests).
        deprecated_names: deprecated metric names this server exposed (read as current ones).
    """

    model_config = ConfigDict(frozen=True)
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None
    kv_cache_usage_peak: float | None = None
    kv_cache_usage_mean: float | None = None
    num_requests_running_peak: float | None = None
    num_requests_running_mean: float | None = None
    num_requests_waiting_peak: float | None = None
    num_requests_waiting_mean: float | None = None
    busy_fraction: float | None = None
    running_time_avg: float | None = None
    waiting_time_avg: float | None = None
    engine_steps: float | None = None
    tokens_per_step_mean: float | None = None
    latency_ms: dict[str, HistogramStats] = Field(default_factory=dict)
    deprecated_names: list[str] = Field(default_factory=list)
    samples: int = 0
    interval_s: float | None = None


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    a, b = after.get(name), before.get(name)
    return None if a is None or b is None else a - b


def _hist_delta(before: Snapshot, after: Snapshot, name: str) -> Histogram | None:
    """``after - before`` of a histogram; None unless both scrapes have it (as counters)."""
    a, b = after.histogram(name), before.histogram(name)
    return None if a is None or b is None else a.minus(b)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_window(
    before: Snapshot,
    after: Snapshot,
    during: list[Snapshot],
    interval_s: float | None = None,
    duration_s: float | None = None,
) -> ServerMetrics:
    """Counter and histogram deltas between ``before`` and ``after``; gauge peaks over every
    snapshot and gauge means over ``during`` (the in-run samples); time-averaged running and
    waiting requests over ``duration_s`` (the run's length, s) from the latency histograms.

    Without an in-run sample the gauges (running, waiting, KV cache usage, busy share) are
    ``None``, not the idle ``before``/``after`` values: a short run on a busy machine, whose
    ``/metrics`` answered too slowly to be sampled, must not read as "nothing was running"."""
    queries = _delta(before, after, "vllm:prefix_cache_queries_total")
    hits = _delta(before, after, "vllm:prefix_cache_hits_total")
    snaps = [before, *during, after] if during else []
    inside = during

    def values(name: str, among: list[Snapshot]) -> list[float]:
        return [v for s in among if (v := s.get(name)) is not None]

    def peak(name: str) -> float | None:
        vals = values(name, snaps)
        return max(vals) if vals else None

    running = values("vllm:num_requests_running", inside)
    steps = _hist_delta(before, after, ITERATION_TOKENS)

    def time_avg(*short: str) -> float | None:
        """Summed time (s) in the given histograms over ``duration_s``: Little's law."""
        hists = [_hist_delta(before, after, LATENCY_HISTOGRAMS[n]) for n in short]
        if not duration_s or duration_s <= 0 or any(h is None for h in hists):
            return None
        return sum(h.sum for h in hists) / duration_s
    latency = {
        short: HistogramStats.of(h)
        for short, name in LATENCY_HISTOGRAMS.items()
        if (h := _hist_delta(before, after, name)) is not None
    }
    # deprecated names that were read: the old name is there and the current one is not
    deprecated = sorted(
        {found for s in (before, after) for new in ALIASES
         if (found := s.resolve(new)) is not None and found != new}
    )
    return ServerMetrics(
        prompt_tokens=_delta(before, after, "vllm:prompt_tokens_total"),
        generation_tokens=_delta(before, after, "vllm:generation_tokens_total"),
        preemptions=_delta(before, after, "vllm:num_preemptions_total"),
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate=(hits / queries) if queries and hits is not None else None,
        kv_cache_usage_peak=peak("vllm:kv_cache_usage_perc"),
        kv_cache_usage_mean=_mean(values("vllm:kv_cache_usage_perc", inside)),
        num_requests_running_peak=peak("vllm:num_requests_running"),
        num_requests_running_mean=_mean(running),
        num_requests_waiting_peak=peak("vllm:num_requests_waiting"),
        num_requests_waiting_mean=_mean(values("vllm:num_requests_waiting", inside)),
        busy_fraction=_mean([float(v > 0) for v in running]),
        running_time_avg=time_avg("prefill", "decode"),
        waiting_time_avg=time_avg("queue"),
        engine_steps=None if steps is None else steps.count,
        tokens_per_step_mean=None if steps is None else steps.mean,
        latency_ms=latency,
        deprecated_names=deprecated,
        samples=len(during),
        interval_s=interval_s,
    )

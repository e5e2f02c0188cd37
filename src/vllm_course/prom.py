"""Scrape vLLM's ``/metrics`` (Prometheus text) and compare snapshots over a run window.

Parsing uses ``prometheus_client``'s own parser. Values are summed over label sets (one series per
engine under data parallelism). Deprecated metric names are understood through
:data:`ALIASES`, with a warning. Metric names are those of vLLM V1's ``PrometheusStatLogger``
(``vllm/v1/metrics/loggers.py``; also ``docs/design/metrics.md`` in vLLM's repository).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

# current name -> older names that meant the same thing (vllm/v1/metrics/loggers.py: the gpu_
# names of the KV cache and prefix cache metrics were deprecated in 0.9 and gone by 0.11)
ALIASES: dict[str, tuple[str, ...]] = {
    "vllm:kv_cache_usage_perc": ("vllm:gpu_cache_usage_perc",),
    "vllm:prefix_cache_queries_total": ("vllm:gpu_prefix_cache_queries_total",),
    "vllm:prefix_cache_hits_total": ("vllm:gpu_prefix_cache_hits_total",),
    # deprecated in 0.11, hidden in 0.12: it always held per-step ITL, not per-request TPOT
    "vllm:inter_token_latency_seconds": ("vllm:time_per_output_token_seconds",),
}

# fractions per engine: the run-wide value is the fullest engine's, not the sum over engines
MAX_OVER_LABELS = frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"})

# server-side latency histograms (seconds), by the short name a summary uses
LATENCY_HISTOGRAMS: dict[str, str] = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
}
ITERATION_TOKENS = "vllm:iteration_tokens_total"


@dataclass
class Snapshot:
    """One scrape: sample name -> value summed over label sets (histogram buckets keep ``le``).

    Fractions per engine (:data:`MAX_OVER_LABELS`, e.g. ``vllm:kv_cache_usage_perc``) take the
    maximum over label sets instead of the sum.

    Attributes:
        t: wall-clock time of the scrape (``time.time()``).
        values: e.g. ``{"vllm:num_requests_running": 3.0, ...}``.
        buckets: histogram name -> {upper bound ``le`` -> cumulative count}.
    """

    t: float
    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    telemetry: dict[str, float] = field(default_factory=dict)

    def resolve(self, name: str) -> str | None:
        """The name under which this scrape has ``name``: itself, a deprecated alias, or None.

        Histograms are looked up by their base name (``vllm:time_to_first_token_seconds``).
        """
        for candidate in (name, *ALIASES.get(name, ())):
            if candidate in self.values or candidate in self.buckets:
                return candidate
        return None

    def get(self, name: str, default: float | None = None) -> float | None:
        """Value of ``name`` or of a deprecated alias (with a warning naming both)."""
        if name in self.values:
            return self.values[name]
        found = self.resolve(name)
        if found is not None and found in self.values:
            _warn_deprecated(found, name)
            return self.values[found]
        return default

    def histogram(self, name: str) -> Histogram | None:
        """Histogram ``name`` (base name, or a deprecated alias with a warning), or None."""
        found = self.resolve(name)
        if found is None or found not in self.buckets:
            return None
        if found != name:
            _warn_deprecated(found, name)
        return Histogram(
            buckets=sorted(self.buckets[found].items()),
            sum=self.values.get(f"{found}_sum", 0.0),
            count=self.values.get(f"{found}_count", 0.0),
        )


_warned: set[str] = set()


def _warn_deprecated(old: str, new: str) -> None:
    """Warn once per process that the server exposes a deprecated metric name."""
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"server exposes deprecated {old}; read as {new}", UserWarning, stacklevel=3)


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram (or the difference of two scrapes of one).

    Attributes:
        buckets: ``(upper bound le, cumulative count)`` pairs sorted by ``le`` (``+Inf`` last).
        sum: sum of the observed values (the histogram's unit, e.g. s or tokens).
        count: number of observations.
    """

    buckets: list[tuple[float, float]]
    sum: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """Observations made after ``earlier`` (same buckets): the run window's histogram."""
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        return Histogram(
            buckets=[(le, c - before.get(le, 0.0)) for le, c in self.buckets],
            sum=self.sum - earlier.sum,
            count=self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        """``sum / count`` (exact, unlike the quantiles), or None with no observations."""
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0-1), as Prometheus's ``histogram_quantile`` estimates it.

        Linear interpolation inside the bucket that holds the rank ``q * count``; the first
        bucket starts at 0; a rank in the ``+Inf`` bucket returns the largest finite bound. The
        result is only as fine as the buckets (vLLM's latency buckets are roughly 1-2.5-5 steps).
        ``None`` with no observations.
        """
        if not 0 <= q <= 1:
            raise ValueError(f"q must be within 0..1, got {q}")
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower, below = 0.0, 0.0
        finite = [le for le, _ in self.buckets if le != float("inf")]
        for le, cumulative in self.buckets:
            if cumulative >= rank and cumulative > below:
                if le == float("inf"):
                    return finite[-1] if finite else None
                return lower + (le - lower) * (rank - below) / (cumulative - below)
            lower, below = le, cumulative
        return finite[-1] if finite else None


def parse(text: str, t: float | None = None) -> Snapshot:
    """Parse Prometheus exposition text into a :class:`Snapshot`."""
    snap = Snapshot(t=time.time() if t is None else t)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") and "le" in sample.labels:
                le = float(sample.labels["le"])
                hist = snap.buckets.setdefault(sample.name[: -len("_bucket")], {})
                hist[le] = hist.get(le, 0.0) + sample.value
            elif sample.name in MAX_OVER_LABELS:
                snap.values[sample.name] = max(snap.values.get(sample.name, 0.0), sample.value)
            else:
                snap.values[sample.name] = snap.values.get(sample.name, 0.0) + sample.value
    return snap


async def scrape(client: httpx.AsyncClient, base_url: str = "") -> Snapshot:
    """GET ``/metrics`` and parse it.

    Raises:
        httpx.HTTPError: if the server does not answer or answers with an error status.
    """
    resp = await client.get(f"{base_url}/metrics")
    resp.raise_for_status()
    t = time.time()
    # filtering and parsing take milliseconds of pure Python: keep them off the event loop that
    # times requests
    return await asyncio.to_thread(_parse_exposition, resp.content, t)


def _parse_exposition(body: bytes, t: float) -> Snapshot:
    return parse(vllm_lines(body.decode("utf-8", "replace")), t)


# the families a run summary reads (deprecated aliases included), by base name (no ``_total``,
# ``_bucket``, ``_sum``, ``_count``, ``_created``); parsing only these keeps each scrape to about a
# millisecond, so sampling never stalls the load generator's loop
FAMILIES = frozenset({
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:iteration_tokens",
    "vllm:time_per_output_token_seconds",
    *LATENCY_HISTOGRAMS.values(),
})

_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def _family(line: str) -> str:
    """The base name of an exposition line's metric (``# HELP``/``# TYPE`` lines included)."""
    if line.startswith("#"):
        parts = line.split(" ", 3)
        name = parts[2] if len(parts) > 2 else ""
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name[: -len("_total")] if name.endswith("_total") else name


def vllm_lines(text: str, families: frozenset[str] = FAMILIES) -> str:
    """Only the lines of ``families`` (samples, HELP and TYPE) from an exposition."""
    keep = [line for line in text.splitlines() if line and _family(line) in families]
    return "\n".join(keep) + "\n"




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
        telemetry: hardware samples taken at the same moment (``vllm_course.telemetry``), e.g.
            ``server_cpu_cores``, ``gpu_util_pct``, ``gpu_mem_used_bytes``, ``gpu_power_w``,
            ``gpu_sm_clock_mhz``.
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


Telemetry = Callable[[], dict[str, float]]


class Sampler:
    """Scrapes ``/metrics`` every ``interval_s`` seconds in the background while a run goes on.

    Use as ``async with Sampler(base_url) as sampler: ...``; ``sampler.before``,
    ``sampler.after`` and ``sampler.samples`` hold the snapshots. A failed scrape during the run
    is skipped (the server may be busy or gone; the run itself reports that). Set
    ``expect_generation_tokens`` before leaving the block to make the final scrape wait (up to
    ``settle_s`` seconds) until the server has counted that many generated tokens. ``telemetry``, if
    given, is called at every scrape and its values stored in ``Snapshot.telemetry`` (e.g.
    :class:`vllm_course.telemetry.Telemetry`: GPU or server CPU use).
    """

    def __init__(self, base_url: str, interval_s: float = 1.0, telemetry: Telemetry | None = None):
        self.base_url = base_url
        self.interval_s = interval_s
        self.telemetry = telemetry
        self.before: Snapshot | None = None
        self.after: Snapshot | None = None
        self.samples: list[Snapshot] = []
        self._client = httpx.AsyncClient(base_url=base_url, timeout=10.0)
        self._task: asyncio.Task | None = None
        self.expect_generation_tokens: float | None = None
        self.settle_s = 5.0

    async def _scrape(self) -> Snapshot:
        snap = await scrape(self._client)
        if self.telemetry is not None:
            snap.telemetry = await asyncio.to_thread(self.telemetry)
        return snap

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.samples.append(await self._scrape())
            except httpx.HTTPError:
                continue

    async def __aenter__(self) -> Sampler:
        self.before = await self._scrape()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            self.after = await self._final_scrape()
        except httpx.HTTPError:
            self.after = None
        await self._client.aclose()

    async def _final_scrape(self) -> Snapshot:
        """The last scrape; with :attr:`expect_generation_tokens` set, scrape again (every 0.2 s,
        up to :attr:`settle_s`) until ``vllm:generation_tokens_total`` has counted them: vLLM's
        API server updates its counters after it has streamed a step's tokens, and on a busy
        machine that can lag the client by a second or more."""
        snap = await self._scrape()
        expected = self.expect_generation_tokens
        if expected is None or self.before is None:
            return snap
        start = self.before.get("vllm:generation_tokens_total")
        deadline = time.monotonic() + self.settle_s
        while (
            start is not None
            and (now := snap.get("vllm:generation_tokens_total")) is not None
            and now - start < expected
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.2)
            snap = await self._scrape()
        return snap

    def summary(
        self, window: tuple[float, float] | None = None, duration_s: float | None = None
    ) -> ServerMetrics | None:
        """The window's :class:`ServerMetrics`, or ``None`` if the final scrape failed.

        Args:
            window: (start, end) wall-clock times (``time.time()``, s) of the run: only scrapes
                that arrived inside it count as in-run samples. A scrape that arrived after the
                last request ended (a starved client may read one late) saw a drained server.
            duration_s: the run's length (s), for the time-averaged running and waiting
                requests (:attr:`ServerMetrics.running_time_avg`).
        """
        if self.before is None or self.after is None:
            return None
        during = self.samples
        if window is not None:
            start, end = window
            during = [s for s in during if start <= s.t <= end]
        return summarize_window(self.before, self.after, during, self.interval_s, duration_s)

    def series(self, start_t: float) -> TimeSeries:
        """Every scrape as a :class:`TimeSeries` with times relative to ``start_t``
        (``time.time()`` of the run start)."""
        snaps = [s for s in (self.before, *self.samples, self.after) if s is not None]
        return time_series(snaps, start_t, self.interval_s)

"""Parse vLLM's ``/metrics`` (Prometheus text) into a :class:`Snapshot`.

Parsing uses ``prometheus_client``'s own parser. Values are summed over label sets (one series per
engine under data parallelism). Deprecated metric names are understood through
:data:`ALIASES`, with a warning. Metric names are those of vLLM V1's ``PrometheusStatLogger``
(``vllm/v1/metrics/loggers.py``; also ``docs/design/metrics.md`` in vLLM's repository).
"""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

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

"""Scrape vLLM's ``/metrics`` (Prometheus text) and compare snapshots over a run window.

Parsing uses ``prometheus_client``'s own parser. Values are summed over label sets (one series per
engine under data parallelism). Deprecated metric names are understood through
:data:`ALIASES` (metrics_reference.md §3), with a warning.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

# current name -> older names that meant the same thing
ALIASES: dict[str, tuple[str, ...]] = {
    "vllm:kv_cache_usage_perc": ("vllm:gpu_cache_usage_perc",),
    "vllm:prefix_cache_queries_total": ("vllm:gpu_prefix_cache_queries_total",),
    "vllm:prefix_cache_hits_total": ("vllm:gpu_prefix_cache_hits_total",),
}

# fractions per engine: the run-wide value is the fullest engine's, not the sum over engines
MAX_OVER_LABELS = frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"})


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

    def get(self, name: str, default: float | None = None) -> float | None:
        """Value of ``name`` or of a deprecated alias (with a DeprecationWarning-free warning)."""
        if name in self.values:
            return self.values[name]
        for old in ALIASES.get(name, ()):
            if old in self.values:
                warnings.warn(
                    f"server exposes deprecated {old}; read as {name}", UserWarning, stacklevel=2
                )
                return self.values[old]
        return default


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
    # parsing takes milliseconds of pure Python: keep it off the event loop that times requests
    return await asyncio.to_thread(parse, vllm_lines(resp.text), t)


# the families a run summary reads (deprecated aliases included); parsing only these keeps each
# scrape to a fraction of a millisecond, so sampling never stalls the load generator's loop
FAMILIES = frozenset({
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
})


def _family(line: str) -> str:
    if line.startswith("#"):
        parts = line.split(" ", 3)
        name = parts[2] if len(parts) > 2 else ""
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    for suffix in ("_total", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def vllm_lines(text: str, families: frozenset[str] = FAMILIES) -> str:
    """Only the lines of ``families`` (samples, HELP and TYPE) from an exposition."""
    keep = [line for line in text.splitlines() if line and _family(line) in families]
    return "\n".join(keep) + "\n"




class ServerMetrics(BaseModel):
    """What the server's counters say about a run window (after minus before), plus gauge peaks.

    Token counts are tokens; ``kv_cache_usage_peak`` is a fraction 0-1; ``*_peak`` are maxima
    over the samples taken during the run (``samples`` of them, every ``interval_s``).
    """

    model_config = ConfigDict(frozen=True)
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_hit_rate: float | None = None
    kv_cache_usage_peak: float | None = None
    num_requests_running_peak: float | None = None
    num_requests_waiting_peak: float | None = None
    samples: int = 0
    interval_s: float | None = None


def _delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    a, b = after.get(name), before.get(name)
    return None if a is None or b is None else a - b


def summarize_window(
    before: Snapshot, after: Snapshot, during: list[Snapshot], interval_s: float | None = None
) -> ServerMetrics:
    """Counter deltas between ``before`` and ``after`` and gauge peaks over all snapshots."""
    queries = _delta(before, after, "vllm:prefix_cache_queries_total")
    hits = _delta(before, after, "vllm:prefix_cache_hits_total")
    snaps = [before, *during, after]

    def peak(name: str) -> float | None:
        vals = [v for s in snaps if (v := s.get(name)) is not None]
        return max(vals) if vals else None

    return ServerMetrics(
        prompt_tokens=_delta(before, after, "vllm:prompt_tokens_total"),
        generation_tokens=_delta(before, after, "vllm:generation_tokens_total"),
        preemptions=_delta(before, after, "vllm:num_preemptions_total"),
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate=(hits / queries) if queries and hits is not None else None,
        kv_cache_usage_peak=peak("vllm:kv_cache_usage_perc"),
        num_requests_running_peak=peak("vllm:num_requests_running"),
        num_requests_waiting_peak=peak("vllm:num_requests_waiting"),
        samples=len(during),
        interval_s=interval_s,
    )


class Sampler:
    """Scrapes ``/metrics`` every ``interval_s`` seconds in the background while a run goes on.

    Use as ``async with Sampler(base_url) as sampler: ...``; ``sampler.before``,
    ``sampler.after`` and ``sampler.samples`` hold the snapshots. A failed scrape during the run
    is skipped (the server may be busy or gone; the run itself reports that).
    """

    def __init__(self, base_url: str, interval_s: float = 1.0):
        self.base_url = base_url
        self.interval_s = interval_s
        self.before: Snapshot | None = None
        self.after: Snapshot | None = None
        self.samples: list[Snapshot] = []
        self._client = httpx.AsyncClient(base_url=base_url, timeout=10.0)
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.samples.append(await scrape(self._client))
            except httpx.HTTPError:
                continue

    async def __aenter__(self) -> Sampler:
        self.before = await scrape(self._client)
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            self.after = await scrape(self._client)
        except httpx.HTTPError:
            self.after = None
        await self._client.aclose()

    def summary(self) -> ServerMetrics | None:
        """The window's :class:`ServerMetrics`, or ``None`` if the final scrape failed."""
        if self.before is None or self.after is None:
            return None
        return summarize_window(self.before, self.after, self.samples, self.interval_s)

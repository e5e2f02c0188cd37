"""Derived metrics: per-request TTFT/TPOT/ITL/E2EL and the run summary.

Pure functions over :class:`~vllm_course.records.RequestRecord` (no I/O). The formulas follow
``vllm bench serve`` (``vllm/benchmarks/serve.py`` ``calculate_metrics`` and
``vllm/benchmarks/lib/endpoint_request_func.py``) except for the deliberate deviations that
:func:`summarize` lists in :attr:`RunSummary.deviations`:

* TTFT ends at the first chunk that carries generated tokens, not at the empty role-only chunk
  that the chat endpoint sends first (vLLM starts TTFT there, which pushes the rest of prefill
  into the first ITL sample, vllm#15106).
* Failed requests stay in the record and count as not good in goodput.
* The peak output rate counts every token of a chunk; vLLM's count (one per chunk, vllm#37666)
  is kept as ``peak_output_tok_s_per_chunk``.

Record times are seconds since the run start (t=0); summaries report latencies in ms.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from vllm_course.config import SLO
from vllm_course.records import RequestRecord

_QUANTILES = (50.0, 90.0, 95.0, 99.0)
_ERROR_CHARS = 200
_NO_TOKENS = "no generated tokens received"

DEV_TTFT = (
    "TTFT ends at the first chunk that carries generated tokens; vllm bench serve ends it at the "
    "first chunk with non-empty choices, which on the chat endpoint is the empty role-only chunk "
    "(so our first ITL sample does not hold the rest of prefill, and ITL samples only "
    "token-carrying chunks)."
)
DEV_GOODPUT = (
    "Failed requests count as not good in goodput and stay in the record (failed, errors); "
    "vllm bench serve drops them, and since its goodput also counts only completed requests the "
    "numerator is the same."
)
DEV_PEAK = (
    "peak_output_tok_s counts every token of a chunk in 1-second buckets from the run start; "
    "vllm bench serve counts one per chunk from the first request's start (vllm#37666), which is "
    "kept as peak_output_tok_s_per_chunk and max_output_tokens_per_s."
)
DEV_CHUNKS = "output tokens counted from chunks, server sent no per-chunk usage"


class Dist(BaseModel):
    """Summary statistics of one sample.

    Units are whatever the input is (ms in :class:`RunSummary`). Percentiles use
    ``np.percentile(..., method="linear")`` and ``std`` is the population standard deviation
    (``np.std``), as ``vllm bench serve`` computes them. All statistics are ``None`` when
    ``n == 0``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        """Summarise ``values`` (any unit; the result has the same unit)."""
        arr = np.asarray(list(values), dtype=float)
        if arr.size == 0:
            return cls(n=0)
        p50, p90, p95, p99 = (float(x) for x in np.percentile(arr, _QUANTILES, method="linear"))
        return cls(
            n=int(arr.size),
            mean=float(np.mean(arr)),
            std=float(np.std(arr)),
            min=float(np.min(arr)),
            p50=p50,
            p90=p90,
            p95=p95,
            p99=p99,
            max=float(np.max(arr)),
        )


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) with linear interpolation, as ``np.percentile``.

    Raises:
        ValueError: if ``values`` is empty.
    """
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise ValueError("percentile of an empty sequence")
    return float(np.percentile(arr, p, method="linear"))


def ttft_s(r: RequestRecord) -> float | None:
    """Time to first token in seconds: first token-carrying chunk minus ``sent_s``.

    As ``vllm/benchmarks/lib/endpoint_request_func.py`` computes TTFT, except that the empty
    role-only chunk of the chat endpoint (``r.role_chunk_s``) does not end it: vLLM stops the
    clock at the first chunk with non-empty ``choices``, role chunk included. ``None`` if the
    request did not succeed.
    """
    if not r.success or r.sent_s is None:
        return None
    return r.chunk_s[0] - r.sent_s


def e2el_s(r: RequestRecord) -> float | None:
    """End-to-end latency in seconds: last chunk with non-empty choices minus ``sent_s``.

    As ``vllm/benchmarks/lib/endpoint_request_func.py`` computes ``latency`` (the usage-only
    chunk and ``[DONE]`` are not included). Falls back to the last token-carrying chunk if
    ``last_choice_s`` is missing. ``None`` if the request did not succeed.
    """
    if not r.success or r.sent_s is None:
        return None
    last = r.last_choice_s if r.last_choice_s is not None else r.chunk_s[-1]
    return last - r.sent_s


def tpot_s(r: RequestRecord) -> float | None:
    """Time per output token excluding the first, in seconds: ``(e2el - ttft)/(output_tokens - 1)``.

    As ``vllm/benchmarks/serve.py`` (``calculate_metrics``) computes TPOT. ``None`` if the request
    did not succeed or produced at most one token.
    """
    ttft, e2el = ttft_s(r), e2el_s(r)
    if ttft is None or e2el is None or r.output_tokens <= 1:
        return None
    return (e2el - ttft) / (r.output_tokens - 1)


def itl_s(r: RequestRecord) -> list[float]:
    """Inter-token latencies in seconds: gaps between consecutive token-carrying chunks.

    As ``vllm/benchmarks/lib/endpoint_request_func.py`` computes ITL: one sample per chunk, not
    per token, and never the TTFT. ``[]`` if the request did not succeed.
    """
    if not r.success:
        return []
    return [b - a for a, b in zip(r.chunk_s[:-1], r.chunk_s[1:], strict=True)]


class RunSummary(BaseModel):
    """Aggregate metrics of one run (units in the field names; latency distributions in ms).

    Attributes:
        num_requests: measured (non-warmup) requests.
        completed: measured requests that succeeded.
        failed: measured requests that did not.
        duration_s: the run's duration in seconds (run start is t=0).
        total_input_tokens: sum of the server's ``prompt_tokens`` over completed requests.
        total_output_tokens: sum of ``output_tokens`` over completed requests.
        request_throughput_rps: ``completed / duration_s``.
        output_throughput_tok_s: ``total_output_tokens / duration_s``.
        total_throughput_tok_s: ``(total_input_tokens + total_output_tokens) / duration_s``.
        peak_output_tok_s: the largest number of output tokens that arrived in one 1-second
            bucket (``floor(chunk time)``) of completed requests, counting each chunk's tokens.
        peak_output_tok_s_per_chunk: the same buckets counting one per chunk, as vLLM does.
        ttft_ms, tpot_ms, itl_ms, e2el_ms: latency distributions of completed requests (ITL is
            pooled over requests; TPOT leaves out requests with at most one output token).
        client_queue_ms: ``sent_s - scheduled_s`` of completed requests.
        slo: the SLO used for goodput, if any.
        good_requests: completed requests that met every given SLO (``None`` without an SLO).
        goodput_rps: ``good_requests / duration_s`` (``None`` without an SLO).
        token_count_source: ``"continuous_usage"``, ``"chunks"`` or ``"mixed"``.
        deviations: each deliberate deviation from ``vllm bench serve``, as a sentence.
        errors: error message (first 200 characters) -> number of failed requests.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_requests: int
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput_rps: float
    output_throughput_tok_s: float
    total_throughput_tok_s: float
    peak_output_tok_s: float
    peak_output_tok_s_per_chunk: float
    ttft_ms: Dist
    tpot_ms: Dist
    itl_ms: Dist
    e2el_ms: Dist
    client_queue_ms: Dist
    slo: SLO | None = None
    good_requests: int | None = None
    goodput_rps: float | None = None
    token_count_source: str
    deviations: list[str]
    errors: dict[str, int]

    def to_vllm_keys(self) -> dict[str, float | int]:
        """The metrics under the key names of ``vllm bench serve --save-result`` JSON.

        ``max_output_tokens_per_s`` is the per-chunk peak, as vLLM counts it. An empty
        distribution gives 0.0 for its keys (vLLM's ``np.mean(ttfts or 0)``).
        ``request_goodput`` is present only when an SLO was given.
        """
        out: dict[str, float | int] = {
            "duration": self.duration_s,
            "completed": self.completed,
            "failed": self.failed,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput_rps,
        }
        if self.slo is not None and self.goodput_rps is not None:
            out["request_goodput"] = self.goodput_rps
        out["output_throughput"] = self.output_throughput_tok_s
        out["total_token_throughput"] = self.total_throughput_tok_s
        out["max_output_tokens_per_s"] = self.peak_output_tok_s_per_chunk
        dists = {
            "ttft": self.ttft_ms,
            "tpot": self.tpot_ms,
            "itl": self.itl_ms,
            "e2el": self.e2el_ms,
        }
        for name, d in dists.items():
            for key, value in (
                ("mean", d.mean),
                ("median", d.p50),
                ("std", d.std),
                ("p90", d.p90),
                ("p95", d.p95),
                ("p99", d.p99),
            ):
                out[f"{key}_{name}_ms"] = 0.0 if value is None else value
        return out


def _ms(values: Iterable[float | None]) -> list[float]:
    return [v * 1000.0 for v in values if v is not None]


def _peaks(completed: Sequence[RequestRecord]) -> tuple[float, float]:
    """(per-token, per-chunk) peak output rate over 1-second buckets, in tokens/s."""
    tokens: Counter[int] = Counter()
    chunks: Counter[int] = Counter()
    for r in completed:
        counts = r.chunk_tokens if len(r.chunk_tokens) == len(r.chunk_s) else [1] * len(r.chunk_s)
        for t, k in zip(r.chunk_s, counts, strict=True):
            bucket = math.floor(t)
            tokens[bucket] += k
            chunks[bucket] += 1
    return float(max(tokens.values(), default=0)), float(max(chunks.values(), default=0))


def _is_good(r: RequestRecord, slo: SLO) -> bool:
    """True if a completed request meets every SLO given (1-token outputs pass the TPOT check)."""
    checks = ((slo.ttft_ms, ttft_s(r)), (slo.e2el_ms, e2el_s(r)))
    for limit, value in checks:
        if limit is not None and (value is None or value * 1000.0 > limit):
            return False
    tpot = tpot_s(r)
    return slo.tpot_ms is None or tpot is None or tpot * 1000.0 <= slo.tpot_ms


def _token_source(completed: Sequence[RequestRecord], measured: Sequence[RequestRecord]) -> str:
    sources = {r.token_count_source for r in (completed or measured)}
    return sources.pop() if len(sources) == 1 else "mixed"


def _default_duration(measured: Sequence[RequestRecord]) -> float:
    ends = [r.end_s if r.end_s is not None else r.last_choice_s for r in measured]
    known = [e for e in ends if e is not None]
    if not known:
        raise ValueError(
            "cannot infer the run duration: no measured record has end_s or "
            "last_choice_s; pass duration_s"
        )
    return max(known)


def _prompt_tokens(r: RequestRecord) -> int:
    if r.prompt_tokens is not None:
        return r.prompt_tokens
    return r.prompt_len or 0


def summarize(
    records: Iterable[RequestRecord], slo: SLO | None = None, duration_s: float | None = None
) -> RunSummary:
    """Summarise a run as ``vllm bench serve`` does, with the deviations listed in the result.

    Warmup records are ignored. Failed requests count in ``failed`` and ``errors``, are left out
    of every latency distribution, of token totals and of the peak rate, and are never good.

    Args:
        records: the run's request records (times in s since the run start).
        slo: per-request SLOs in ms for goodput; ``None`` for no goodput.
        duration_s: the run's duration in seconds; defaults to the latest ``end_s`` (or
            ``last_choice_s``) of the measured records.

    Returns:
        The :class:`RunSummary`.

    Raises:
        ValueError: if there are no measured (non-warmup) records, the duration cannot be
            inferred, or it is not positive.
    """
    measured = [r for r in records if not r.warmup]
    if not measured:
        raise ValueError("no measured requests to summarise (all records are warmup or none)")
    duration = _default_duration(measured) if duration_s is None else float(duration_s)
    if not duration > 0:
        raise ValueError(f"run duration must be > 0 s, got {duration}")

    completed = [r for r in measured if r.success]
    failed = [r for r in measured if not r.success]
    errors = Counter((r.error or _NO_TOKENS)[:_ERROR_CHARS] for r in failed)
    input_tokens = sum(_prompt_tokens(r) for r in completed)
    output_tokens = sum(r.output_tokens for r in completed)
    peak_tok, peak_chunk = _peaks(completed)
    source = _token_source(completed, measured)

    good = None if slo is None else sum(_is_good(r, slo) for r in completed)
    deviations = [DEV_TTFT, DEV_GOODPUT, DEV_PEAK]
    if source != "continuous_usage":
        deviations.append(DEV_CHUNKS)

    return RunSummary(
        num_requests=len(measured),
        completed=len(completed),
        failed=len(failed),
        duration_s=duration,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        request_throughput_rps=len(completed) / duration,
        output_throughput_tok_s=output_tokens / duration,
        total_throughput_tok_s=(input_tokens + output_tokens) / duration,
        peak_output_tok_s=peak_tok,
        peak_output_tok_s_per_chunk=peak_chunk,
        ttft_ms=Dist.of(_ms(ttft_s(r) for r in completed)),
        tpot_ms=Dist.of(_ms(tpot_s(r) for r in completed)),
        itl_ms=Dist.of(_ms(x for r in completed for x in itl_s(r))),
        e2el_ms=Dist.of(_ms(e2el_s(r) for r in completed)),
        client_queue_ms=Dist.of(
            _ms(r.sent_s - r.scheduled_s for r in completed if r.sent_s is not None)
        ),
        slo=slo,
        good_requests=good,
        goodput_rps=None if good is None else good / duration,
        token_count_source=source,
        deviations=deviations,
        errors=dict(errors),
    )

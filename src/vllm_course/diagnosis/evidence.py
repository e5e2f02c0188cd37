"""The numbers the rules read, gathered once from a saved run (:class:`_Run`), and their
formatting."""

from __future__ import annotations

from pathlib import Path

from vllm_course.diagnosis.thresholds import QUEUE_WAIT_MS
from vllm_course.records import RequestRecord
from vllm_course.results import RunResult


def _fmt(v: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "n/a" if v is None else f"{format(v, spec)}{unit}"


class _Run:
    """The numbers the rules read, gathered once from a :class:`RunResult`."""

    def __init__(self, result: RunResult):
        self.result = result
        self.s = result.summary
        self.m = result.server_metrics
        self.c = result.client
        self.facts = result.startup
        # vLLM's CPU build: no GPU knobs, no fp8 weights under the CPU profile's float32
        self.cpu = (result.env or {}).get("vllm_build") == "cpu"
        self.records = _records(result)
        self.completed = [r for r in self.records if r.success and not r.warmup]
        series = result.timeseries() if result.path else None
        duration = self.s.duration_s if self.s else None
        # the in-run samples: between the run's start and its end
        self.points = [
            p for p in (series.points if series else [])
            if p.t_s >= 0 and (duration is None or p.t_s <= duration)
        ]
        self.max_num_seqs = self.facts.max_num_seqs
        self.budget = self.facts.max_num_batched_tokens

    def metric(self, name: str) -> float | None:
        return None if self.m is None else getattr(self.m, name)

    def server_ms(self, hist: str, stat: str) -> float | None:
        if self.m is None or hist not in self.m.latency_ms:
            return None
        return getattr(self.m.latency_ms[hist], stat)

    def queued(self) -> bool:
        """Whether requests waited in the server's queue: a sample saw one waiting, or their
        mean queue time (server histogram) reached :data:`QUEUE_WAIT_MS`."""
        queue_ms = self.server_ms("queue", "mean")
        return bool(self.metric("num_requests_waiting_peak")) or (
            queue_ms is not None and queue_ms >= QUEUE_WAIT_MS)

    def mean_prompt(self) -> float | None:
        if not self.s or not self.s.completed:
            return None
        return self.s.total_input_tokens / self.s.completed

    def context(self) -> str:
        """One line of server context: batch, queue, KV cache."""
        running, waiting = self.metric("running_time_avg"), self.metric("waiting_time_avg")
        averages = None if running is None or waiting is None else (
            f"on average {running:.2f} running (max_num_seqs {_fmt(self.max_num_seqs)}) and "
            f"{waiting:.2f} waiting (Little's law over the server's request times)"
        )
        kv = f"KV cache peak {_fmt(_pct(self.metric('kv_cache_usage_peak')), '.1f', '%')}"
        if self.m is not None and not self.m.samples:
            return (f"{averages or 'running and waiting unknown'}; no /metrics sample fell "
                    "inside the run: sampled peaks and KV cache usage unknown")
        if averages:
            return (f"{averages}; sampled peaks: running "
                    f"{_fmt(self.metric('num_requests_running_peak'))}, waiting "
                    f"{_fmt(self.metric('num_requests_waiting_peak'))}; {kv}")
        return (
            f"running mean {_fmt(self.metric('num_requests_running_mean'), '.1f')} "
            f"(peak {_fmt(self.metric('num_requests_running_peak'))}) of max_num_seqs "
            f"{_fmt(self.max_num_seqs)}; waiting peak "
            f"{_fmt(self.metric('num_requests_waiting_peak'))}; {kv}"
        )


def _pct(v: float | None) -> float | None:
    return None if v is None else 100.0 * v


def _records(result: RunResult) -> list[RequestRecord]:
    if result.path is None or not (Path(result.path) / "requests.jsonl").exists():
        return []
    return result.records()

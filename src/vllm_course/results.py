"""RunResult: everything one run produced, saved as ``results/<run>/`` and loaded back.

Files in a run folder:

* ``summary.json``: this model (config, summary, server metrics, startup facts, checks, env);
* ``requests.jsonl``: one :class:`~vllm_course.records.RequestRecord` per line, written as
  requests finish (so an interrupted run keeps what it measured);
* ``server.log``: the vLLM server's log;
* ``latency.png``: TTFT / TPOT / E2EL distributions.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_course.config import RunConfig
from vllm_course.loadgen.selfcheck import ClientChecks
from vllm_course.metrics import RunSummary
from vllm_course.prom import ServerMetrics, TimeSeries
from vllm_course.records import RequestRecord
from vllm_course.server.startup import StartupFacts

SCHEMA_VERSION = 1

TTFT_GAP_MS = 100.0
"""Client mean TTFT this much (ms) above the server's, and by over 50 %, gets a warning (below
that, sporadic OS stalls of a small machine move the client's mean by tens of ms)."""


class Checks(BaseModel):
    """Cross-checks between what the client saw and what the server counted.

    Attributes:
        client_output_tokens: tokens the client received (all measured requests).
        server_generation_tokens: Δ ``vllm:generation_tokens_total`` over the run window.
        prompt_len_mismatches: requests whose ``usage.prompt_tokens`` differs from the length
            the workload asked for.
        client_ttft_mean_ms: mean TTFT of the completed measured requests, as the client saw it.
        server_ttft_mean_ms: mean of the server's ``vllm:time_to_first_token_seconds`` over the
            run window (from the API server's arrival time: no network, no client queue).
        ttft_gap_ms: client minus server mean TTFT; above :data:`TTFT_GAP_MS` (and half of
            the server's mean) it points to queueing in the client or on the network path.
        warnings: sentences for a person; empty when everything agrees.
    """

    model_config = ConfigDict(frozen=True)
    client_output_tokens: int
    server_generation_tokens: float | None = None
    prompt_len_mismatches: int = 0
    client_ttft_mean_ms: float | None = None
    server_ttft_mean_ms: float | None = None
    ttft_gap_ms: float | None = None
    warnings: list[str] = Field(default_factory=list)


HTML_ROWS: list[Callable[[RunResult], tuple[str, str] | None]] = []
"""Extra ``(label, value)`` rows for a run's HTML table, registered by the layers above that read
runs (``vllm_course.diagnosis`` adds its verdict): a result shows them without importing them,
so the dependency stays one way. A row that raises ``OSError`` or ``ValueError`` is left out."""


class RunResult(BaseModel):
    """One run's results (``summary.json``)."""

    model_config = ConfigDict(frozen=True)
    schema_version: int = SCHEMA_VERSION
    name: str
    created_at: str
    config: RunConfig
    summary: RunSummary | None
    server_metrics: ServerMetrics | None = None
    startup: StartupFacts = Field(default_factory=StartupFacts)
    checks: Checks | None = None
    client: ClientChecks | None = None
    env: dict[str, Any] = Field(default_factory=dict)
    vllm_bench_keys: dict[str, float | int] = Field(default_factory=dict)
    stopped_early: str | None = None
    path: str | None = None

    def save(self, run_dir: str | Path) -> Path:
        """Write ``summary.json`` into ``run_dir``; returns its path."""
        path = Path(run_dir) / "summary.json"
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def load(cls, run_dir: str | Path) -> RunResult:
        """Read a run folder's ``summary.json``.

        Raises:
            FileNotFoundError: if the folder has no ``summary.json``.
        """
        data = json.loads((Path(run_dir) / "summary.json").read_text())
        data["path"] = str(run_dir)
        return cls.model_validate(data)

    def records(self) -> list[RequestRecord]:
        """The per-request records saved beside this result."""
        if self.path is None:
            raise ValueError("this result was not loaded from or saved to a folder")
        return read_records(Path(self.path) / "requests.jsonl")

    def timeseries(self) -> TimeSeries:
        """The server time series saved beside this result (``timeseries.json``); empty if the
        run has none (e.g. it was saved before time series existed)."""
        if self.path is None:
            raise ValueError("this result was not loaded from or saved to a folder")
        path = Path(self.path) / "timeseries.json"
        if not path.exists():
            return TimeSeries()
        return TimeSeries.model_validate_json(path.read_text())

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for the one-screen report."""
        if self.summary is None:
            return [("status", self.stopped_early or "no summary")]
        out = _client_rows(self.summary) + _server_rows(self.server_metrics, self.client)
        if self.startup.kv_cache_tokens:
            out.append(("KV cache", f"{self.startup.kv_cache_tokens:,} tokens "
                                    f"(vLLM {self.startup.vllm_version})"))
        out += [("warning", w) for w in (self.checks.warnings if self.checks else [])]
        if self.stopped_early:
            out.append(("stopped early", self.stopped_early))
        return out

    def report(self) -> str:
        """A plain-text, one-screen report."""
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        head = f"Run {self.name}" + (f"  ({self.path})" if self.path else "")
        return "\n".join([head] + [f"  {k.ljust(width)}  {v}" for k, v in rows])

    def compact(self) -> list[tuple[str, str]]:
        """The few numbers a notebook shows for a run: (label, value) pairs."""
        s, m = self.summary, self.server_metrics
        if s is None:
            return [("status", self.stopped_early or "no summary")]

        def ms(v: float | None) -> str:
            return "n/a" if v is None else f"{v:,.1f}"

        rows = [
            ("requests", f"{s.completed}/{s.num_requests} in {s.duration_s:.1f} s"),
            ("output tok/s", f"{s.output_throughput_tok_s:,.0f}"),
            ("TTFT P50 / P99 ms", f"{ms(s.ttft_ms.p50)} / {ms(s.ttft_ms.p99)}"),
            ("TPOT P50 / P99 ms", f"{ms(s.tpot_ms.p50)} / {ms(s.tpot_ms.p99)}"),
        ]
        if s.goodput_rps is not None:
            rows.append(("goodput req/s", f"{s.goodput_rps:.2f} ({s.good_requests} good)"))
        if m is not None:
            kv = "n/a" if m.kv_cache_usage_peak is None else f"{m.kv_cache_usage_peak:.0%}"
            rows.append(("KV peak / preemptions", f"{kv} / {m.preemptions or 0:.0f}"))
        if self.checks and self.checks.warnings:
            rows.append(("warnings", str(len(self.checks.warnings))))
        return rows

    def _repr_html_(self) -> str:
        rows = self.compact()
        for extra in HTML_ROWS:
            try:
                row = extra(self)
            except (OSError, ValueError):
                row = None
            if row is not None:
                rows.append(row)
        head = "".join(f"<th>{html.escape(k)}</th>" for k, _ in rows)
        cells = "".join(f"<td>{html.escape(v)}</td>" for _, v in rows)
        return (f"<b>Run {html.escape(self.name)}</b> <small>{html.escape(self.path or '')}</small>"
                f"<table><tr>{head}</tr><tr>{cells}</tr></table>")


def _num(v: float | None, fmt: str = ".0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _client_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The report's rows on what the client measured."""
    out = [
        ("requests", f"{s.completed} completed, {s.failed} failed, in {s.duration_s:.1f} s"),
        ("throughput", f"{s.request_throughput_rps:.2f} req/s, {s.output_throughput_tok_s:,.0f} "
                       f"output tok/s, {s.total_throughput_tok_s:,.0f} total tok/s"),
        ("peak output", f"{s.peak_output_tok_s:,.0f} tok/s (1-s buckets)"),
    ]
    for label, dist in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("ITL", s.itl_ms),
                        ("E2EL", s.e2el_ms)):
        if dist.n:
            out.append((f"{label} ms", f"mean {dist.mean:.1f}  P50 {dist.p50:.1f}  "
                                       f"P90 {dist.p90:.1f}  P99 {dist.p99:.1f}  (n={dist.n})"))
    for error, count in sorted(s.errors.items(), key=lambda kv: -kv[1])[:3]:
        out.append(("failed", f"{count} x {error}"))
    if s.goodput_rps is not None:
        out.append(("goodput", f"{s.goodput_rps:.2f} req/s ({s.good_requests} of "
                               f"{s.num_requests} requests met the SLO)"))
    return out


def _server_rows(m: ServerMetrics | None, c: ClientChecks | None) -> list[tuple[str, str]]:
    """The report's rows on the server's metrics and the client's self-checks."""
    out = []
    if m is not None:
        out.append(("server", f"peak running {_num(m.num_requests_running_peak)}, waiting "
                              f"{_num(m.num_requests_waiting_peak)}, KV cache "
                              f"{_num(m.kv_cache_usage_peak, '.1%')}, preemptions "
                              f"{_num(m.preemptions)}, {_num(m.tokens_per_step_mean, '.1f')} "
                              "tokens/step"))
        ttft = m.latency_ms.get("ttft")
        if ttft is not None and ttft.count:
            out.append(("server TTFT", f"mean {_num(ttft.mean, '.1f')} ms, P99 ~"
                                       f"{_num(ttft.p99, '.0f')} ms (histogram buckets)"))
    if c is not None:
        procs = f" (busiest of {c.workers} processes)" if c.workers > 1 else ""
        out.append(("client", f"loop lag P90 {_num(c.loop_lag_ms.p90, '.1f')} ms, send lag "
                              f"P50 {_num(c.send_lag_ms.p50, '.1f')} ms, CPU "
                              f"{_num(c.cpu_cores, '.2f')} cores{procs}, "
                              f"{_num(c.cpu_us_per_token, '.1f')} µs/token, bunched "
                              f"{_num(c.bunched_share, '.1%')}"))
        out += [("note", note) for note in c.notes]
    return out


def read_records(path: str | Path) -> list[RequestRecord]:
    """Read ``requests.jsonl`` back into records, in workload order (``index``).

    The file is written as requests finish, so its line order is completion order.
    """
    with Path(path).open() as fh:
        records = [RequestRecord.from_dict(json.loads(line)) for line in fh if line.strip()]
    return sorted(records, key=lambda r: r.index)

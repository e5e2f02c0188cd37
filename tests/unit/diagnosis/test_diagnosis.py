"""``vllm_course.diagnosis``: each rule on hand-made runs saved to a folder, the report, the CLI.

Every run is a real :class:`RunResult` saved as a run folder (``summary.json``,
``requests.jsonl``, ``timeseries.json``) and loaded back, with hand-made server metrics, client
self-checks and startup facts chosen so that one rule fires. Times in the records are multiples
of 1/64 s so that latencies are exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import vllm_course
from vllm_course import metrics
from vllm_course.cli import main
from vllm_course.config import SLO, LoadSpec, RunConfig
from vllm_course.diagnosis import Diagnosis, Finding, diagnose
from vllm_course.diagnosis import rules as dg
from vllm_course.loadgen.selfcheck import ClientChecks, client_checks
from vllm_course.metrics import Dist
from vllm_course.prom import HistogramStats, ServerMetrics, TimePoint, TimeSeries
from vllm_course.records import RequestRecord
from vllm_course.results import Checks, RunResult

STARTUP = {
    "max_num_seqs": 8,
    "max_num_seqs_source": "default",
    "max_num_batched_tokens": 1000,
    "kv_cache_tokens": 50_000,
}
DURATION_S = 4.0
# the healthy run's server context line (see _server)
CONTEXT = "running mean 1.5 (peak 3) of max_num_seqs 8; waiting peak 0; KV cache peak 30.0%"


def _req(index: int, *, sent: float, ttft: float = 0.125, gap: float = 1 / 64, n: int = 9,
         prompt: int = 100, chunk_s: list[float] | None = None) -> RequestRecord:
    """A completed request: sent (and scheduled, dispatched) at ``sent``, ``n`` one-token chunks
    ``gap`` apart after ``ttft``, or at ``chunk_s``."""
    chunks = chunk_s if chunk_s is not None else [sent + ttft + gap * k for k in range(n)]
    return RequestRecord(
        index=index, prompt_len=prompt, max_tokens=len(chunks), scheduled_s=sent,
        dispatched_s=sent, sent_s=sent, chunk_s=chunks, chunk_tokens=[1] * len(chunks),
        last_choice_s=chunks[-1], end_s=chunks[-1] + 1 / 64, prompt_tokens=prompt,
        output_tokens=len(chunks), finish_reason="length",
    )


def _records(prompt: int = 100) -> list[RequestRecord]:
    """8 requests 0.25 s apart: TTFT 125 ms, 9 tokens 15.625 ms apart, E2EL 250 ms."""
    return [_req(i, sent=0.25 * i, prompt=prompt) for i in range(8)]


def _server(**kw) -> ServerMetrics:
    """A lightly loaded server; ``kw`` overrides fields."""
    base = dict(
        prompt_tokens=800.0, generation_tokens=72.0, preemptions=0.0,
        kv_cache_usage_peak=0.3, kv_cache_usage_mean=0.2,
        num_requests_running_peak=3.0, num_requests_running_mean=1.5,
        num_requests_waiting_peak=0.0, num_requests_waiting_mean=0.0,
        busy_fraction=0.6, engine_steps=80.0, tokens_per_step_mean=12.0,
        latency_ms={"queue": HistogramStats(count=8, mean=2.0),
                    "prefill": HistogramStats(count=8, mean=30.0)},
        samples=4, interval_s=1.0,
    )
    base.update(kw)
    return ServerMetrics(**base)


def _healthy_client(records: list[RequestRecord]) -> ClientChecks:
    return client_checks(records, [1.0] * 100, 0.2)


def _series(running: list[float], waiting: list[float] | None = None, *,
            telemetry: list[dict[str, float]] | None = None) -> TimeSeries:
    """One point per second from t=0, plus a scrape before the run (t=-0.5) and one long after
    its end (t=1000), both at 99 running / 99 waiting: outside the run, never counted."""
    waiting = waiting or [0.0] * len(running)
    telemetry = telemetry or [{} for _ in running]
    inside = [
        TimePoint(t_s=float(t), running=r, waiting=w, telemetry=tel)
        for t, (r, w, tel) in enumerate(zip(running, waiting, telemetry, strict=True))
    ]
    outside = dict(running=99.0, waiting=99.0)
    return TimeSeries(interval_s=1.0, points=[
        TimePoint(t_s=-0.5, **outside), *inside, TimePoint(t_s=1000.0, **outside)
    ])


_DEFAULT = object()


def _save(tmp_path: Path, name: str = "run", *, records: list[RequestRecord] | None = None,
          server: object = _DEFAULT, client: object = _DEFAULT, startup: dict | None = None,
          series: TimeSeries | None = None, load: LoadSpec | None = None, slo: SLO | None = None,
          checks: Checks | None = None, duration_s: float = DURATION_S,
          env: dict | None = None) -> RunResult:
    """Save a run folder ``tmp_path/name`` and load it back (so records and series are read)."""
    records = _records() if records is None else records
    result = RunResult(
        name=name,
        created_at="2026-01-02T03:04:05+00:00",
        config=RunConfig(name=name, load=load or LoadSpec(), slo=slo),
        summary=metrics.summarize(records, slo=slo, duration_s=duration_s),
        server_metrics=_server() if server is _DEFAULT else server,
        startup=dict(STARTUP if startup is None else startup),
        checks=checks,
        client=_healthy_client(records) if client is _DEFAULT else client,
        env=env or {},
    )
    run_dir = tmp_path / name
    run_dir.mkdir()
    result.save(run_dir)
    (run_dir / "requests.jsonl").write_text(
        "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    )
    if series is not None:
        (run_dir / "timeseries.json").write_text(series.model_dump_json())
    return RunResult.load(run_dir)


def _keys(d: Diagnosis) -> list[str]:
    return [f.key for f in d.findings]


# -- 1. client saturated --------------------------------------------------------------------


RULE = ("client CPU > 0.9 cores, or event-loop lag P90 > 20 ms, send lag P50 > 20 ms or bunched "
        "inter-token gaps > 5% with client CPU >= 0.5 cores (the busiest client process)")


def _lag_p50_line(p50: str) -> str:
    return (f"event-loop lag P50 {p50} ms; the server's own numbers (its TTFT histogram, its "
            "counters) do not include the client's delay")


def test_client_saturated_comes_first_with_its_numbers(tmp_path: Path) -> None:
    records = _records()
    busy = client_checks(records, [1.0] * 5 + [100.0] * 95, 0.6)
    run = _save(
        tmp_path, records=records, client=busy,
        server=_server(preemptions=3.0, kv_cache_usage_peak=0.95),   # KV exhausted too
        checks=Checks(client_output_tokens=72, client_ttft_mean_ms=400.0,
                      server_ttft_mean_ms=120.0, ttft_gap_ms=280.0),
    )
    d = diagnose(run)
    # a late client distorts every other number: it is named first, the rest follow
    assert _keys(d) == ["client_saturated", "kv_cache_exhausted"]
    f = d.primary
    assert (f.title, f.layer) == ("client saturated", "client")
    assert f.rule == RULE
    assert f.evidence == [
        "event-loop lag P90 100 ms > 20 ms (P99 100 ms, max 100 ms over 100 probes)",
        "client CPU 0.60 cores >= 0.5",
        _lag_p50_line("100.0"),
        "client mean TTFT 400 ms vs server 120 ms",
    ]
    assert f.knobs[0].startswith("spread the client over more processes: load.workers (now 1")


def test_client_saturated_by_cpu_and_send_lag(tmp_path: Path) -> None:
    # every request left 125 ms late; the client burnt 1.2 cores
    records = [
        RequestRecord(**{**r.to_dict(), "scheduled_s": r.sent_s - 0.125}) for r in _records()
    ]
    busy = client_checks(records, [], 1.2)
    d = diagnose(_save(tmp_path, records=records, client=busy))
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence == [
        "requests left late: send lag P50 125 ms > 20 ms (P90 125 ms over 8 requests)",
        "client CPU 1.20 cores > 0.9 (one Python thread is the limit)",
        _lag_p50_line("n/a"),   # no loop-lag probes; no cross-checks: no TTFT line
    ]


def test_a_late_but_idle_client_is_not_saturated(tmp_path: Path) -> None:
    # late sends and a late loop, but 0.3 cores: starved by other processes, a note only
    records = _records()
    starved = client_checks(records, [1.0] * 5 + [100.0] * 95, 0.3)
    assert not starved.saturated and len(starved.notes) == 1
    d = diagnose(_save(tmp_path, records=records, client=starved))
    assert _keys(d) == ["no_bottleneck"]


def test_an_slo_missed_without_any_limit_is_not_called_a_light_load(tmp_path: Path) -> None:
    # nothing queued and no limit hit, but TPOT 15.6 ms against a 10 ms limit: every request
    # missed (make demo on an AVX2-only laptop: 61 of 240 met, reported as "too light")
    missed = diagnose(_save(tmp_path, "missed", slo=SLO(tpot_ms=10.0)))
    (finding,) = missed.findings
    assert finding.key == "no_bottleneck" and finding.layer == "none"
    assert finding.title == ("no limit hit, yet 8 of 8 requests missed the SLO (nothing "
                             "queued: the time went to the engine's steps)")
    assert "0 of 8 requests met the SLO" in finding.evidence
    assert "concurrency 1" in finding.knobs[0]
    assert "--quantization fp8" in finding.knobs[1]
    # on vLLM's CPU build fp8 weights are not offered (vLLM refuses them under float32)
    cpu = diagnose(_save(tmp_path, "cpu", slo=SLO(tpot_ms=10.0), env={"vllm_build": "cpu"}))
    assert "fp8" not in cpu.findings[0].knobs[1] and "a GPU" in cpu.findings[0].knobs[1]
    # the same run against an SLO it met: a light load, as before
    met = diagnose(_save(tmp_path, "met", slo=SLO(tpot_ms=20.0))).findings[0]
    assert met.title == "no bottleneck: the load was too light"


def test_sporadic_stalls_alone_are_not_a_saturated_client(tmp_path: Path) -> None:
    records = _records()
    stalled = client_checks(records, [1.0] * 95 + [300.0] * 5, 0.2)
    assert not stalled.saturated and len(stalled.notes) == 1
    d = diagnose(_save(tmp_path, records=records, client=stalled))
    assert _keys(d) == ["no_bottleneck"]


LOOP_REASON = "event-loop lag P90 100 ms > 20 ms (P99 100 ms, max 100 ms over 100 probes)"


def test_a_late_client_without_a_cpu_measurement_is_saturated(tmp_path: Path) -> None:
    records = _records()
    late = client_checks(records, [1.0] * 5 + [100.0] * 95, None)
    d = diagnose(_save(tmp_path, records=records, client=late))
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence == [LOOP_REASON, _lag_p50_line("100.0")]   # no CPU to quote


def test_client_saturated_compares_client_and_server_tpot(tmp_path: Path) -> None:
    records = _records()
    latency = {"queue": HistogramStats(count=8, mean=2.0),
               "prefill": HistogramStats(count=8, mean=30.0),
               "tpot": HistogramStats(count=8, mean=9.84)}
    run = _save(
        tmp_path, records=records, client=client_checks(records, [1.0] * 5 + [100.0] * 95, 0.6),
        server=_server(latency_ms=latency),
        checks=Checks(client_output_tokens=72, client_ttft_mean_ms=400.0,
                      server_ttft_mean_ms=120.0, ttft_gap_ms=280.0),
    )
    assert run.summary.tpot_ms.mean == 15.625   # 8 gaps of 1/64 s after the first token
    d = diagnose(run)
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence == [
        LOOP_REASON,
        "client CPU 0.60 cores >= 0.5",
        _lag_p50_line("100.0"),
        "client mean TPOT 15.6 ms vs the server's 9.8 ms "
        "(vllm:request_time_per_output_token_seconds)",
        "client mean TTFT 400 ms vs server 120 ms",
    ]


def test_client_tpot_line_needs_the_servers_tpot_mean(tmp_path: Path) -> None:
    records = _records()
    latency = {"tpot": HistogramStats(count=0)}   # the histogram without a mean
    run = _save(tmp_path, records=records, server=_server(latency_ms=latency),
                client=client_checks(records, [1.0] * 5 + [100.0] * 95, 0.6))
    d = diagnose(run)
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence == [LOOP_REASON, "client CPU 0.60 cores >= 0.5",
                                  _lag_p50_line("100.0")]


def _stored(send_ms: list[float], *, saturated: bool, reasons: list[str],
            cpu: float | None = 0.6) -> ClientChecks:
    """Self-checks as a summary.json saved them (possibly under older thresholds)."""
    return ClientChecks(loop_lag_ms=Dist.of([1.0] * 100), send_lag_ms=Dist.of(send_ms),
                        slot_wait_ms=Dist.of([0.0] * len(send_ms)), cpu_cores=cpu,
                        saturated=saturated, reasons=reasons)


def test_diagnose_re_judges_a_saved_saturated_verdict(tmp_path: Path) -> None:
    # saved as saturated, but its numbers are benign under the current thresholds
    stored = _stored([0.0] * 8, saturated=True, reasons=["an old rule's reason"])
    run = _save(tmp_path, client=stored)
    assert run.client.saturated and run.client.reasons == ["an old rule's reason"]
    d = diagnose(run)
    assert _keys(d) == ["no_bottleneck"]
    assert all("old rule" not in e for f in d.findings for e in f.evidence)


def test_diagnose_re_judges_a_saved_unsaturated_verdict(tmp_path: Path) -> None:
    # saved as fine, but its sends were 125 ms late from a busy client: saturated now
    stored = _stored([125.0] * 8, saturated=False, reasons=[])
    d = diagnose(_save(tmp_path, client=stored))
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence == [
        "requests left late: send lag P50 125 ms > 20 ms (P90 125 ms over 8 requests)",
        "client CPU 0.60 cores >= 0.5",
        _lag_p50_line("1.0"),
    ]


def test_diagnose_judges_send_lag_against_the_runs_mean_ttft(tmp_path: Path) -> None:
    # the H200 burst: send lag P50 721 ms, saved as saturated under the 20 ms rule
    old = ["requests left late: send lag P50 721 ms > 20 ms (P90 721 ms; 8 of 8 requests > 20 ms)",
           "client CPU 0.60 cores >= 0.5"]
    stored = _stored([721.0] * 8, saturated=True, reasons=old)
    # first tokens 8 s after sending: 721 ms is under 10 % of the mean TTFT (800 ms)
    slow = [_req(i, sent=0.25 * i, ttft=8.0) for i in range(8)]
    queued = _save(tmp_path, "queued", records=slow, client=stored, duration_s=10.0)
    assert queued.summary.ttft_ms.mean == 8000.0
    assert _keys(diagnose(queued)) == ["no_bottleneck"]
    # the same sends with a 125 ms mean TTFT: over the 20 ms floor
    quick = _save(tmp_path, "quick", client=stored)
    d = diagnose(quick)
    assert _keys(d) == ["client_saturated"]
    assert d.primary.evidence[:2] == [
        "requests left late: send lag P50 721 ms > 20 ms (P90 721 ms over 8 requests)",
        "client CPU 0.60 cores >= 0.5",
    ]


# -- 2. KV cache exhausted ------------------------------------------------------------------


def test_kv_cache_exhausted(tmp_path: Path) -> None:
    run = _save(tmp_path, server=_server(preemptions=3.0, kv_cache_usage_peak=0.9,
                                         kv_cache_usage_mean=0.7))
    d = diagnose(run)
    assert _keys(d) == ["kv_cache_exhausted"]
    f = d.primary
    assert (f.title, f.layer) == ("KV cache exhausted", "memory")
    assert f.rule == ("preemptions > 0 (V1 preempts only when a running request finds no free "
                      "KV block)")
    assert f.evidence == [
        "3 preemptions (Δvllm:num_preemptions_total); each one frees the request's blocks and "
        "recomputes it from scratch later (V1 preempts by recompute, never swap)",
        "KV cache usage peak 90.0%, mean 70.0% (sampled); KV cache 50,000 tokens",
        "running mean 1.5 (peak 3) of max_num_seqs 8; waiting peak 0; KV cache peak 90.0%",
    ]
    assert any("--gpu-memory-utilization" in k for k in f.knobs)
    assert any("GPUs (-tp)" in k for k in f.knobs)


def test_a_cpu_build_run_gets_no_gpu_knobs(tmp_path: Path) -> None:
    # vLLM's CPU build sizes its KV cache from --kv-cache-memory-bytes, has no GPUs to add, and
    # refuses fp8 weights under the CPU profile's float32
    run = _save(tmp_path, server=_server(preemptions=3.0, kv_cache_usage_peak=0.9,
                                         kv_cache_usage_mean=0.7),
                env={"vllm_build": "cpu"})
    knobs = " ".join(diagnose(run).primary.knobs)
    assert "--kv-cache-memory-bytes (vLLM's CPU build sizes its KV cache" in knobs
    assert "AVX-512 or AMX" in knobs
    assert "--gpu-memory-utilization" not in knobs and "-tp" not in knobs


@pytest.mark.parametrize(
    ("preemptions", "peak", "fires"),
    [
        (1.0, 0.9, True),      # a preemption and a full sample
        (1.0, 0.5, True),      # the samples missed the full moments: the counter still proves it
        (5.0, None, True),     # KV usage not sampled
        (0.0, 0.99, False),    # a full cache without preemptions: nothing was evicted
        (None, 0.99, False),   # preemptions not exposed
    ],
)
def test_kv_cache_exhausted_needs_a_preemption(
    tmp_path: Path, preemptions: float | None, peak: float | None, fires: bool
) -> None:
    d = diagnose(_save(tmp_path, server=_server(preemptions=preemptions, kv_cache_usage_peak=peak)))
    assert _keys(d) == (["kv_cache_exhausted"] if fires else ["no_bottleneck"])


def test_kv_cache_exhausted_without_an_in_run_sample(tmp_path: Path) -> None:
    server = _server(preemptions=4.0, kv_cache_usage_peak=None, kv_cache_usage_mean=None,
                     num_requests_running_peak=None, num_requests_waiting_peak=None,
                     running_time_avg=2.5, waiting_time_avg=1.25, samples=0)
    d = diagnose(_save(tmp_path, server=server))
    assert _keys(d) == ["kv_cache_exhausted"]
    assert d.primary.evidence[1:] == [
        "KV cache usage was not sampled during the run; KV cache 50,000 tokens",
        "on average 2.50 running (max_num_seqs 8) and 1.25 waiting (Little's law over the "
        "server's request times); no /metrics sample fell inside the run: sampled peaks and KV "
        "cache usage unknown",
    ]


def test_compute_bound_is_dropped_under_a_memory_limit(tmp_path: Path) -> None:
    server = _server(preemptions=2.0, kv_cache_usage_peak=0.97, busy_fraction=1.0,
                     num_requests_waiting_peak=6.0, num_requests_waiting_mean=3.0)
    assert _keys(diagnose(_save(tmp_path, server=server))) == ["kv_cache_exhausted"]


# -- 3. step token budget saturated ---------------------------------------------------------


def test_token_budget_saturated(tmp_path: Path) -> None:
    server = _server(tokens_per_step_mean=800.0, num_requests_waiting_peak=2.0)
    d = diagnose(_save(tmp_path, records=_records(prompt=2500), server=server))
    assert _keys(d) == ["token_budget_saturated"]
    f = d.primary
    assert (f.title, f.layer) == ("step token budget saturated (max_num_batched_tokens)",
                                  "scheduling")
    assert f.rule == ("mean tokens per step >= 80% of max_num_batched_tokens, requests queued "
                      "(a sample saw one waiting, or queue time mean >= 50 ms)")
    assert f.evidence == [
        "mean 800.0 tokens per engine step (Δvllm:iteration_tokens_total sum/count) against "
        "max_num_batched_tokens 1000; prompts average 2500 tokens, so each needs >= 3 steps of "
        "prefill",
        "TTFT P99 125 ms (server queue time mean 2 ms, prefill mean 30 ms)",
        "running mean 1.5 (peak 3) of max_num_seqs 8; waiting peak 2; KV cache peak 30.0%",
    ]


@pytest.mark.parametrize(
    ("per_step", "waiting_peak", "budget", "fires"),
    [
        (800.0, 1.0, 1000, True),     # exactly 0.8 x the budget
        (799.9, 1.0, 1000, False),    # just under
        (1000.0, 0.0, 1000, False),   # the budget is used but nothing waited
        (1000.0, None, 1000, False),  # waiting not exposed
        (1000.0, 1.0, None, False),   # budget unknown (not in the startup facts)
    ],
)
def test_token_budget_boundaries(tmp_path: Path, per_step: float, waiting_peak: float | None,
                                 budget: int | None, fires: bool) -> None:
    assert dg.BUDGET_SHARE == 0.80
    startup = {**STARTUP, "max_num_batched_tokens": budget}
    server = _server(tokens_per_step_mean=per_step, num_requests_waiting_peak=waiting_peak)
    d = diagnose(_save(tmp_path, server=server, startup=startup))
    assert _keys(d) == (["token_budget_saturated"] if fires else ["no_bottleneck"])


def test_compute_bound_is_dropped_under_a_scheduling_limit(tmp_path: Path) -> None:
    server = _server(tokens_per_step_mean=950.0, num_requests_waiting_peak=5.0,
                     num_requests_waiting_mean=2.0, busy_fraction=0.95)
    assert _keys(diagnose(_save(tmp_path, server=server))) == ["token_budget_saturated"]


# -- 4. concurrency cap ---------------------------------------------------------------------

CAP_STARTUP = {**STARTUP, "max_num_seqs": 4, "max_num_seqs_source": "flag"}


def _cap_series(extra_free: int = 0, waiting_at_cap: float = 2.0) -> TimeSeries:
    """10 in-run samples, 5 at max_num_seqs = 4 with requests waiting (``extra_free`` more below
    the cap)."""
    running = [4.0] * 5 + [2.0] * (5 + extra_free)
    waiting = [waiting_at_cap] * 4 + [1.5 * waiting_at_cap] + [0.0] * (5 + extra_free)
    return _series(running, waiting)


def test_concurrency_cap(tmp_path: Path) -> None:
    run = _save(tmp_path, startup=CAP_STARTUP, series=_cap_series(), duration_s=10.0,
                server=_server(num_requests_waiting_peak=3.0))
    d = diagnose(run)
    assert _keys(d) == ["concurrency_cap"]
    f = d.primary
    assert (f.title, f.layer) == ("concurrency cap reached (max_num_seqs)", "scheduling")
    assert f.rule == ("running == max_num_seqs in >= 50% of samples with requests waiting, "
                      "KV cache peak < 80%")
    # the scrapes before and after the run (99 running) are not among the 10 samples
    assert f.evidence == [
        "running at max_num_seqs = 4 (flag) in 50% of 10 samples, 2.2 requests waiting on "
        "average meanwhile (peak 3)",
        "KV cache peak 30.0%: memory for more requests was free",
        "TTFT P99 125 ms, server queue time mean 2 ms",
    ]
    assert f.knobs[0].startswith("raise --max-num-seqs")


@pytest.mark.parametrize(
    ("extra_free", "waiting_at_cap", "kv_peak", "fires"),
    [
        (0, 2.0, 0.3, True),      # pinned in 5 of 10 samples: exactly PINNED_SHARE
        (1, 2.0, 0.3, False),     # 5 of 11: just under
        (0, 0.0, 0.3, False),     # at the cap but nothing waited meanwhile
        (0, 2.0, 0.799, True),    # KV cache just under KV_FREE
        (0, 2.0, 0.8, False),     # KV cache at KV_FREE: memory may be what held the batch
    ],
)
def test_concurrency_cap_boundaries(tmp_path: Path, extra_free: int, waiting_at_cap: float,
                                    kv_peak: float, fires: bool) -> None:
    assert (dg.PINNED_SHARE, dg.KV_FREE) == (0.50, 0.80)
    run = _save(tmp_path, startup=CAP_STARTUP, series=_cap_series(extra_free, waiting_at_cap),
                duration_s=10.0 + extra_free, server=_server(kv_cache_usage_peak=kv_peak))
    assert _keys(diagnose(run)) == (["concurrency_cap"] if fires else ["no_bottleneck"])


def test_concurrency_cap_from_counters_needs_no_sample(tmp_path: Path) -> None:
    # a starved machine answered /metrics too late for any in-run sample: Little's law over the
    # request-time histograms still shows the cap held
    server = _server(running_time_avg=3.8, waiting_time_avg=6.5, samples=0,
                     kv_cache_usage_peak=None, num_requests_running_peak=None,
                     num_requests_waiting_peak=None)
    d = diagnose(_save(tmp_path, startup=CAP_STARTUP, server=server, duration_s=10.0))
    assert _keys(d) == ["concurrency_cap"]
    f = d.primary
    assert f.rule == ("time-averaged running >= 90% of max_num_seqs with >= 1 waiting on "
                      "average, KV cache peak < 80%")
    assert f.evidence[0] == (
        "running at max_num_seqs = 4 (flag): 3.80 running and 6.5 waiting on average over the "
        "run (Little's law: summed request times in vllm:request_prefill/decode/queue_time_seconds"
        " over the duration)")


@pytest.mark.parametrize(
    ("running", "waiting", "kv_peak", "fires"),
    [
        (3.6, 1.0, None, True),    # exactly CAP_MEAN_SHARE of 4, exactly QUEUE_MEAN waiting
        (3.59, 5.0, None, False),  # just under the share
        (4.0, 0.99, None, False),  # at the cap, but hardly anything waited
        (4.0, 5.0, 0.8, False),    # a sampled KV peak at KV_FREE: memory may have held it
    ],
)
def test_concurrency_cap_from_counters_boundaries(tmp_path: Path, running: float, waiting: float,
                                                  kv_peak: float | None, fires: bool) -> None:
    assert (dg.CAP_MEAN_SHARE, dg.QUEUE_MEAN) == (0.90, 1.0)
    server = _server(running_time_avg=running, waiting_time_avg=waiting,
                     kv_cache_usage_peak=kv_peak)
    # the samples say otherwise (never at the cap): the counters win where they exist
    run = _save(tmp_path, startup=CAP_STARTUP, server=server, series=_series([2.0] * 10),
                duration_s=10.0)
    assert _keys(diagnose(run)) == (["concurrency_cap"] if fires else ["no_bottleneck"])


def test_concurrency_cap_needs_the_time_series_and_max_num_seqs(tmp_path: Path) -> None:
    no_series = _save(tmp_path, "no-series", startup=CAP_STARTUP, duration_s=10.0)
    assert _keys(diagnose(no_series)) == ["no_bottleneck"]
    unknown = _save(tmp_path, "no-cap", startup={**CAP_STARTUP, "max_num_seqs": None},
                    series=_cap_series(), duration_s=10.0)
    assert _keys(diagnose(unknown)) == ["no_bottleneck"]


def test_compute_bound_is_dropped_at_the_concurrency_cap(tmp_path: Path) -> None:
    run = _save(tmp_path, startup=CAP_STARTUP, series=_cap_series(), duration_s=10.0,
                server=_server(busy_fraction=1.0, num_requests_waiting_peak=3.0,
                               num_requests_waiting_mean=1.1))
    assert _keys(diagnose(run)) == ["concurrency_cap"]


# -- 5. prefill interference ----------------------------------------------------------------


def _interference_records(long_prompt: int = 1024, first_chunk: float = 0.34,
                          long_sent: float = 0.2, long_chunks: int = 9) -> list[RequestRecord]:
    """4 decoding requests (16-token prompts), 18 chunks 10 ms apart from 0.15 s, each stalled
    once for 100 ms (0.25 -> 0.35 s): 4 x 17 gaps, 4 of them stalls; a request with a
    ``long_prompt``-token prompt sent at ``long_sent`` whose first token came at ``first_chunk``,
    then ``long_chunks - 1`` more 10 ms apart (default: 76 gaps in all, 4 stalls = 5.3 %)."""
    decode = [0.15 + 0.01 * k for k in range(11)] + [0.35 + 0.01 * k for k in range(7)]
    records = [_req(i, sent=0.0, prompt=16, chunk_s=list(decode)) for i in range(4)]
    chunks = [first_chunk + 0.01 * k for k in range(long_chunks)]
    records.append(_req(4, sent=long_sent, prompt=long_prompt, chunk_s=chunks))
    return records


def test_prefill_interference(tmp_path: Path) -> None:
    run = _save(tmp_path, records=_interference_records(), duration_s=1.0)
    s = run.summary
    # 4 x 17 + 8 gaps, 4 of them 100 ms, the rest 10 ms
    assert s.itl_ms.n == 76
    assert s.itl_ms.p50 == pytest.approx(10.0)
    assert s.itl_ms.p99 == pytest.approx(100.0)
    d = diagnose(run)
    assert _keys(d) == ["prefill_interference"]
    f = d.primary
    assert (f.title, f.layer) == ("prefill interference", "scheduling")
    assert f.rule == ("ITL P99 >= 3x P50 and >= 50% of decode stalls (> 4x the median gap) "
                      "overlap a prefill of >= 512 tokens")
    assert f.evidence == [
        "ITL P99 100.0 ms = 10.0x P50 10.0 ms",
        "4 of 76 gaps between chunks were stalls (> 40.0 ms); 4 of them overlapped another "
        "request's prefill of a long prompt",
        f"TPOT P99 {s.tpot_ms.p99:.1f} ms; max_num_batched_tokens 1000",
    ]


def test_prefill_interference_needs_a_long_prompt(tmp_path: Path) -> None:
    assert dg.LONG_PROMPT_TOKENS == 512
    run = _save(tmp_path, records=_interference_records(long_prompt=511), duration_s=1.0)
    assert _keys(diagnose(run)) == ["no_bottleneck"]


@pytest.mark.parametrize(
    ("long_chunks", "fires"),
    [
        (13, True),    # 4 stalls of 4 x 17 + 12 = 80 gaps: exactly STALLS_MIN_SHARE
        (14, False),   # 4 of 81: just under
    ],
)
def test_prefill_interference_needs_stalls_in_5_percent_of_gaps(
    tmp_path: Path, long_chunks: int, fires: bool
) -> None:
    assert dg.STALLS_MIN_SHARE == 0.05
    run = _save(tmp_path, records=_interference_records(long_chunks=long_chunks), duration_s=1.0)
    itl = run.summary.itl_ms
    # every other condition holds either way
    assert itl.p99 == pytest.approx(100.0) and itl.p50 == pytest.approx(10.0)
    gaps, stalls, overlapping, _ = dg._stalls(dg._Run(run))
    assert (gaps, stalls, overlapping) == (68 + long_chunks - 1, 4, 4)
    assert _keys(diagnose(run)) == (["prefill_interference"] if fires else ["no_bottleneck"])


def _latency(**prefill) -> dict[str, HistogramStats]:
    return {"queue": HistogramStats(count=8, mean=2.0),
            "prefill": HistogramStats(count=8, mean=30.0, **prefill)}


def test_prefill_window_reaches_back_by_the_servers_prefill_p90(tmp_path: Path) -> None:
    # the long prompt (sent at 0.2 s) had its first token at 0.36 s, after the stalls ended
    # (0.35 s)
    records = _interference_records(first_chunk=0.36)
    # its prefill took up to 50 ms (server P90): it ran from 0.31 s, during the stalls
    p90_50 = _save(tmp_path, "prefill-p90-50", records=records, duration_s=1.0,
                   server=_server(latency_ms=_latency(p90=50.0)))
    assert _keys(diagnose(p90_50)) == ["prefill_interference"]
    # up to 5 ms: it ran from 0.355 s, after the stalls
    p90_5 = _save(tmp_path, "prefill-p90-5", records=records, duration_s=1.0,
                  server=_server(latency_ms=_latency(p90=5.0)))
    assert _keys(diagnose(p90_5)) == ["no_bottleneck"]


def test_prefill_window_without_the_servers_p90_starts_when_the_request_was_sent(
    tmp_path: Path
) -> None:
    records = _interference_records(first_chunk=0.36)
    # no prefill P90 (a histogram without it, or none): the prefill ran any time after the
    # request was sent at 0.2 s, so during the stalls
    no_p90 = _save(tmp_path, "no-p90", records=records, duration_s=1.0)
    assert dg._Run(no_p90).server_ms("prefill", "p90") is None
    assert _keys(diagnose(no_p90)) == ["prefill_interference"]
    no_hist = _save(tmp_path, "no-hist", records=records, duration_s=1.0,
                    server=_server(latency_ms={"queue": HistogramStats(count=8, mean=2.0)}))
    assert _keys(diagnose(no_hist)) == ["prefill_interference"]
    # ... but not before it was sent: sent at 0.355 s, after the stalls
    late = _interference_records(first_chunk=0.36, long_sent=0.355)
    sent_after = _save(tmp_path, "sent-after", records=late, duration_s=1.0)
    assert _keys(diagnose(sent_after)) == ["no_bottleneck"]



def _bunched_records() -> list[RequestRecord]:
    """4 requests whose chunks arrive in bunches of 4 (1/1024 s apart, a bunch every 250 ms)
    and a long-prompt request whose first token came at 2.5 s."""
    records = []
    for i in range(4):
        chunks, t = [], 0.125
        for _ in range(10):
            chunks += [t + k / 1024 for k in range(4)]
            t += 0.25
        records.append(_req(i, sent=0.0, prompt=16, chunk_s=chunks))
    records.append(_req(4, sent=0.0, prompt=4096, chunk_s=[2.5, 2.5 + 1 / 64]))
    return records


def test_prefill_interference_is_skipped_when_chunks_come_in_bunches(tmp_path: Path) -> None:
    # the server's prefill P90 of 3 s: the long prompt's prefill window covers the whole run
    latency = {"prefill": HistogramStats(count=1, mean=3000.0, p90=3000.0)}
    run = _save(tmp_path, records=_bunched_records(), duration_s=3.0,
                server=_server(latency_ms=latency))
    itl = run.summary.itl_ms
    # the typical gap is inside a bunch: far below the mean, the client's gaps do not show steps
    assert itl.p50 == pytest.approx(1000 / 1024)
    assert itl.p50 < 0.2 * itl.mean
    # every other condition holds: spread, stalls, and stalls overlapping a long prefill
    assert itl.p99 >= dg.ITL_SPREAD * itl.p50
    gaps, stalls, overlapping, _ = dg._stalls(dg._Run(run))
    assert stalls >= dg.STALLS_MIN_SHARE * gaps and overlapping >= dg.STALL_SHARE * stalls > 0
    assert _keys(diagnose(run)) == ["no_bottleneck"]


# -- 6. compute-bound -----------------------------------------------------------------------


COMPUTE_RULE = ("server busy in >= 90% of samples with a queue (waiting mean >= 1) or a full "
                "batch (running mean >= 50% of max_num_seqs), and no KV, max_num_seqs or "
                "token-budget limit hit")


def test_compute_bound(tmp_path: Path) -> None:
    telemetry = [{"gpu_util_pct": 80.0, "server_cpu_cores": 1.0, "machine_cpu_cores": 1.25},
                 {"gpu_util_pct": 90.0, "server_cpu_cores": 1.5, "machine_cpu_cores": 1.75},
                 {"gpu_util_pct": 100.0, "server_cpu_cores": 2.0}]   # a point without it
    run = _save(
        tmp_path, series=_series([3.0, 3.0, 3.0], [1.0, 1.0, 1.0], telemetry=telemetry),
        server=_server(busy_fraction=0.9, num_requests_waiting_mean=1.0,
                       num_requests_waiting_peak=3.0),
    )
    d = diagnose(run)
    assert _keys(d) == ["compute_bound"]
    f = d.primary
    assert (f.title, f.layer) == ("compute-bound at full batch", "compute")
    assert f.rule == COMPUTE_RULE
    assert f.evidence == [
        "busy in 90% of samples; waiting mean 1.0",
        "running mean 1.5 (peak 3) of max_num_seqs 8; waiting peak 3; KV cache peak 30.0%",
        "mean 12 tokens per step of a 1000 budget; output 18 tok/s",   # 72 tokens in 4 s
        "GPU utilization mean 90% (NVML: time a kernel ran)",
        "server CPU mean 1.50 cores",
        "whole machine's CPU mean 1.50 cores",   # of the two points that have it
    ]


@pytest.mark.parametrize(
    ("busy", "queue", "fires"),
    [
        (0.9, 1.0, True),
        (0.899, 1.0, False),
        (0.9, 0.99, False),
        (None, 5.0, False),
    ],
)
def test_compute_bound_boundaries(tmp_path: Path, busy: float | None, queue: float,
                                  fires: bool) -> None:
    assert (dg.BUSY_SHARE, dg.QUEUE_MEAN) == (0.90, 1.0)
    server = _server(busy_fraction=busy, num_requests_waiting_mean=queue,
                     num_requests_waiting_peak=3.0)
    d = diagnose(_save(tmp_path, server=server))
    assert _keys(d) == (["compute_bound"] if fires else ["no_bottleneck"])
    if fires:   # no time series: no hardware lines
        assert d.primary.evidence[-1] == "mean 12 tokens per step of a 1000 budget; output 18 tok/s"


def test_compute_bound_at_a_full_batch_without_a_queue(tmp_path: Path) -> None:
    # running mean 4 of max_num_seqs 8, nothing waiting
    server = _server(busy_fraction=0.95, num_requests_running_mean=4.0,
                     num_requests_running_peak=6.0)
    d = diagnose(_save(tmp_path, server=server))
    assert _keys(d) == ["compute_bound"]
    f = d.primary
    assert f.rule == COMPUTE_RULE
    assert f.evidence == [
        "busy in 95% of samples; waiting mean 0.0",
        "running mean 4.0 (peak 6) of max_num_seqs 8; waiting peak 0; KV cache peak 30.0%",
        "mean 12 tokens per step of a 1000 budget; output 18 tok/s",
    ]


@pytest.mark.parametrize(
    ("running", "max_num_seqs", "busy", "fires"),
    [
        (4.0, 8, 0.9, True),      # exactly FULL_BATCH_SHARE of max_num_seqs
        (3.99, 8, 0.9, False),    # just under
        (4.0, 8, 0.899, False),   # a full batch, but the server not busy enough
        (2.0, 4, 0.9, True),      # half of a smaller cap
        (4.0, None, 0.9, False),  # max_num_seqs unknown
        (None, 8, 0.9, False),    # running not exposed
    ],
)
def test_compute_bound_full_batch_boundaries(tmp_path: Path, running: float | None,
                                             max_num_seqs: int | None, busy: float,
                                             fires: bool) -> None:
    assert dg.FULL_BATCH_SHARE == 0.5
    server = _server(busy_fraction=busy, num_requests_running_mean=running,
                     num_requests_waiting_mean=0.0)
    d = diagnose(_save(tmp_path, server=server,
                       startup={**STARTUP, "max_num_seqs": max_num_seqs}))
    assert _keys(d) == (["compute_bound"] if fires else ["no_bottleneck"])


def test_compute_bound_is_kept_beside_a_client_finding(tmp_path: Path) -> None:
    server = _server(busy_fraction=1.0, num_requests_waiting_mean=2.0,
                     num_requests_waiting_peak=4.0)
    run = _save(tmp_path, server=server, client=client_checks([], [], 1.5))
    assert _keys(diagnose(run)) == ["client_saturated", "compute_bound"]


# -- 7. client concurrency limit ------------------------------------------------------------


def _slot_client(slot_p50_ms: float) -> ClientChecks:
    return ClientChecks(loop_lag_ms=Dist.of([1.0] * 10), send_lag_ms=Dist.of([0.0] * 8),
                        slot_wait_ms=Dist.of([slot_p50_ms] * 8), cpu_cores=0.2)


def test_client_concurrency_limit(tmp_path: Path) -> None:
    run = _save(tmp_path, load=LoadSpec(max_concurrency=2), client=_slot_client(25.0))
    assert run.summary.e2el_ms.mean == 250.0
    d = diagnose(run)
    assert _keys(d) == ["client_concurrency_limit"]
    f = d.primary
    assert (f.title, f.layer) == ("load too light: client concurrency limit", "client")
    assert f.rule == ("max_concurrency set, client slot wait P50 >= 10% of mean E2EL, "
                      "server never queued")
    assert f.evidence == [
        "the client allowed 2 request(s) in flight; requests waited P50 25 ms for a slot "
        "(mean E2EL 250 ms)",
        f"the server was mostly idle: {CONTEXT}",
        "output 18 tok/s",
    ]
    assert f.knobs[0].startswith("raise the client's max_concurrency")


@pytest.mark.parametrize(
    ("cap", "slot_ms", "waiting_peak", "fires"),
    [
        (2, 25.0, 0.0, True),      # slot wait P50 exactly 10 % of the 250 ms mean E2EL
        (2, 24.9, 0.0, False),     # just under
        (None, 100.0, 0.0, False), # no max_concurrency: no slots to wait for
        (2, 100.0, 1.0, False),    # the server queued too: not a too-light load
        (2, 100.0, None, True),    # waiting not exposed: nothing says the server queued
    ],
)
def test_client_concurrency_limit_boundaries(tmp_path: Path, cap: int | None, slot_ms: float,
                                             waiting_peak: float | None, fires: bool) -> None:
    assert dg.SLOT_WAIT_SHARE == 0.10
    run = _save(tmp_path, load=LoadSpec(max_concurrency=cap), client=_slot_client(slot_ms),
                server=_server(num_requests_waiting_peak=waiting_peak))
    assert _keys(diagnose(run)) == (["client_concurrency_limit"] if fires else ["no_bottleneck"])


def test_a_server_queue_seen_only_in_its_counters_is_not_a_client_limit(tmp_path: Path) -> None:
    # no sample saw a request waiting, but the queue-time histogram says they waited
    assert dg.QUEUE_WAIT_MS == 50.0
    for queue_ms, fires in ((49.9, True), (50.0, False)):
        latency = {"queue": HistogramStats(count=8, mean=queue_ms)}
        run = _save(tmp_path, f"q{queue_ms}", load=LoadSpec(max_concurrency=2),
                    client=_slot_client(25.0), server=_server(latency_ms=latency))
        assert _keys(diagnose(run)) == (["client_concurrency_limit"] if fires
                                        else ["no_bottleneck"]), queue_ms


# -- 8. no bottleneck -----------------------------------------------------------------------


def test_no_bottleneck(tmp_path: Path) -> None:
    d = diagnose(_save(tmp_path, slo=SLO(ttft_ms=200.0, e2el_ms=500.0)))
    assert _keys(d) == ["no_bottleneck"]
    f = d.primary
    assert (f.title, f.layer, f.rule) == (
        "no bottleneck: the load was too light", "none", "none of the bottleneck rules fired"
    )
    assert f.evidence == [
        CONTEXT,
        "busy in 60% of samples, preemptions 0",
        "TTFT P99 125 ms, TPOT P99 15.6 ms, output 18 tok/s",
        "8 of 8 requests met the SLO",   # TTFT 125 ms, E2EL 250 ms
    ]


def test_no_bottleneck_without_server_metrics_or_a_folder() -> None:
    records = _records()
    run = RunResult(name="bare", created_at="t", config=RunConfig(name="bare"),
                    summary=metrics.summarize(records, duration_s=DURATION_S))
    d = diagnose(run)   # not saved: no records, no time series, no server metrics
    assert d.path is None
    assert _keys(d) == ["no_bottleneck"]
    assert d.primary.evidence == [
        "running mean n/a (peak n/a) of max_num_seqs n/a; waiting peak n/a; KV cache peak n/a",
        "busy in n/a of samples, preemptions n/a",
        "TTFT P99 125 ms, TPOT P99 15.6 ms, output 18 tok/s",
    ]


# -- diagnose(): inputs, errors ------------------------------------------------------------


def test_a_folder_and_its_loaded_result_give_the_same_diagnosis(tmp_path: Path) -> None:
    run = _save(tmp_path, startup=CAP_STARTUP, series=_cap_series(), duration_s=10.0)
    folder = Path(run.path)
    d = diagnose(folder)
    assert d == diagnose(RunResult.load(folder)) == diagnose(str(folder))
    assert (d.run, d.path) == ("run", str(folder))
    assert _keys(d) == ["concurrency_cap"]   # the time series was read from the folder
    assert vllm_course.diagnose is diagnose and vllm_course.Diagnosis is Diagnosis


def test_a_run_without_summary_cannot_be_diagnosed(tmp_path: Path) -> None:
    run = RunResult(name="died", created_at="t", config=RunConfig(name="died"), summary=None,
                    stopped_early="the vLLM server died")
    with pytest.raises(ValueError, match=r"^run died has no summary to diagnose "
                                         r"\(the vLLM server died\)$"):
        diagnose(run)
    run.save(tmp_path)
    with pytest.raises(ValueError, match="has no summary to diagnose"):
        diagnose(tmp_path)
    empty = RunResult(name="empty", created_at="t", config=RunConfig(), summary=None)
    with pytest.raises(ValueError, match=r"\(nothing was measured\)"):
        diagnose(empty)


def test_a_folder_without_summary_json(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        diagnose(tmp_path)


# -- the report, HTML ------------------------------------------------------------------------


def _two_findings(tmp_path: Path) -> Diagnosis:
    run = _save(tmp_path, client=client_checks([], [], 1.2),
                server=_server(preemptions=3.0, kv_cache_usage_peak=0.9,
                               kv_cache_usage_mean=0.7))
    return diagnose(run)


def test_report_lines(tmp_path: Path) -> None:
    d = _two_findings(tmp_path)
    lines = d.report().splitlines()
    assert lines[:6] == [
        f"Diagnosis of run  ({tmp_path / 'run'})",
        "  limiting layer: client -- client saturated",
        f"  rule: {RULE}",
        "  evidence:",
        "    - client CPU 1.20 cores > 0.9 (one Python thread is the limit)",
        f"    - {_lag_p50_line('n/a')}",
    ]
    assert lines[6] == "  try:"
    assert lines[7:11] == [f"    - {k}" for k in d.primary.knobs]
    # the other findings: title, layer and their first two pieces of evidence
    assert lines[11:] == [
        "  also: KV cache exhausted (memory): 3 preemptions (Δvllm:num_preemptions_total); each "
        "one frees the request's blocks and recomputes it from scratch later (V1 preempts by "
        "recompute, never swap); KV cache usage peak 90.0%, mean 70.0% (sampled); KV cache "
        "50,000 tokens"
    ]


def test_report_of_an_unsaved_run_has_no_path() -> None:
    d = Diagnosis(run="r", findings=[Finding(key="k", title="T", layer="none", rule="R",
                                             evidence=["e1"])])
    assert d.report() == "Diagnosis of r\n  limiting layer: none -- T\n  rule: R\n  evidence:\n" \
                         "    - e1"


def test_html_escapes_everything_it_shows(tmp_path: Path) -> None:
    d = _two_findings(tmp_path)
    page = d._repr_html_()
    assert page.startswith("<b>client saturated</b> (layer: client)<br><small>client CPU &gt; "
                           "0.9 cores, or event-loop lag P90 &gt; 20 ms, send lag P50 &gt; 20 ms "
                           "or bunched inter-token gaps &gt; 5% with client CPU &gt;= 0.5 cores "
                           "(the busiest client process)</small><ul><li>client CPU 1.20 "
                           "cores &gt; 0.9 (one Python thread is the limit)</li><li>event-loop "
                           "lag P50 n/a ms; the server&#x27;s own numbers")
    assert "Try:<ul><li>spread the client over more processes: load.workers (now 1; " in page
    assert "Also:<ul><li>KV cache exhausted (memory)</li></ul>" in page
    nasty = Diagnosis(run="x", findings=[
        Finding(key="a", title="<script>alert(1)</script>", layer="a&b", rule="x < y",
                evidence=['"quoted" & <b>bold</b>'], knobs=["--flag=<n>"]),
        Finding(key="b", title="t<2>", layer="l&", rule="r"),
    ])
    page = nasty._repr_html_()
    assert "<script>" not in page and "<b>bold</b>" not in page
    assert page == (
        "<b>&lt;script&gt;alert(1)&lt;/script&gt;</b> (layer: a&amp;b)<br><small>x &lt; y"
        "</small><ul><li>&quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt;</li></ul>"
        "Try:<ul><li>--flag=&lt;n&gt;</li></ul>Also:<ul><li>t&lt;2&gt; (l&amp;)</li></ul>"
    )
    # no knobs, nothing else: neither list
    bare = Diagnosis(run="x", findings=[Finding(key="a", title="T", layer="L", rule="R")])
    assert bare._repr_html_() == "<b>T</b> (layer: L)<br><small>R</small><ul></ul>"


def test_a_saved_runs_html_names_the_diagnosis(tmp_path: Path) -> None:
    run = _save(tmp_path, server=_server(preemptions=3.0, kv_cache_usage_peak=0.9))
    assert "<th>diagnosis</th>" in run._repr_html_()
    assert "<td>KV cache exhausted</td>" in run._repr_html_()


# -- vllm-course diagnose -------------------------------------------------------------------


def test_cli_prints_the_report(tmp_path: Path) -> None:
    run = _save(tmp_path, server=_server(preemptions=3.0, kv_cache_usage_peak=0.9))
    out = CliRunner().invoke(main, ["diagnose", run.path])
    assert out.exit_code == 0, out.output
    assert out.output == diagnose(run.path).report() + "\n"
    assert out.output.splitlines()[1] == "  limiting layer: memory -- KV cache exhausted"


def test_cli_on_a_folder_without_summary_json(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert out.exit_code == 2
    assert f"Error: {tmp_path} has no summary.json: pass a run folder" in out.output
    assert "Traceback" not in out.output
    assert isinstance(out.exception, SystemExit)   # a clean exit, not a crash


def test_cli_on_a_run_without_summary(tmp_path: Path) -> None:
    RunResult(name="died", created_at="t", config=RunConfig(name="died"), summary=None,
              stopped_early="the vLLM server died").save(tmp_path)
    out = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert out.exit_code == 2
    assert f"Error: {tmp_path}: run died has no summary to diagnose (the vLLM server died)" in out.output


def test_cli_on_a_missing_folder(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["diagnose", str(tmp_path / "nope")])
    assert out.exit_code == 2   # click's usage error: the path does not exist
    assert "does not exist" in out.output

"""Name the layer that limited a run, with the evidence numbers and the knobs to try.

``diagnose(result)`` (or ``vllm-course diagnose RESULT_DIR``) reads a saved run: the client's
summary and self-checks, the server's metrics over the run window, its time series and startup
facts, and the per-request records. Each rule below looks for one bottleneck; the findings that
fire are listed most limiting first, and the first one is the diagnosis. The facts behind the
advice are vLLM V1's (read in its source, 0.26 and 0.32): preemption is recompute
(``vllm/v1/core/sched/scheduler.py``), prefix caching and chunked prefill are on by default
(``vllm/config/cache.py``, ``vllm/engine/arg_utils.py``), ``--max-model-len`` does not size the
KV cache (``vllm/v1/core/kv_cache_utils.py``).

Rules, in the order they are checked (thresholds are the module constants):

1. **client saturated** (client / I/O path): the client's self-checks crossed a threshold
   (:mod:`vllm_course.loadgen.selfcheck`: client CPU > 0.9 cores, or event-loop lag P90 > 20 ms,
   send lag P50 > 20 ms or more than 5 % of inter-token gaps bunched while the client used >=
   0.5 cores; over worker processes, the busiest one). Checked first: a late client distorts
   every other number. The first knob: more client processes (``load.workers``).
2. **KV cache exhausted** (memory): preemptions > 0 (a counter). The V1 scheduler preempts only
   when a running request cannot get a new KV block (``v1/core/sched/scheduler.py``), so one
   preemption proves the cache was full at that moment; the sampled KV usage peak (it should
   reach :data:`KV_FULL`) is evidence, not a condition: the samples may miss the full moments.
3. **step token budget saturated** (scheduling): mean tokens per engine step >=
   :data:`BUDGET_SHARE` x ``max_num_batched_tokens`` while requests queued (see "queued" below).
4. **concurrency cap reached** (scheduling): the time-averaged number of running requests
   (Little's law over the server's prefill and decode histograms, which needs no in-run sample)
   is at least :data:`CAP_MEAN_SHARE` x ``max_num_seqs`` while at least :data:`QUEUE_MEAN`
   requests waited on average, and the KV cache peak (if sampled) < :data:`KV_FREE`. Without
   those histograms: running == ``max_num_seqs`` in at least :data:`PINNED_SHARE` of the in-run
   samples with requests waiting in them.
5. **prefill interference** (scheduling): ITL P99 >= :data:`ITL_SPREAD` x ITL P50 and at least
   :data:`STALL_SHARE` of the decode stalls (gaps > :data:`STALL_FACTOR` x the median gap, at least
   :data:`STALLS_MIN_SHARE` of gaps) overlap the prefill of a prompt of >=
   :data:`LONG_PROMPT_TOKENS` tokens.
6. **compute-bound at full batch** (compute): server busy (running > 0) in >= :data:`BUSY_SHARE`
   of the samples with a queue (waiting mean >= :data:`QUEUE_MEAN`) or a full batch (running mean
   >= :data:`FULL_BATCH_SHARE` of ``max_num_seqs``), and none of the limits above was hit: the
   hardware runs every step it can.
7. **load too light: client concurrency limit** (client): ``max_concurrency`` was set, requests
   waited in the client for a slot (slot wait P50 >= :data:`SLOT_WAIT_SHARE` of mean E2EL) and
   the server never queued.
8. **no bottleneck: the load was too light**: nothing above fired. With an SLO that fewer than
   :data:`SLO_MET_SHARE` of the requests met, the finding says so instead of "too light":
   nothing queued, so the time went to the engine's steps (and to the machine's stalls).

"Queued" means a ``/metrics`` sample saw a request waiting, or the server's mean queue time
(``vllm:request_queue_time_seconds``, a counter) reached :data:`QUEUE_WAIT_MS`. Rules read
counters and histograms where they can: on a starved 2-core machine ``/metrics`` can answer too
late for any sample to fall inside a short run, and the sampled gauges are then unknown.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from vllm_course.diagnosis.evidence import _fmt, _pct, _Run
from vllm_course.diagnosis.report import Diagnosis, Finding
from vllm_course.diagnosis.thresholds import (
    BUDGET_SHARE,
    BUSY_SHARE,
    CAP_MEAN_SHARE,
    FULL_BATCH_SHARE,
    ITL_SPREAD,
    KV_FREE,
    LONG_PROMPT_TOKENS,
    PINNED_SHARE,
    QUEUE_MEAN,
    QUEUE_WAIT_MS,
    SLO_MET_SHARE,
    SLOT_WAIT_SHARE,
    STALL_FACTOR,
    STALL_SHARE,
    STALLS_MIN_SHARE,
)
from vllm_course.loadgen import selfcheck
from vllm_course.loadgen.workers import STREAMS_PER_WORKER
from vllm_course.results import RunResult

# ---- rules: each returns a Finding or None ------------------------------------------------


def _client_saturated(run: _Run) -> Finding | None:
    c = run.c
    if c is None:
        return None
    # the current thresholds, also for a run saved under older ones
    reasons, _ = selfcheck.judge(c.loop_lag_ms, c.send_lag_ms, c.cpu_cores,
                                 run.s.ttft_ms.mean if run.s else None, c.bunched_share)
    if not reasons:
        return None
    evidence = list(reasons)
    evidence.append(
        f"event-loop lag P50 {_fmt(c.loop_lag_ms.p50, '.1f')} ms; the server's own numbers "
        "(its TTFT histogram, its counters) do not include the client's delay"
    )
    server_tpot = run.server_ms("tpot", "mean")
    if run.s is not None and run.s.tpot_ms.mean is not None and server_tpot is not None:
        evidence.append(
            f"client mean TPOT {run.s.tpot_ms.mean:.1f} ms vs the server's {server_tpot:.1f} ms "
            "(vllm:request_time_per_output_token_seconds)"
        )
    if run.result.checks and run.result.checks.ttft_gap_ms is not None:
        evidence.append(
            f"client mean TTFT {_fmt(run.result.checks.client_ttft_mean_ms)} ms vs server "
            f"{_fmt(run.result.checks.server_ttft_mean_ms)} ms"
        )
    return Finding(
        key="client_saturated",
        title="client saturated",
        layer="client",
        rule=(f"client CPU > {selfcheck.CLIENT_CPU_CORES} cores, or event-loop lag P90 > "
              f"{selfcheck.LOOP_LAG_P90_MS:g} ms, send lag P50 > {selfcheck.SEND_LAG_P50_MS:g} ms"
              f" or bunched inter-token gaps > {selfcheck.BUNCHED_SHARE:.0%} with client CPU >= "
              f"{selfcheck.CLIENT_BUSY_CORES} cores (the busiest client process)"),
        evidence=evidence,
        knobs=[
            f"{selfcheck.WORKERS_HINT} (now {c.workers}; about one per "
            f"{STREAMS_PER_WORKER} streams in flight, on cores the server does not use)",
            "remove per-chunk work from the measuring client (printing, detokenizing, plotting)",
            "run the load generator on its own cores or machine, away from the server",
            "cross-check with vllm bench serve on the same server and workload",
        ],
    )


def _kv_exhausted(run: _Run) -> Finding | None:
    pre, peak = run.metric("preemptions"), run.metric("kv_cache_usage_peak")
    if not pre:
        return None
    usage = ("KV cache usage was not sampled during the run" if peak is None else
             f"KV cache usage peak {_pct(peak):.1f}%, mean "
             f"{_fmt(_pct(run.metric('kv_cache_usage_mean')), '.1f', '%')} (sampled)")
    tokens = run.facts.kv_cache_tokens
    return Finding(
        key="kv_cache_exhausted",
        title="KV cache exhausted",
        layer="memory",
        rule="preemptions > 0 (V1 preempts only when a running request finds no free KV block)",
        evidence=[
            f"{pre:.0f} preemptions (Δvllm:num_preemptions_total); each one frees the request's "
            "blocks and recomputes it from scratch later (V1 preempts by recompute, never swap)",
            f"{usage}; KV cache {_fmt(tokens, ',')} tokens",
            run.context(),
        ],
        knobs=[
            "give the KV cache more memory: --kv-cache-memory-bytes (vLLM's CPU build sizes "
            "its KV cache from it, or from VLLM_CPU_KVCACHE_SPACE in GiB)" if run.cpu else
            "give the KV cache more memory: --gpu-memory-utilization (default 0.92 since vLLM "
            "0.20) or --kv-cache-memory-bytes",
            "--kv-cache-dtype fp8 (about twice the tokens per byte"
            + ("; the CPU build needs AVX-512 or AMX for it: `vllm-course doctor` says)"
               if run.cpu else ")"),
            "admit fewer requests at once: lower --max-num-seqs",
            "--max-model-len does not size the KV cache" if run.cpu else
            "more GPUs (-tp) leave more memory per GPU for the KV cache; --max-model-len does "
            "not size the KV cache",
        ],
    )


def _budget_saturated(run: _Run) -> Finding | None:
    per_step, budget = run.metric("tokens_per_step_mean"), run.budget
    if per_step is None or not budget or per_step < BUDGET_SHARE * budget or not run.queued():
        return None
    prompt = run.mean_prompt()
    steps = "" if prompt is None else (
        f"; prompts average {prompt:.0f} tokens, so each needs >= {int(np.ceil(prompt / budget))} "
        "steps of prefill"
    )
    s = run.s
    return Finding(
        key="token_budget_saturated",
        title="step token budget saturated (max_num_batched_tokens)",
        layer="scheduling",
        rule=(f"mean tokens per step >= {BUDGET_SHARE:.0%} of max_num_batched_tokens, "
              f"requests queued (a sample saw one waiting, or queue time mean >= "
              f"{QUEUE_WAIT_MS:g} ms)"),
        evidence=[
            f"mean {per_step:.1f} tokens per engine step (Δvllm:iteration_tokens_total sum/count) "
            f"against max_num_batched_tokens {budget}{steps}",
            f"TTFT P99 {_fmt(s.ttft_ms.p99 if s else None)} ms (server queue time mean "
            f"{_fmt(run.server_ms('queue', 'mean'))} ms, prefill mean "
            f"{_fmt(run.server_ms('prefill', 'mean'))} ms)",
            run.context(),
        ],
        knobs=[
            "raise --max-num-batched-tokens (vLLM's docs: > 8192 for throughput on large GPUs; "
            "smaller budgets favour ITL, larger ones TTFT)",
            "--performance-mode throughput doubles the default budget and max_num_seqs",
            "--long-prefill-token-threshold / --max-num-partial-prefills shape how long prompts "
            "share the budget (chunked prefill is always on in V1)",
        ],
    )


def _pinned(run: _Run) -> tuple[float, float] | None:
    """(share of samples with running at max_num_seqs, mean waiting in those samples)."""
    cap = run.max_num_seqs
    pts = [p for p in run.points if p.running is not None]
    if not cap or not pts:
        return None
    at_cap = [p for p in pts if p.running >= cap]
    waiting = [p.waiting or 0.0 for p in at_cap]
    return len(at_cap) / len(pts), (sum(waiting) / len(waiting) if waiting else 0.0)


def _concurrency_cap(run: _Run) -> Finding | None:
    cap, peak = run.max_num_seqs, run.metric("kv_cache_usage_peak")
    running, waiting = run.metric("running_time_avg"), run.metric("waiting_time_avg")
    source = run.facts.max_num_seqs_source or "?"
    if not cap or (peak is not None and peak >= KV_FREE):
        return None
    if running is not None and waiting is not None:
        if running < CAP_MEAN_SHARE * cap or waiting < QUEUE_MEAN:
            return None
        rule = (f"time-averaged running >= {CAP_MEAN_SHARE:.0%} of max_num_seqs with >= "
                f"{QUEUE_MEAN:g} waiting on average, KV cache peak < {KV_FREE:.0%}")
        held = (f"running at max_num_seqs = {cap} ({source}): {running:.2f} running and "
                f"{waiting:.1f} waiting on average over the run (Little's law: summed request "
                "times in vllm:request_prefill/decode/queue_time_seconds over the duration)")
    else:   # a server without those histograms: the sampled gauges
        pinned = _pinned(run)
        if pinned is None or pinned[0] < PINNED_SHARE or pinned[1] <= 0:
            return None
        rule = (f"running == max_num_seqs in >= {PINNED_SHARE:.0%} of samples with requests "
                f"waiting, KV cache peak < {KV_FREE:.0%}")
        held = (f"running at max_num_seqs = {cap} ({source}) in {pinned[0]:.0%} of "
                f"{len(run.points)} samples, {pinned[1]:.1f} requests waiting on average "
                f"meanwhile (peak {_fmt(run.metric('num_requests_waiting_peak'))})")
    return Finding(
        key="concurrency_cap",
        title="concurrency cap reached (max_num_seqs)",
        layer="scheduling",
        rule=rule,
        evidence=[
            held,
            f"KV cache peak {_fmt(_pct(peak), '.1f', '%')}: memory for more requests was free",
            f"TTFT P99 {_fmt(run.s.ttft_ms.p99 if run.s else None)} ms, server queue time mean "
            f"{_fmt(run.server_ms('queue', 'mean'))} ms",
        ],
        knobs=[
            "raise --max-num-seqs (the KV cache has room for more running requests)",
            "--performance-mode throughput doubles the default max_num_seqs",
        ],
    )


def _stalls(run: _Run) -> tuple[int, int, int, float] | None:
    """(gaps, stalls, stalls overlapping a long prefill, stall threshold ms) from the records."""
    recs = run.completed
    gaps = [(b - a, a, b, r.index) for r in recs
            for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False)]
    positive = [g for g, *_ in gaps if g > 0]
    if len(positive) < 20:
        return None
    limit = STALL_FACTOR * float(np.median(positive))
    stalls = [(a, b, i) for g, a, b, i in gaps if g > limit]
    # a request's prefill ends at its first token; it began at most the server's P90 prefill time
    # earlier (without that histogram: any time after it was sent)
    prefill_p90_ms = run.server_ms("prefill", "p90")
    prefill_s = float("inf") if prefill_p90_ms is None else prefill_p90_ms / 1000.0
    windows = sorted(
        (max(r.sent_s or 0.0, r.chunk_s[0] - prefill_s), r.chunk_s[0], r.index)
        for r in recs if (r.prompt_tokens or r.prompt_len or 0) >= LONG_PROMPT_TOKENS
    )
    starts = [w[0] for w in windows]
    overlapping = 0
    for a, b, i in stalls:
        hi = bisect.bisect_left(starts, b)   # windows starting before the stall ends
        if any(w[1] > a and w[2] != i for w in windows[:hi]):
            overlapping += 1
    return len(gaps), len(stalls), overlapping, limit * 1000.0


def _prefill_interference(run: _Run) -> Finding | None:
    s = run.s
    if s is None or not s.itl_ms.p50 or s.itl_ms.p99 is None or not s.itl_ms.mean:
        return None
    if s.itl_ms.p50 < 0.2 * s.itl_ms.mean:
        return None   # chunks arrived in bunches: the client's gaps do not show the server's steps
    spread = s.itl_ms.p99 / s.itl_ms.p50
    found = _stalls(run)
    if spread < ITL_SPREAD or found is None:
        return None
    gaps, stalls, overlapping, limit_ms = found
    if stalls < STALLS_MIN_SHARE * gaps or overlapping < STALL_SHARE * stalls:
        return None
    return Finding(
        key="prefill_interference",
        title="prefill interference",
        layer="scheduling",
        rule=(f"ITL P99 >= {ITL_SPREAD:g}x P50 and >= {STALL_SHARE:.0%} of decode stalls "
              f"(> {STALL_FACTOR:g}x the median gap) overlap a prefill of >= {LONG_PROMPT_TOKENS} "
              "tokens"),
        evidence=[
            f"ITL P99 {s.itl_ms.p99:.1f} ms = {spread:.1f}x P50 {s.itl_ms.p50:.1f} ms",
            f"{stalls} of {gaps} gaps between chunks were stalls (> {limit_ms:.1f} ms); "
            f"{overlapping} of them overlapped another request's prefill of a long prompt",
            f"TPOT P99 {_fmt(s.tpot_ms.p99, '.1f')} ms; max_num_batched_tokens {_fmt(run.budget)}",
        ],
        knobs=[
            "lower --max-num-batched-tokens: smaller prefill chunks keep each decode step short "
            "(better ITL, a little worse TTFT)",
            "--long-prefill-token-threshold and --max-num-partial-prefills 1 limit how much of a "
            "step long prompts take",
            "serve long-prompt traffic on its own replicas (or disaggregated prefill)",
        ],
    )


def _compute_bound(run: _Run) -> Finding | None:
    busy, queue = run.metric("busy_fraction"), run.metric("num_requests_waiting_mean")
    running = run.metric("num_requests_running_mean")
    full = bool(running and run.max_num_seqs and running >= FULL_BATCH_SHARE * run.max_num_seqs)
    if busy is None or queue is None or busy < BUSY_SHARE or (queue < QUEUE_MEAN and not full):
        return None
    hardware = []
    cpu = [p.telemetry["server_cpu_cores"] for p in run.points if "server_cpu_cores" in p.telemetry]
    gpu = [p.telemetry["gpu_util_pct"] for p in run.points if "gpu_util_pct" in p.telemetry]
    if gpu:
        hardware.append(f"GPU utilization mean {np.mean(gpu):.0f}% (NVML: time a kernel ran)")
    if cpu:
        hardware.append(f"server CPU mean {np.mean(cpu):.2f} cores")
    machine = [p.telemetry["machine_cpu_cores"] for p in run.points
               if "machine_cpu_cores" in p.telemetry]
    if machine:
        hardware.append(f"whole machine's CPU mean {np.mean(machine):.2f} cores")
    s = run.s
    return Finding(
        key="compute_bound",
        title="compute-bound at full batch",
        layer="compute",
        rule=(f"server busy in >= {BUSY_SHARE:.0%} of samples with a queue (waiting mean >= "
              f"{QUEUE_MEAN:g}) or a full batch (running mean >= {FULL_BATCH_SHARE:.0%} of "
              "max_num_seqs), and no KV, max_num_seqs or token-budget limit hit"),
        evidence=[
            f"busy in {busy:.0%} of samples; waiting mean {queue:.1f}",
            run.context(),
            (f"mean {_fmt(run.metric('tokens_per_step_mean'), '.0f')} tokens per step of a "
             f"{_fmt(run.budget)} budget; output {s.output_throughput_tok_s:,.0f} tok/s"
             if s else ""),
            *hardware,
        ],
        knobs=[
            "this is the hardware's capacity for this model: lower the request rate, or serve "
            "it on a GPU" if run.cpu else
            "this is the hardware's capacity for this model: lower the request rate, or add "
            "replicas (-dp) or GPUs (-tp)",
            "cheaper steps: a smaller model, speculative decoding for decode-heavy traffic; on "
            "a GPU also fp8 weights (--quantization fp8) and --kv-cache-dtype fp8" if run.cpu else
            "cheaper steps: fp8 weights (--quantization fp8), --kv-cache-dtype fp8, a smaller "
            "model, speculative decoding for decode-heavy traffic",
            "keep CUDA graphs and torch.compile on (no --enforce-eager)",
        ],
    )


def _client_concurrency(run: _Run) -> Finding | None:
    cap = run.result.config.load.max_concurrency
    c, s = run.c, run.s
    if not cap or c is None or s is None or c.slot_wait_ms.p50 is None or not s.e2el_ms.mean:
        return None
    if c.slot_wait_ms.p50 < SLOT_WAIT_SHARE * s.e2el_ms.mean:
        return None
    if run.queued():
        return None
    return Finding(
        key="client_concurrency_limit",
        title="load too light: client concurrency limit",
        layer="client",
        rule=(f"max_concurrency set, client slot wait P50 >= {SLOT_WAIT_SHARE:.0%} of mean E2EL, "
              "server never queued"),
        evidence=[
            f"the client allowed {cap} request(s) in flight; requests waited P50 "
            f"{c.slot_wait_ms.p50:.0f} ms for a slot (mean E2EL {s.e2el_ms.mean:.0f} ms)",
            f"the server was mostly idle: {run.context()}",
            f"output {s.output_throughput_tok_s:,.0f} tok/s",
        ],
        knobs=[
            "raise the client's max_concurrency (or the request rate): the server has headroom",
            "a sweep over concurrency levels shows where latency starts to climb",
        ],
    )


def _no_bottleneck(run: _Run) -> Finding:
    s = run.s
    evidence = [run.context(),
                f"busy in {_fmt(_pct(run.metric('busy_fraction')), '.0f', '%')} of samples, "
                f"preemptions {_fmt(run.metric('preemptions'))}"]
    if s is not None:
        evidence.append(
            f"TTFT P99 {_fmt(s.ttft_ms.p99)} ms, TPOT P99 {_fmt(s.tpot_ms.p99, '.1f')} ms, "
            f"output {s.output_throughput_tok_s:,.0f} tok/s"
        )
        if s.goodput_rps is not None and s.good_requests is not None:
            evidence.append(f"{s.good_requests} of {s.num_requests} requests met the SLO")
    met = (s.good_requests / s.num_requests
           if s is not None and s.good_requests is not None and s.num_requests else None)
    if met is not None and met < SLO_MET_SHARE:
        return Finding(
            key="no_bottleneck",
            title=f"no limit hit, yet {s.num_requests - s.good_requests} of {s.num_requests} "
                  "requests missed the SLO (nothing queued: the time went to the engine's steps)",
            layer="none",
            rule=(f"none of the bottleneck rules fired, and fewer than {SLO_MET_SHARE:.0%} of "
                  "the requests met the SLO"),
            evidence=evidence,
            knobs=["nothing queued, so the time went to the engine's steps: a lower load "
                   "shrinks the batch and each step a little; a sweep down to concurrency 1 "
                   "shows whether any load meets this SLO on this machine",
                   "if even one request at a time misses it: a faster machine (a GPU), a "
                   "smaller model, or an SLO this hardware can hold" if run.cpu else
                   "if even one request at a time misses it: a faster machine, a smaller model, "
                   "fp8 weights (--quantization fp8), or an SLO this hardware can hold"],
        )
    return Finding(
        key="no_bottleneck",
        title="no bottleneck: the load was too light",
        layer="none",
        rule="none of the bottleneck rules fired",
        evidence=evidence,
        knobs=["raise the load (request rate or concurrency) until a limit shows: a sweep or an "
               "SLO search finds the highest load that still meets the SLO"],
    )


RULES = (
    _client_saturated,
    _kv_exhausted,
    _budget_saturated,
    _concurrency_cap,
    _prefill_interference,
    _compute_bound,
    _client_concurrency,
)


def diagnose(result: RunResult | str | Path) -> Diagnosis:
    """Diagnose a run: which layer limited it, with evidence numbers and knobs to try.

    Args:
        result: a :class:`RunResult` (loaded from or saved to a folder, so its records and time
            series can be read) or a run folder.

    Returns:
        A :class:`Diagnosis` whose first finding is the limiting one; "no bottleneck" when no
        rule fired.

    Raises:
        FileNotFoundError: a folder without ``summary.json``.
        ValueError: the run has no summary (nothing was measured).
    """
    if not isinstance(result, RunResult):
        result = RunResult.load(result)
    if result.summary is None:
        raise ValueError(f"run {result.name} has no summary to diagnose "
                         f"({result.stopped_early or 'nothing was measured'})")
    run = _Run(result)
    findings = [f for rule in RULES if (f := rule(run)) is not None]
    if any(f.layer in ("memory", "scheduling") for f in findings):
        # "compute-bound" means no limit of the server's settings was hit
        findings = [f for f in findings if f.key != "compute_bound"]
    if not findings:
        findings.append(_no_bottleneck(run))
    for f in findings:   # drop empty evidence lines (a rule may skip an unknown number)
        object.__setattr__(f, "evidence", [e for e in f.evidence if e])
    return Diagnosis(run=result.name, path=result.path, findings=findings)


__all__ = ["Diagnosis", "Finding", "diagnose"]

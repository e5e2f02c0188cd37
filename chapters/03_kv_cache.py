# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (vllm-course)
#     language: python
#     name: vllm-course
# ---

# %% [markdown]
# # 03 · PagedAttention and the KV cache
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (CPU build, profile
# `cpu-tiny`); the H200 results are from vLLM 0.26.0.
#
# How many requests a vLLM server can run at once is decided mostly by one pool of memory: the
# KV cache. This chapter computes its size from the model's shape before the server starts,
# checks the prediction against what the server reports, and watches the pool fill up block by
# block.
#
# ## What you will learn
# - why a server keeps a KV cache, and how many bytes one token of it takes, from the model's
#   `config.json`;
# - how to predict the KV cache's capacity in tokens from the memory you give it, and check the
#   prediction against the startup log;
# - how PagedAttention hands out the cache in blocks, and how many blocks a request takes;
# - that `--max-model-len` does not change the size of the pool; it changes only the "maximum
#   concurrency" that vLLM reports;
# - how KV cache usage rises as requests run and grow.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. Why a KV cache, and how big is one token of it?
# To generate token *n*, every attention layer compares the new token's query with the **keys**
# of all *n* − 1 tokens before it and mixes their **values**. Recomputing those keys and values at
# every step would repeat the whole prefill each time, so the server keeps them: the **KV cache**
# (KV缓存). It grows by one token per request per decode step, and a request's cache is freed
# when the request finishes.
#
# Per token, each layer stores one key vector and one value vector per **KV head**, each of
# `head_dim` numbers:
#
# $$\text{KV bytes per token} = 2 \times \text{layers} \times \text{KV heads} \times
# \text{head\_dim} \times \text{bytes per number}$$
#
# (2 for K and V.) With grouped-query attention (GQA), several query heads share one KV head, so
# the number of KV heads, not of attention heads, counts. The numbers are stored in the KV cache's
# dtype: `auto` by default, the model's own dtype. That differs between the course's machines:
# the CPU profile `cpu-tiny` runs `tiny-mistral` in **float32 (4 bytes)**, because on most x86
# CPUs (those without AVX-512 BF16 or AMX, which includes most laptops) PyTorch's bfloat16 matmul
# is about 100x slower than float32; the GPU profiles run Mistral-7B in **bfloat16 (2 bytes)**.
# All of it is in the model card's `config.json` (`torch_dtype`):

# %%
import json

from vllm_course import models

config = json.loads((models.card_dir(profile.model) / "config.json").read_text())
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def kv_bytes_per_token(c: dict) -> int:
    """KV cache bytes per token: 2 (K and V) x layers x KV heads x head_dim x dtype bytes."""
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return (2 * c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim
            * DTYPE_BYTES[c["torch_dtype"]])


for key in ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "hidden_size", "torch_dtype"]:
    print(f"{key:22} {config.get(key)}")
BYTES_PER_TOKEN = kv_bytes_per_token(config)
print(f"\nKV cache per token: {BYTES_PER_TOKEN:,} bytes ({BYTES_PER_TOKEN / 1024:g} KiB)")

# %% [markdown]
# For `tiny-mistral` in float32: 2 × 4 layers × 2 KV heads × 64 × 4 bytes = 4,096 bytes per
# token (it would be 2,048 in bfloat16). With one KV head per attention head (4 instead of 2) it
# would be twice that. A 1,000-token request holds about 4 MB. For Mistral-7B in bfloat16 the same
# formula gives 128 KiB per token (section "On the H200").

# %% [markdown]
# ## 2. Predict the pool, then ask the server
# On the CPU build the KV cache gets exactly the memory given with `--kv-cache-memory-bytes`; the
# `cpu-tiny` profile passes 1 GiB. (On a GPU, vLLM sizes it from `--gpu-memory-utilization`
# instead: see "On the H200".) The cache is cut into **blocks** of `block_size` tokens, each
# holding that many tokens' K and V for every layer, so the prediction is:
#
# $$\text{blocks} = \left\lfloor \frac{\text{KV memory}}{\text{block\_size} \times
# \text{bytes per token}} \right\rfloor, \qquad \text{tokens} = \text{blocks} \times
# \text{block\_size}$$
#
# The block size is the attention backend's choice (vLLM's CPU backend uses 128; on GPUs the
# default is 16, and some attention backends force larger blocks), so we read it from the
# server. One request to the profile's default server gives us its startup facts:

# %%
from vllm_course import LoadSpec, RunConfig, ServerConfig, SyntheticWorkload, run_experiment

OUT = nb.results_root("03_kv_cache")
TINY = SyntheticWorkload(num_requests=1, input_len=64, output_len=8)


def predict_tokens(kv_memory_bytes: int, block_size: int) -> int:
    """KV cache capacity in tokens: whole blocks that fit in the memory, times block_size."""
    return kv_memory_bytes // (block_size * BYTES_PER_TOKEN) * block_size


default = await run_experiment(
    RunConfig(name="default-server", server=ServerConfig(model=profile.model), workload=TINY), OUT)
facts = default.startup.model_dump()
block_size = facts["block_size"]
kv_memory = profile.server_args.get("kv-cache-memory-bytes")
print(f"block size {block_size} tokens, max_model_len {facts['max_model_len']:,}")
if kv_memory:
    predicted = predict_tokens(int(kv_memory), block_size)
    print(f"--kv-cache-memory-bytes {int(kv_memory):,} / ({block_size} x {BYTES_PER_TOKEN:,} B) "
          f"= {predicted // block_size:,} blocks = {predicted:,} tokens predicted")
else:
    predicted = None
    print("this profile sizes the KV cache with --gpu-memory-utilization: see 'On the H200'")
print(f"the server's log: KV cache size {facts['kv_cache_tokens']:,} tokens")

# %% [markdown]
# The prediction matches the server's log to the token: 1 GiB / 4,096 bytes = 262,144 tokens,
# 2,048 blocks of 128. vLLM also publishes the pool on `/metrics`, as labels of the
# `vllm:cache_config_info` metric (`num_gpu_blocks="2048"`, `block_size="128"`,
# `kv_cache_memory_bytes="1073741824"`; "gpu" in the name even on the CPU build).
#
# One detail of vLLM 0.32's log line: it prints "KV cache size" as *maximum concurrency ×
# `max_model_len`* (`get_kv_cache_capacity` in `vllm/v1/core/kv_cache_utils.py`), which equals
# blocks × block size only when `max_model_len` is a multiple of the block size, as it is on every
# server of this chapter. Exercise 2 shows the other case.

# %% [markdown]
# ## 3. PagedAttention: the cache in blocks
# Before vLLM, servers reserved one contiguous stretch of cache per request, as long as the
# longest request could ever be. Most requests are far shorter, so most of that memory sat
# empty. **PagedAttention** (分页注意力) borrows the idea of virtual-memory pages: a request's
# cache is a list of fixed-size **blocks** (块) that need not sit next to each other (a per-request
# *block table* maps the request's token positions to physical blocks), and blocks are taken from
# the shared pool only as the request grows. The only waste is the unfilled tail of each request's
# last block.
#
# A request of *p* prompt and *o* output tokens ends up holding ⌈(p + o) / block_size⌉ blocks:

# %%
import math

import pandas as pd

mml = facts["max_model_len"]
rows = []
for prompt, output in [(100, 28), (128, 64), (1000, 200), (3000, 1000), (mml - 64, 64)]:
    blocks = math.ceil((prompt + output) / block_size)
    rows.append({
        "prompt + output tokens": f"{prompt} + {output}",
        "blocks": blocks,
        "tokens the blocks hold": blocks * block_size,
        "unused slots in the last block": blocks * block_size - prompt - output,
        "KV memory (KiB)": blocks * block_size * BYTES_PER_TOKEN / 1024,
        f"share of a {mml:,}-token reservation": f"{blocks * block_size / mml:.1%}",
    })
pd.DataFrame(rows).set_index("prompt + output tokens")

# %% [markdown]
# The line vLLM logs at startup, "Maximum concurrency for *L* tokens per request: *X*x", divides
# the pool by the blocks of one request of the full `max_model_len` *L*: 2,048 blocks / 32 = 64
# on the CPU server. It is the number of *worst-case* requests that fit at once; requests of
# 128 tokens take one block each, so thousands of them would fit (the running batch is capped
# separately by `max_num_seqs`, 128 on the CPU build).

# %% [markdown]
# ## 4. `--max-model-len` does not size the pool
# A common tuning tip says lowering `--max-model-len` "reduces reserved memory". It does not:
# the pool is sized from `--kv-cache-memory-bytes` (or `--gpu-memory-utilization`), never from
# `max_model_len`. What `max_model_len` does: vLLM refuses to start if the pool cannot hold one
# request of that length; it changes the reported maximum concurrency; and only when chunked
# prefill is off (it is on by default in V1) can it change `max_num_batched_tokens`.
#
# A second server with the same KV memory as the default one and `--max-model-len 1024`
# (`--enforce-eager` only makes a CPU server start faster; it does not touch the KV cache):

# %%
SHORT = ServerConfig(model=profile.model, args={"enforce-eager": True, "max-model-len": 1024})
short = await run_experiment(RunConfig(name="max-model-len-1024", server=SHORT, workload=TINY), OUT)
keys = ["max_model_len", "block_size", "kv_cache_tokens", "max_concurrency"]
table = pd.DataFrame({
    f"--max-model-len {run.startup.max_model_len:,}": [getattr(run.startup, k) for k in keys]
    for run in (default, short)
}, index=keys)
if kv_memory:
    table.loc["predicted kv_cache_tokens"] = predicted
table

# %% [markdown]
# Same memory, same pool: 262,144 tokens in 2,048 blocks of 128 on both CPU servers. Only the
# maximum concurrency changed, from 64 requests of 4,096 tokens to 256 of 1,024: the same pool
# divided by a smaller worst case. To fit more requests into memory, give the KV cache more
# memory, store it in fewer bytes (`--kv-cache-dtype fp8`, chapter 15; vLLM's CPU build allows it
# only on CPUs with AVX-512 or AMX), or run fewer at once; `--max-model-len` only protects you
# from requests longer than you want to serve.

# %% [markdown]
# ## 5. Watching the blocks get taken
# On the 1,024-token server, three requests of 100 prompt and 400 output tokens, sent together.
# Each holds one block of 128 after its prefill, a second block once prompt + output pass 128
# tokens, and so on up to four blocks at 500 tokens. From each request's record (how many tokens
# it had received at each moment) we compute the blocks in use, and put the server's
# `vllm:kv_cache_usage_perc`, sampled every 0.25 s, beside it. The gauge is a fraction of the
# pool; one block of the pool is a reserved placeholder (the "null block", `BlockPool.get_usage`
# in `vllm/v1/core/block_pool.py`), so usage × (blocks − 1) is the number of blocks in use.

# %%
PROMPT, OUTPUT, REQUESTS = 100, 400, 3

fill = await run_experiment(
    RunConfig(name="fill-up", server=SHORT,
              workload=SyntheticWorkload(num_requests=REQUESTS, input_len=PROMPT,
                                         output_len=OUTPUT, seed=3),
              load=LoadSpec(rate_rps=float("inf"), num_warmups=0)),
    OUT, sample_interval_s=0.25,
)
pool_blocks = fill.startup.kv_cache_tokens // block_size
usable_blocks = pool_blocks - 1
blocks_each = math.ceil((PROMPT + OUTPUT) / block_size)
records = fill.records()


def blocks_in_use(t: float) -> int:
    """Blocks the requests held at time t (s), from the tokens each had received by then."""
    total = 0
    for r in records:
        if r.sent_s <= t < r.last_choice_s:
            tokens = r.prompt_tokens + sum(n for ts, n in zip(r.chunk_s, r.chunk_tokens) if ts <= t)
            total += math.ceil(tokens / block_size)
    return total


print(f"pool {pool_blocks:,} blocks of {block_size} tokens ({usable_blocks:,} usable); each "
      f"request ends with {blocks_each} blocks, {REQUESTS * blocks_each} for the three")
fill

# %%
import matplotlib.pyplot as plt
import numpy as np

duration = fill.summary.duration_s
t = np.linspace(0, duration, 1500)
from_records = np.array([blocks_in_use(x) for x in t])
samples = [(p.t_s, p.kv_cache_usage * usable_blocks) for p in fill.timeseries().points
           if 0 < p.t_s < duration and p.kv_cache_usage is not None]

fig, ax = plt.subplots(figsize=(9, 4))
ax.step(t, from_records, where="post", label="blocks in use, from the request records")
if samples:
    st, sb = zip(*samples)
    ax.plot(st, sb, "o", color="tab:red",
            label="server: vllm:kv_cache_usage_perc x usable blocks")
ax.axhline(REQUESTS * blocks_each, color="grey", ls=":",
           label=f"{REQUESTS} requests x {blocks_each} blocks")
ax.set_ylim(0, REQUESTS * blocks_each + 2)
ax.set_ylabel("KV cache blocks in use (count)")
ax.set_xlabel("time since the first request was sent (s)")
ax.set_title(f"{REQUESTS} requests of {PROMPT} + {OUTPUT} tokens taking blocks of {block_size} "
             f"tokens ({profile.model}, vLLM {fill.startup.vllm_version})")
ax.legend(loc="lower center", fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The blocks in use climb in steps as the requests cross multiples of 128 tokens (the three
# decode in step, so their steps coincide) up to 12, then drop to 0 as the requests finish and
# free their blocks. The server's samples sit on the steps, or a little ahead of them: the
# server allocates a block when a request's next token needs it, and our client sees that token a
# moment later (later still when the machine is busy: both share its cores). Freed blocks keep
# their contents for prefix caching but count as free, so usage returns to 0.
#
# The pool here has 2,047 usable blocks, so 12 is about 0.6 % of it. In a pool of 15 usable
# blocks the same three requests would take 80 %, and a fourth one arriving near their end would
# need a 16th block that the pool does not have: vLLM would then preempt a request (free its
# blocks and recompute it later, chapter 17). Exercise 4 builds that server.

# %% [markdown]
# ## What you should see
# - **The predicted pool equals the server's**: memory / (block_size × bytes per token), rounded
#   down to whole blocks, is the KV cache size in the startup log (on the CPU profile, float32:
#   1 GiB → 262,144 tokens).
# - **`--max-model-len` does not change the pool**: both servers report the same KV cache tokens;
#   the reported maximum concurrency grows 4x when `max_model_len` shrinks 4x.
# - **The blocks follow the arithmetic**: no sample of the server's gauge shows more blocks than
#   the three requests can hold (3 × ⌈500 / 128⌉ = 12), and nothing is preempted.

# %%
if predicted is not None:
    nb.check(predicted == facts["kv_cache_tokens"],
             "predicted KV cache tokens equal the server's (the profile's default server)",
             f"predicted {predicted:,}, server {facts['kv_cache_tokens']:,}")
a, b = default.startup.model_dump(), short.startup.model_dump()
pools = (f"{a['kv_cache_tokens']:,} tokens at max_model_len {a['max_model_len']:,} and "
         f"{b['kv_cache_tokens']:,} at {b['max_model_len']:,}")
if kv_memory:
    nb.check(a["kv_cache_tokens"] == b["kv_cache_tokens"],
             "both servers have the same pool, whatever their max_model_len", pools)
else:   # sized from --gpu-memory-utilization: what the memory profiling left, not a flag
    print(f"pools sized by vLLM's memory profiling: {pools}")
scale = a["max_model_len"] / b["max_model_len"]
nb.check(abs(b["max_concurrency"] / a["max_concurrency"] - scale) < 0.01 * scale,
         f"a {scale:g}x shorter max_model_len gives a {scale:g}x higher maximum concurrency",
         f"{a['max_concurrency']}x at {a['max_model_len']:,} vs {b['max_concurrency']}x at "
         f"{b['max_model_len']:,}")
most = max((blocks for _, blocks in samples), default=0.0)
nb.check(most <= REQUESTS * blocks_each + 1e-6 and not fill.server_metrics.preemptions,
         f"no gauge sample shows more than {REQUESTS} x {blocks_each} blocks, and nothing is "
         "preempted",
         f"{len(samples)} samples, at most {most:.1f} blocks; records' peak "
         f"{from_records.max()} blocks; preemptions {fill.server_metrics.preemptions:.0f}")

# %% [markdown]
# ## On the H200
# The H200 runs (vLLM 0.26.0, 2026-11-29) serve the `mistral-7b-v0.3` card with
# `--max-model-len 8192` and no memory flag, so vLLM sizes the KV cache from
# `--gpu-memory-utilization`, whose default is 0.92 since vLLM 0.20 (it was 0.9 before). It is a
# fraction of the GPU's **total** memory; inside that budget sit the weights, the activation peak
# of a forward pass, memory outside PyTorch's allocator and (since 0.20) the CUDA graphs; the KV
# cache gets the rest. The same formula as in section 1, on the 7B card:

# %%
card7b = json.loads((models.card_dir("mistral-7b-v0.3") / "config.json").read_text())
bytes_7b = kv_bytes_per_token(card7b)
print(f"mistral-7b-v0.3: 2 x {card7b['num_hidden_layers']} layers x "
      f"{card7b['num_key_value_heads']} KV heads x {card7b['head_dim']} x "
      f"{DTYPE_BYTES[card7b['torch_dtype']]} bytes ({card7b['torch_dtype']}) = "
      f"{bytes_7b:,} bytes per token")

burst = nb.reference("h200/observability/h200-burst/summary.json")
demo = nb.reference("h200/demo/summary.json")
GiB = 2**30
if burst and demo:
    h200 = burst["startup"]
    kv_tokens, bs16 = h200["kv_cache_tokens"], h200["block_size"]
    print(f"H200 startup log: KV cache {kv_tokens:,} tokens (the demo run: "
          f"{demo['startup']['kv_cache_tokens']:,}), block size {bs16}, "
          f"max concurrency {h200['max_concurrency']}x at {h200['max_model_len']:,} tokens")
    print(f"= {kv_tokens // bs16:,} blocks, {kv_tokens * bytes_7b / GiB:.2f} GiB of KV cache")

# %% [markdown]
# Where do 113.95 GiB come from? The GPU has 143,771 MiB (what `nvidia-smi` reports on the
# course's H200). The weights follow from the same `config.json`: about 7.25 billion parameters
# in bfloat16.

# %%
def parameters(c: dict) -> int:
    """Parameters of a Mistral-style decoder (untied embeddings, no biases)."""
    h, hd = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * c["intermediate_size"] + 2 * h
    return 2 * c["vocab_size"] * h + c["num_hidden_layers"] * per_layer + h


H200_TOTAL_MIB = 143_771
GMU = 0.92
if burst:
    budget = GMU * H200_TOTAL_MIB * 2**20
    weights = 2 * parameters(card7b)
    kv_bytes = kv_tokens * bytes_7b
    budget_rows = pd.Series({
        "GPU memory (GiB)": H200_TOTAL_MIB * 2**20 / GiB,
        "x 0.92 = vLLM's budget": budget / GiB,
        f"- weights ({parameters(card7b) / 1e9:.2f} B params x 2 bytes)": weights / GiB,
        "= left for activations, CUDA graphs, KV cache": (budget - weights) / GiB,
        "KV cache measured (startup log)": kv_bytes / GiB,
        "rest: activation peak, non-torch memory, CUDA graphs": (budget - weights - kv_bytes) / GiB,
    }, name="GiB")
    display(budget_rows.round(2).to_frame())
    used = nb.reference("h200/observability/h200-light/timeseries.json")
    if used:
        print(f"NVML: {used['points'][0]['telemetry']['gpu_mem_used_bytes'] / GiB:.1f} GiB of "
              "the GPU in use during the h200-light run")

# %% [markdown]
# The arithmetic leaves 1.7 GiB of the 0.92 budget for the activation peak, memory outside
# PyTorch and the CUDA graphs. We do not split that number further: vLLM's startup log itemizes it
# but was not kept with these runs (that breakdown is pending, with the reference runs). What the
# numbers do show: the KV cache is what remains of 0.92 × the GPU's memory after the weights and
# a small overhead, and NVML saw about as much memory in use as that budget.
#
# With 58,342 blocks of 16 tokens, how many requests fit? The `h200-burst` run sent 2,000 requests
# of 1,024 prompt + 256 output tokens at once. Each holds 64 blocks after its prefill and 80 at its
# end, so the pool holds 729 of them at full length, fewer than `max_num_seqs` (1,024). Below, each
# sample of that run: KV cache usage against the number of running requests, between the two
# lines "64 blocks each" and "80 blocks each".

# %%
series = nb.reference("h200/observability/h200-burst/timeseries.json")
if series and burst:
    pts = [(p["running"], p["kv_cache_usage"], p["preemptions"]) for p in series["points"]
           if p["running"]]
    running, usage, preempted = (np.array(v, dtype=float) for v in zip(*pts))
    blocks_7b = kv_tokens // bs16
    prompt_blocks, full_blocks = 1024 // bs16, (1024 + 256) // bs16
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.scatter(running, 100 * usage, c=preempted, cmap="viridis", s=18)
    x = np.linspace(0, running.max() * 1.05, 50)
    for per, style in ((prompt_blocks, "--"), (full_blocks, ":")):
        ax.plot(x, np.minimum(100, 100 * x * per / blocks_7b), style, color="grey",
                label=f"{per} blocks per running request")
    ax.axvline(burst["startup"]["max_num_seqs"], color="tab:red", lw=1,
               label="max_num_seqs 1024")
    ax.set_xlabel("running requests (count)")
    ax.set_ylabel("KV cache usage (%)")
    ax.set_title("H200, vLLM 0.26.0, h200-burst: KV usage vs running (colour: preemptions so far)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    plt.show()
    inside = np.all((usage >= running * prompt_blocks / blocks_7b - 1e-3)
                    & (usage <= running * full_blocks / blocks_7b + 1e-3))
    nb.check(bool(inside), "H200: every sample lies between 64 and 80 blocks per running request",
             f"{len(pts)} samples")
    nb.check(kv_bytes < budget - weights,
             "H200: the KV cache fits in 0.92 x GPU memory minus the weights",
             f"{kv_bytes / GiB:.2f} GiB < {(budget - weights) / GiB:.2f} GiB")
    print(f"peak running {running.max():.0f} (max_num_seqs {burst['startup']['max_num_seqs']}), "
          f"KV usage peak {100 * usage.max():.1f} %, "
          f"{burst['server_metrics']['preemptions']:.0f} preemptions")

# %% [markdown]
# Usage rose with the running requests along the 64-blocks line while they were admitted, then
# above it as each one grew. The pool, not `max_num_seqs`, set the limit: at about 855 running
# requests it was full, and vLLM preempted 151 times. Chapter 09 tunes the memory side
# (`--gpu-memory-utilization`, `--kv-cache-memory-bytes`), chapter 13 `--max-model-len`, chapter 17
# preemption.
#
# The H200 numbers above are from the `h200-burst` run of the observability reference set
# (`reference/h200/observability/`). This chapter's own cells also ran on the H200 (sections 2-5
# on the `h200` profile, `vllm-course reference run ch03`, 2026-12-04): the pool of 933,952
# tokens is the same at `--max-model-len` 8,192 and 1,024 while the reported maximum concurrency
# grows 8x, and three growing requests took 96 blocks of 16 tokens without a preemption.

# %%
nb.show_reference_run("h200/chapters/03_kv_cache/run.json")

# %% [markdown]
# ## Summary
# - KV bytes per token = 2 × layers × KV heads × head_dim × dtype bytes: 4 KiB for
#   `tiny-mistral` in float32 (the CPU profile), 128 KiB for Mistral-7B in bfloat16 (GQA: 8 KV
#   heads for 32 query heads).
# - The pool is the KV memory divided into blocks of `block_size` tokens; with
#   `--kv-cache-memory-bytes` its size in tokens is predictable to the token. On a GPU it is what
#   is left of `--gpu-memory-utilization` (0.92) × total memory after weights and overheads.
# - PagedAttention gives a request blocks as it grows, ⌈tokens / block_size⌉ of them; only the
#   last block is partly empty.
# - `--max-model-len` does not change the pool; it changes the reported maximum concurrency
#   (pool / blocks of one full-length request) and the longest request accepted.
# - The server's `vllm:kv_cache_usage_perc` × (blocks − 1) is the blocks in use; it follows
#   ⌈tokens / block_size⌉ per running request.
#
# ## Exercises
# 1. 🌟 Compute the KV bytes per token of a model with 80 layers, 8 KV heads and head_dim 128
#    (the shape of Llama-3-70B), in bfloat16 and with `--kv-cache-dtype fp8`.
# 2. 🌟🌟 A server for `tiny-mistral` starts with the profile's 1 GiB and `--max-model-len 1000`
#    (not a multiple of 128). Predict the pool in blocks, and what the log's "KV cache size" and
#    "Maximum concurrency" lines will say. Then run it and check.
# 3. 🌟🌟 How many requests of 1,024 prompt + 256 output tokens fit in the H200's pool at once if
#    the KV cache were stored in fp8? Would the `h200-burst` run still have preempted?
# 4. 🌟🌟🌟 Start a server whose pool holds 16 blocks: `--kv-cache-memory-bytes` 8 MiB
#    (16 × 128 tokens × 4,096 bytes) and `--max-model-len 1024`. Send it four requests of
#    100 + 400 tokens at once. Predict the blocks they need at the end and what the server does;
#    then check with `result.server_metrics.preemptions`.
#
# Answers: `solutions/chapters/03_kv_cache.md`.

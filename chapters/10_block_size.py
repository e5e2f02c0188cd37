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
# # 10 · `--block-size`: the size of a KV cache page
#
# *Stage 2: tune each knob: principle and trade-off.* Checked against vLLM 0.32.0 (CPU build,
# profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Chapter 03 cut the KV cache into blocks and took the block size as given. This chapter moves
# it. What does the block size decide, which sizes will the attention backend run, and what
# changes, measured, when a server uses smaller blocks than its default?
#
# ## What you will learn
# - what one block is, and the three things its size decides: the memory a request wastes in
#   its last block, the granularity of the prefix cache, and how the attention kernel walks the
#   cache;
# - where the default comes from (16 on GPUs when left unset, 128 on the CPU build), and which
#   sizes a backend accepts, read from vLLM's own source;
# - that the block size does not change the pool's size in token slots, only how it is cut up
#   and how much of it each request holds, and what the startup log's "KV cache size" counts;
# - that only **full** blocks are cached, so a shared prefix shorter than a block is never
#   reused: predicted from the prompts, then measured with the server's counters;
# - why the right setting for throughput is almost always the default.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. What a block is
# PagedAttention (分页注意力, chapter 03) keeps each request's keys and values in **blocks** (块)
# of `block_size` tokens. One block holds those tokens' K and V for every layer, so its size in
# bytes is block_size × the KV bytes per token. A request's **block table** (块表) lists its
# blocks in order; they can sit anywhere in the pool. The block size decides three things:
#
# 1. **Waste in the last block.** A request of *n* tokens holds ⌈*n* / block_size⌉ blocks. The
#    unused slots of its last block are reserved but empty: between 0 and block_size − 1 tokens,
#    about block_size / 2 on average (internal fragmentation, 内部碎片).
# 2. **Prefix-cache granularity.** The prefix cache (chapter 16) hashes a block only when it is
#    full, and a hit is a whole number of blocks. A shared prefix is reused only up to the last
#    block boundary inside it.
# 3. **How the kernel reads the cache.** The attention kernel walks a request's block table.
#    Larger blocks mean fewer, larger contiguous reads and shorter tables; each backend's kernels
#    are written for particular sizes, so the backend decides what it accepts.
#
# Bigger is not simply better or worse: bigger blocks waste more and cache less precisely;
# smaller ones mean more blocks for the scheduler and the kernel to handle.

# %%
import json

from vllm_course import models

config = json.loads((models.card_dir(profile.model) / "config.json").read_text())
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
BYTES_PER_TOKEN = (2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
                   * DTYPE_BYTES[config["torch_dtype"]])
print(f"{profile.model}: {BYTES_PER_TOKEN:,} bytes of KV per token (chapter 03)")
for bs in (16, 32, 128, 512):
    print(f"  a block of {bs:>3} tokens = {bs * BYTES_PER_TOKEN / 1024:>5g} KiB")

# %% [markdown]
# ## 2. Which block sizes the backend accepts
# A popular tuning guide says: "the default block size is 16 tokens; 16 or 32 are the usual
# choices". That is **partly true**. vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE` is 16 and is used
# when you leave `--block-size` unset, but the attention backend has the last word: on GPUs
# FlashAttention accepts any multiple of 16, FlashMLA forces 64, CUTLASS-MLA 128, and hybrid
# (Mamba) models get larger blocks. Since vLLM 0.17 the command line takes any integer > 0 (before,
# only 1, 8, 16, 32, 64, 128 and, on some builds, 256); whether a server can run it is the
# backend's business. For throughput work, the advice that holds is: leave it at the default.
#
# The CPU build is a backend of its own. Rather than trust a guide, read the installed vLLM
# (without importing it: only the files):

# %%
import re

for relative, pattern in [
    ("config/cache.py", r"DEFAULT_BLOCK_SIZE: ClassVar"),
    ("platforms/cpu.py", r"cache_config\.block_size = 128|block_size % 32 != 0"),
    ("v1/attention/backends/cpu_attn.py", r"return \[MultipleOf\("),
    ("v1/worker/utils.py", r"No common block size for"),
]:
    print("\n".join(nb.vllm_source_lines(relative, pattern)))

# %% [markdown]
# Read together:
# - `CacheConfig.DEFAULT_BLOCK_SIZE = 16` is the generic default;
# - the CPU platform replaces it with **128** when `--block-size` is not given
#   (`platforms/cpu.py`), which is why chapter 03's server reported 128;
# - the CPU attention backend declares its kernels' block sizes as `[MultipleOf(32)]`: any
#   multiple of 32;
# - a size that is no multiple of 32 only draws a *warning* at start-up ("CPU backend prefers
#   block_size is multiples of 32, otherwise the performance is not optimized"). Then, when the
#   worker allocates the cache, `select_common_block_size` finds no kernel block size that divides
#   it and raises. We tried it: servers with `--block-size 16` (the GPU default) and
#   `--block-size 48` both load the model, log the warning, then die while allocating the KV
#   cache, with `ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])` (48 in
#   the other one). The warning's "prefers" is misleading: on vLLM 0.32.0 the CPU build
#   *requires* a multiple of 32.
#
# The rule as a function, for the sizes people usually try:

# %%
import pandas as pd


def cpu_accepts(block_size: int) -> bool:
    """vLLM 0.32 CPU_ATTN: a kernel block size must be a multiple of 32."""
    return block_size > 0 and block_size % 32 == 0


candidates = [8, 16, 32, 48, 64, 96, 128, 256, 512]
pd.DataFrame({"CPU build (CPU_ATTN)": ["runs" if cpu_accepts(b) else "crashes at start-up"
                                       for b in candidates],
              "FlashAttention (GPU) accepts it": ["yes" if b % 16 == 0 else "no"
                                                  for b in candidates]},
             index=pd.Index(candidates, name="--block-size"))

# %% [markdown]
# ## 3. Two servers, two block sizes: the pool
# We compare the CPU default (128, the profile's server with `--enforce-eager`, shared with other
# chapters) with the smallest size the CPU backend runs, 32. (`--enforce-eager` only makes a CPU
# server start faster.) Both get the same 1 GiB (`--kv-cache-memory-bytes` from the profile; on a
# GPU 2 GiB, given by this chapter), so the prediction is chapter 03's:
# ⌊memory / (block_size × bytes per token)⌋ blocks.
#
# One detail of vLLM 0.32's startup log: its "KV cache size: N tokens" is not blocks ×
# block_size. It is the "maximum concurrency" (blocks / the blocks one `max_model_len` request
# needs, ⌈max_model_len / block_size⌉) times `max_model_len`, `get_kv_cache_capacity` in
# `vllm/v1/core/kv_cache_utils.py`. The two agree when the block size divides `max_model_len`;
# the true number of blocks is on `/metrics`, as the `num_gpu_blocks` label of
# `vllm:cache_config_info`.

# %%
import math

import httpx

from vllm_course import LoadSpec, RunConfig, ServerConfig, SyntheticWorkload, run_experiment
from vllm_course.server import default_pool

OUT = nb.results_root("10_block_size")
DEFAULT_BS = 128                                   # the CPU build's default (section 2)
SIZES = [32, DEFAULT_BS] + ([512] if nb.size() == "full" else [])
ON_CPU = profile.device == "cpu"
# the CPU profile fixes the KV cache's memory; on a GPU we fix it too (2 GiB: 16,384 tokens of
# the 7B card, room for one 8,192-token request plus the null block at every size)
KV_MEMORY = int(profile.server_args.get("kv-cache-memory-bytes", 2 << 30))


def server(block_size: int) -> ServerConfig:
    """The profile's server with --enforce-eager and KV_MEMORY of KV cache; --block-size where it
    is not the CPU default (on a GPU, whose default is 16, always)."""
    args = {"enforce-eager": True}
    if block_size != DEFAULT_BS or not ON_CPU:
        args["block-size"] = block_size
    if "kv-cache-memory-bytes" not in profile.server_args:
        args["kv-cache-memory-bytes"] = KV_MEMORY
    return ServerConfig(model=profile.model, args=args)


def predict_blocks(kv_memory_bytes: int, block_size: int) -> int:
    """Whole blocks that fit in the memory (chapter 03)."""
    return kv_memory_bytes // (block_size * BYTES_PER_TOKEN)


def predict_log_tokens(blocks: int, block_size: int, max_model_len: int) -> int:
    """vLLM 0.32's logged "KV cache size": max concurrency x max_model_len."""
    return int(blocks / math.ceil(max_model_len / block_size) * max_model_len)


def cache_config_info(config: ServerConfig) -> dict:
    """The labels of ``vllm:cache_config_info`` on a (running) server's /metrics."""
    pool = default_pool()
    srv = pool.acquire(config)
    try:
        text = httpx.get(f"{srv.base_url}/metrics", timeout=30).text
    finally:
        pool.release(srv)
    line = re.search(r"^vllm:cache_config_info\{(.*)\}", text, re.M).group(1)
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


# %% [markdown]
# The first run on each server is the prefix-cache experiment of section 5 (so the server starts
# there); here we only read what the servers say about their pools. The workload: 16 requests
# that share one 200-token text after the BOS token, each followed by 99 tokens of its own (300
# prompt tokens), 8 output tokens each, sent 1/32 s apart. Fresh text on every execution, so a
# prefix cache filled by an earlier run of this cell cannot help.

# %%
import time

from vllm_course import FileWorkload, PromptTokenizer
from vllm_course.workload import generators, prefix, write_jsonl

tokenizer = PromptTokenizer(profile.model)
SALT = time.time_ns() % 1_000_000_007               # new prompts every execution
PREFIX_LEN, OWN_LEN, N_SHARED = 200, 100, 16
shared_spec = generators.GeneratorSpec.model_validate({
    "model": profile.model, "endpoint": "completions", "seed": SALT, "num_requests": N_SHARED,
    "populations": {"shared": {
        "input_len": OWN_LEN, "output_len": 8,       # OWN_LEN includes BOS; prefix on top
        "shared_prefix": {"num_prefixes": 1, "length": PREFIX_LEN, "fraction": 1.0}}},
})
shared_requests = generators.generate(shared_spec, tokenizer)
write_jsonl(shared_requests, OUT / "shared-prefix.jsonl")

nb.start_servers(*(server(bs) for bs in SIZES))   # side by side: faster on a spare core
granularity, info = {}, {}
for bs in SIZES:
    granularity[bs] = await run_experiment(
        RunConfig(name=f"shared-prefix-bs{bs}", server=server(bs),
                  workload=FileWorkload(path=OUT / "shared-prefix.jsonl"),
                  load=LoadSpec(rate_rps=32, burstiness=float("inf"))), OUT)
    info[bs] = cache_config_info(server(bs))

pool_table = pd.DataFrame({f"--block-size {bs}": {
    "block_size (server)": r.startup.block_size,
    "blocks (num_gpu_blocks)": int(info[bs]["num_gpu_blocks"]),
    "predicted blocks": predict_blocks(KV_MEMORY, bs),
    "blocks x block_size (tokens)": int(info[bs]["num_gpu_blocks"]) * r.startup.block_size,
    "log: KV cache size (tokens)": r.startup.kv_cache_tokens,
    f"log: max concurrency at {r.startup.max_model_len:,}": r.startup.max_concurrency,
    "KiB per block": r.startup.block_size * BYTES_PER_TOKEN / 1024,
    "ready in (s)": r.startup.ready_s,
} for bs, r in granularity.items()})
pool_table

# %% [markdown]
# Same memory, same number of token slots; only the number of blocks changes, in inverse
# proportion to their size, and each block's bytes in proportion. The log's maximum concurrency
# is the same too, because `max_model_len` (4,096 in the profile) is a multiple of both sizes.
#
# A size that divides neither the memory nor `max_model_len` loses a little at both ends. With
# 96-token blocks (a multiple of 32, so the CPU backend runs it):

# %%
mml = granularity[DEFAULT_BS].startup.max_model_len
blocks96 = predict_blocks(KV_MEMORY, 96)
print(f"96-token blocks: {blocks96:,} blocks = {blocks96 * 96:,} token slots; a {mml:,}-token "
      f"request needs {math.ceil(mml / 96)} blocks ({math.ceil(mml / 96) * 96:,} slots), so the "
      f"log would say {predict_log_tokens(blocks96, 96, mml):,} tokens, "
      f"{blocks96 / math.ceil(mml / 96):.2f}x")

# %% [markdown]
# We started such a server once while writing this chapter: its log said exactly that. The
# "tokens" in the log are the slots usable by full-length requests, not the pool's slots.

# %% [markdown]
# ## 4. What a request holds: waste in the last block
# The pool is the same, but how much of it a request *holds* is not. Sixteen requests of 200
# prompt and 80 output tokens (240 at CI size: on two busy cores, 80 tokens decoded in about
# 0.9 s, time for only 1-3 samples per run), sent at once, to each server; the library samples
# `vllm:kv_cache_usage_perc` every 0.25 s. The gauge is the fraction of the pool's blocks in use
# (one block is vLLM's reserved "null block", so it counts the others: chapter 03). Times the
# usable blocks times the block size, it is the number of token slots the requests hold; from
# the requests' records we know how many tokens they actually had at that moment.
#
# We run this workload several times on each server (2 at CI size, 5 at full size), alternating
# when all the servers stay up at once (else, on a GPU, each server's repeats one after the
# other, so that it starts once), because section 6 uses the same runs for speed. On two busy
# cores the sampler does not always get its turn, so the samples of all repeats are pooled; the
# plot shows the repeat with the most.

# %%
REPEATS = nb.scaled(full=5, ci=2)
OSL = nb.scaled(full=80, ci=240)     # output tokens: CI's decode phase must span several samples
decode = {bs: [] for bs in SIZES}
# alternate the sizes when their servers all stay up at once; else (a GPU keeps one server
# live) run each size's repeats together, so that each server starts once, not REPEATS times
ALTERNATE = len(SIZES) <= default_pool().max_live
order = ([(rep, bs) for rep in range(REPEATS) for bs in SIZES] if ALTERNATE
         else [(rep, bs) for bs in SIZES for rep in range(REPEATS)])
for rep, bs in order:
    decode[bs].append(await run_experiment(
        RunConfig(name=f"decode-bs{bs}-{rep + 1}", server=server(bs),
                  workload=SyntheticWorkload(num_requests=16, input_len=200, output_len=OSL,
                                             seed=SALT + 100 * rep + bs)),
        OUT, sample_interval_s=0.25))


def tokens_held(records, t: float) -> list[int]:
    """Tokens each request in flight had at time t: its prompt plus the tokens received so far."""
    return [r.prompt_tokens + sum(n for ts, n in zip(r.chunk_s, r.chunk_tokens, strict=True)
                                        if ts <= t)
            for r in records if r.sent_s <= t < r.last_choice_s]


def slot_samples(run, bs: int) -> list[dict]:
    """Gauge samples that saw every request decoding, with the slots the records predict.

    A scrape's numbers were produced somewhere between its request and its arrival (``t_s``).
    The sampler sends each request ``interval_s`` after the previous scrape arrived, so a sample
    counts only if that bound is after the client read the last first token: the whole burst had
    been prefilled. And the server's running-request count in the same scrape must equal the
    number the client still had in flight: a request the engine has already finished (its blocks
    freed) but whose last token the client has not read yet is not in both."""
    records = run.records()
    usable = int(info[bs]["num_gpu_blocks"]) - 1     # the null block is never "in use"
    start = max(r.chunk_s[0] for r in records)
    series = run.timeseries()
    rows = []
    for prev, p in zip(series.points, series.points[1:]):
        if p.kv_cache_usage is None or prev.t_s + series.interval_s < start:
            continue
        held = tokens_held(records, p.t_s)
        if held and p.running == len(held):
            rows.append({"t_s": p.t_s, "in flight": len(held), "held": sum(held),
                         "predicted slots": sum(math.ceil(n / bs) * bs for n in held),
                         "reserved slots (gauge)": round(p.kv_cache_usage * usable) * bs})
    return rows


per_run = {bs: [slot_samples(run, bs) for run in decode[bs]] for bs in SIZES}
samples = {bs: pd.DataFrame([row for rows in per_run[bs] for row in rows]) for bs in SIZES}
shown = {bs: max(range(REPEATS), key=lambda i, bs=bs: len(per_run[bs][i])) for bs in SIZES}
waste = pd.DataFrame({f"--block-size {bs}": {
    "samples": len(s),
    "tokens held (mean)": s["held"].mean(),
    "slots reserved, gauge (mean)": s["reserved slots (gauge)"].mean(),
    "waste per request (tokens, mean)": ((s["reserved slots (gauge)"] - s["held"])
                                         / s["in flight"]).mean(),
    "waste share of reserved": 1 - s["held"].sum() / s["reserved slots (gauge)"].sum(),
} for bs, s in samples.items() if len(s)})
waste.round(2)

# %%
import matplotlib.pyplot as plt
import numpy as np

fig, axes = plt.subplots(1, len(SIZES), figsize=(5.5 * len(SIZES), 3.8), sharey=True)
for ax, bs in zip(np.ravel(axes), SIZES, strict=True):
    run = decode[bs][shown[bs]]
    records = run.records()
    t = np.linspace(0, run.summary.duration_s, 800)
    ax.plot(t, [sum(tokens_held(records, x)) for x in t], color="grey", ls="--",
            label="tokens held (records)")
    ax.plot(t, [sum(math.ceil(n / bs) * bs for n in tokens_held(records, x)) for x in t],
            label=f"slots in whole {bs}-token blocks (records)")
    s = pd.DataFrame(per_run[bs][shown[bs]])
    if len(s):
        ax.plot(s["t_s"], s["reserved slots (gauge)"], "o", color="tab:red",
                label="server: kv_cache_usage x blocks x block_size")
    ax.set_title(f"--block-size {bs} (repeat {shown[bs] + 1})")
    ax.set_xlabel("time since the requests were sent (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
np.ravel(axes)[0].set_ylabel("KV token slots (count)")
fig.suptitle(f"16 requests of 200 + {OSL} tokens ({profile.model}, vLLM "
             f"{decode[DEFAULT_BS][0].startup.vllm_version})")
plt.tight_layout()
plt.show()

# %% [markdown]
# Each request's cache grows by one token per step, but it takes a new block only when the last
# one is full: a staircase of steps one block high. With 128-token blocks a request holds up to
# 127 empty slots; with 32, up to 31. The server's gauge sits on the staircase computed from the
# records (the requests are not all at the same length: the burst's prompts were prefilled over
# two steps, so they cross block boundaries a step apart). The table above gives the measured
# waste per request, averaged over the samples: a fraction of a block, larger for larger blocks.
#
# Does it matter? Relative to the request, the waste shrinks as requests get longer. Computed for
# a few request lengths:

# %%
lengths = [20, 100, 300, 1000, 4000]


def empty_share(n: int, bs: int) -> float:
    """Share of the slots of a request of n tokens that its last block leaves empty."""
    slots = math.ceil(n / bs) * bs
    return (slots - n) / slots


pd.DataFrame({f"{bs}-token blocks": [f"{empty_share(n, bs):.0%}" for n in lengths]
              for bs in (16, 32, 128, 512)},
             index=pd.Index(lengths, name="tokens in the request")).rename_axis(
    columns="share of the request's slots left empty")

# %% [markdown]
# With chat-sized requests of a few hundred tokens and 128-token blocks, a fifth of the reserved
# slots can be empty; with thousands of tokens per request, a few percent. The pool holds fewer
# requests at once only when it is *full*: on this 1 GiB pool it never is (`max_num_seqs`, 128 on
# the CPU build, caps the batch long before). On a GPU whose pool runs full (chapter 03's H200
# burst), half a block per request is real capacity.

# %% [markdown]
# ## 5. Only full blocks are cached
# Back to the shared-prefix runs of section 3. Every request begins with the same 201 tokens
# (BOS + the 200-token text); the rest differs. vLLM hashes each **full** block, chained to the
# hash of the block before it, so a later request can reuse the shared blocks only up to the last
# block boundary inside the 201 shared tokens: 6 blocks = 192 tokens at block size 32, 1 block =
# 128 tokens at 128, nothing at 256 or more. The library's `prefix.expected_prefix_hit_rate`
# replays that rule on the prompts' token ids (requests in order, first one computes everything):

# %%
curve_sizes = [16, 32, 64, 96, 128, 192, 256, 512]
predicted = {bs: prefix.expected_prefix_hit_rate(shared_requests, tokenizer, "completions", bs)
             for bs in curve_sizes}
shared_len = predicted[32].shared_tokens // (N_SHARED - 1)
measured = {bs: r.server_metrics for bs, r in granularity.items()}
hits = pd.DataFrame({f"--block-size {bs}": {
    "predicted hit rate": predicted[bs].hit_rate,
    "measured hit rate": m.prefix_cache_hit_rate,
    "cached tokens (vllm:prefix_cache_hits_total)": m.prefix_cache_hits,
    "prompt tokens (vllm:prefix_cache_queries_total)": m.prefix_cache_queries,
    "cached per later request": m.prefix_cache_hits / (N_SHARED - 1),
} for bs, m in measured.items()})
print(f"tokens each request shares with the ones before it: {shared_len}")
hits

# %%
fig, ax = plt.subplots(figsize=(8, 3.6))
ax.plot(curve_sizes, [100 * predicted[b].hit_rate for b in curve_sizes], "o:",
        label="predicted from the prompts (full blocks only)")
ax.axhline(100 * predicted[32].sharing_ratio, color="grey", ls=":",
           label=f"share of prompt tokens that are shared ({shared_len} of "
                 f"{shared_requests[0].prompt_len} after the first request)")
ax.plot(list(measured), [100 * m.prefix_cache_hit_rate for m in measured.values()], "s",
        color="tab:red", ms=10, mfc="none", mew=2, label="measured on the server")
for b in curve_sizes:
    if not cpu_accepts(b):
        ax.annotate("GPU only", (b, 100 * predicted[b].hit_rate), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize=7)
ax.set_xscale("log", base=2)
ax.set_xticks(curve_sizes, [str(b) for b in curve_sizes])
ax.set_xlabel("block size (tokens)")
ax.set_ylabel("prefix-cache hit rate (% of prompt tokens)")
ax.set_title(f"{N_SHARED} prompts sharing {shared_len} tokens")
ax.set_ylim(bottom=-5)
ax.legend(fontsize=8, loc="center right")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The prediction and the counters agree to the token: the server reused exactly the whole blocks
# inside the shared prefix. The curve is set by where the block boundaries fall inside the 201
# shared tokens: 12 blocks of 16, 6 of 32, 3 of 64 or 2 of 96 are 192 tokens each; one block of
# 128 or 192 is that many tokens; from 256 on, not one block fits. It is not monotonic (a
# 192-token block catches as much as six of 32, by luck of the boundary), but the smaller the
# block, the less of a shared prefix can be lost: at most block_size − 1 tokens. That matters for
# short shared prefixes like a system prompt of a few hundred tokens; for prefixes of thousands
# of tokens (chapter 16's code-completion set) it is a small share.

# %% [markdown]
# ## 6. Speed
# The runs of section 4, `REPEATS` per block size (2 at CI size): output throughput, mean time
# per output token, mean time to first token. The last column is the ratio of 32 to 128 (of the
# geometric means) with a 95 % Welch interval on the logs, as `vllm_course.compare` computes it
# (chapter 05): an interval containing 1 means the difference is
# within the noise of these repeats. Two repeats per size (the CI size) give a wide interval; the
# full size runs five.

# %%
from vllm_course.tuning import stats

speed_metrics = {"output tok/s": lambda s: s.output_throughput_tok_s,
                 "TPOT mean (ms)": lambda s: s.tpot_ms.mean,
                 "TTFT mean (ms)": lambda s: s.ttft_ms.mean}
values = {bs: {m: [f(r.summary) for r in decode[bs]] for m, f in speed_metrics.items()}
          for bs in SIZES}
rows = {}
for m in speed_metrics:
    row = {f"--block-size {bs}": f"{np.mean(values[bs][m]):.1f} ({min(values[bs][m]):.1f}-"
                                 f"{max(values[bs][m]):.1f})" for bs in SIZES}
    interval = stats.ratio_interval(values[32][m], values[DEFAULT_BS][m], 0.95)
    row["32 / 128"] = f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    rows[m] = row
speed = pd.DataFrame(rows).T
speed

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ax, m in zip(axes, ["output tok/s", "TPOT mean (ms)"], strict=True):
    for i, bs in enumerate(SIZES):
        ax.plot([i] * len(values[bs][m]), values[bs][m], "o", alpha=0.6, color=f"C{i}")
        ax.bar(i, np.mean(values[bs][m]), color=f"C{i}", alpha=0.35)
    ax.set_xticks(range(len(SIZES)), [f"{bs}" for bs in SIZES])
    ax.set_xlabel("--block-size")
    ax.set_ylabel(m)
    ax.grid(alpha=0.3, axis="y")
fig.suptitle(f"16 requests of 200 + {OSL} tokens at once, {REPEATS} repeats (dots) and their "
             "mean")
plt.tight_layout()
plt.show()

# %% [markdown]
# On this model the block size makes no difference to speed that the repeats can tell apart from
# noise. `tiny-mistral` is so small that a step's time is mostly fixed overhead (Python,
# scheduling, sampling), not attention; the kernel walking 32- or 128-token blocks is a sliver of
# it. On a real model the attention share is larger, but the backend's default is the size its
# kernels were written and tuned for (the CPU backend's AMX and vector paths want multiples of
# 32, and the CPU platform sets 128), so moving away from it is a gamble, not a tuning step.
#
# **Conclusion as measured:** leave `--block-size` at the default. The pool's size is unchanged,
# speed is unchanged within noise, and the only measured gain of smaller blocks, finer prefix
# caching and less waste per request, is a fraction of one block per request: worth it only for
# many short requests behind a short shared prefix on a full pool, and then only if your backend
# runs the smaller size at full speed (on the CPU build, 32 is the floor).

# %% [markdown]
# ## What you should see
# - **Same pool at every block size**: each server has the predicted number of blocks,
#   ⌊memory / (block_size × bytes per token)⌋ (from `vllm:cache_config_info`), uses the block
#   size we asked for, and its log's "KV cache size" is max concurrency × `max_model_len` as
#   predicted; blocks × block_size is the same number of token slots at both sizes.
# - **The gauge follows the block staircase**: every usage sample taken while all requests were
#   decoding is within one block per request of the slots computed from the records. A sample
#   counts only if it was surely taken after the whole burst was prefilled and the server ran as
#   many requests as the client had in flight: a fresh-clone CI run once scored a scrape that
#   arrived just after the last first token but had been answered before it (2,976 slots in the
#   gauge, 3,584 predicted).
# - **Waste per request grows with the block size**: more empty slots per request at 128 than at
#   32, and less than one block per request on average at each size.
# - **Prefix-cache hits are whole blocks**: the measured hit rate equals the prediction (within
#   half a percentage point) at each size, and is higher at 32 than at 128.
# - **Speed does not depend on the block size here**: mean output tok/s at 32 is within a factor
#   of 1.5 of the default's either way (in our runs the Welch interval of the ratio contained 1:
#   no difference the repeats could tell from noise).

# %%
for bs, r in granularity.items():
    blocks = int(info[bs]["num_gpu_blocks"])
    log_tokens = predict_log_tokens(blocks, bs, r.startup.max_model_len)
    nb.check(blocks == predict_blocks(KV_MEMORY, bs) and r.startup.block_size == bs
             and r.startup.kv_cache_tokens == log_tokens,
             f"--block-size {bs}: {bs}-token blocks, the predicted number of them, and the "
             "predicted log line",
             f"block_size {r.startup.block_size}, {blocks:,} blocks (predicted "
             f"{predict_blocks(KV_MEMORY, bs):,}), log {r.startup.kv_cache_tokens:,} tokens "
             f"(predicted {log_tokens:,})")
slots = {bs: int(info[bs]["num_gpu_blocks"]) * bs for bs in SIZES}
nb.check(len(set(slots.values())) == 1, "blocks x block_size is the same at every size",
         ", ".join(f"{bs}: {v:,} slots" for bs, v in slots.items()))
for bs in SIZES:
    s = samples[bs]
    off = (s["reserved slots (gauge)"] - s["predicted slots"]).abs() / bs - s["in flight"]
    # >= 2: with 80 output tokens the decode window lasted 0.8-1.1 s on 2 cores and two runs
    # pooled 2-6 samples (here and in CI); at CI size (240 tokens) it lasts about three times as
    # long, so 2 is far from what a run gives, and still more than one lucky scrape
    nb.check(len(s) >= 2 and off.max() <= 1e-6,
             f"--block-size {bs}: every decode-phase usage sample is within one block per "
             "request of the records' staircase",
             f"{len(s)} samples from {REPEATS} runs; gauge vs predicted slots: "
             + ", ".join(f"{a}/{b}" for a, b in zip(s["reserved slots (gauge)"],
                                                     s["predicted slots"], strict=True)))
per_request = waste.loc["waste per request (tokens, mean)"]
nb.check(per_request[f"--block-size {DEFAULT_BS}"] > per_request["--block-size 32"]
         and all(per_request[f"--block-size {bs}"] < bs for bs in SIZES),
         "empty slots per request: more at 128 than at 32, less than one block at each size",
         ", ".join(f"{k}: {v:.1f} tokens" for k, v in per_request.items()))
for bs, m in measured.items():
    nb.check(abs(m.prefix_cache_hit_rate - predicted[bs].hit_rate) <= 0.005,
             f"--block-size {bs}: measured prefix-cache hit rate equals the full-block prediction",
             f"measured {m.prefix_cache_hit_rate:.3f} ({m.prefix_cache_hits:.0f} of "
             f"{m.prefix_cache_queries:.0f} tokens), predicted {predicted[bs].hit_rate:.3f}")
nb.check(measured[32].prefix_cache_hit_rate > measured[DEFAULT_BS].prefix_cache_hit_rate,
         f"smaller blocks catch more of a {shared_len}-token shared prefix",
         f"{measured[32].prefix_cache_hit_rate:.1%} at 32 vs "
         f"{measured[DEFAULT_BS].prefix_cache_hit_rate:.1%} at {DEFAULT_BS}")
tok_ratio = np.mean(values[32]["output tok/s"]) / np.mean(values[DEFAULT_BS]["output tok/s"])
nb.check(2 / 3 < tok_ratio < 3 / 2,
         "mean output tok/s at block size 32 is within a factor of 1.5 of the default's",
         f"ratio {tok_ratio:.2f}; Welch 95 % interval {speed.loc['output tok/s', '32 / 128']}")

# %% [markdown]
# ## On the H200
# The H200 reference runs (vLLM 0.26.0, `mistral-7b-v0.3` card, `--max-model-len 8192`, no
# `--block-size`) used the GPU default: the startup facts of the `h200-burst` run say which size
# and backend.

# %%
burst = nb.reference("h200/observability/h200-burst/summary.json")
if burst:
    s = burst["startup"]
    print(f"H200: attention backend {s['attention_backend']}, block size {s['block_size']}, "
          f"KV cache {s['kv_cache_tokens']:,} tokens = {s['kv_cache_tokens'] // s['block_size']:,}"
          f" blocks; max_num_seqs {s['max_num_seqs']}")

# %% [markdown]
# FlashAttention with 16-token blocks: 58,342 of them, 2 MiB each for Mistral-7B (16 × 128 KiB).
# That pool did run full in the burst (chapter 03), so there the waste in the last block is
# real capacity: at most 15 empty slots per request (about 8 on average) at 16, against up to 127
# (about 64) at 128.
#
# This notebook's own cells ran on the H200 (2026-12-04, `vllm-course reference run ch10`,
# `reference/h200/chapters/10_block_size/`), with `--block-size` 32, 128 and 512 each passed
# explicitly and 2 GiB of KV cache (16,384 token slots at 128 KiB per token), and every check
# passed: the predicted block counts and log line at every size, each decode-phase usage sample
# on the records' staircase, the empty slots per request (16, 47 and 268 tokens), and the
# prefix-cache hit rates of the 201-token shared prefix exactly as predicted (0.6, 0.4, 0.0).
#
# Speed differed more than on the CPU: 32-token blocks gave 0.81x the output tok/s of 128-token
# blocks (Welch 95 % interval 0.71-0.92; mean TPOT 22.3 vs 17.7 ms) and 512 gave 608 tok/s with
# a wide spread (448-836 over 5 runs). Two cautions before reading much into it: on the GPU each
# size's five runs ran together (one server at a time), so a drift during the call would show as
# a difference between sizes; and runs of 16 requests (200 + 80 tokens) last about 2 s. A
# plausible mechanism, not measured here: a decode step's attention reads every request's
# blocks, and the paged kernel handles each block as a unit, so smaller blocks mean more, smaller
# pieces of work per step. The GPU default of 16 was not among the sizes (it is what the whole course's
# other H200 runs used). An earlier run that day, before the GPU path passed `--block-size` to
# every size and fixed the KV memory, ran out of its device call; this one took 349 s.

# %%
nb.show_reference_run("h200/chapters/10_block_size/run.json")

# %% [markdown]
# ## Summary
# - A block holds `block_size` tokens of K and V for every layer; a request holds
#   ⌈tokens / block_size⌉ of them. The block size sets the waste in each request's last block
#   (half a block on average), the granularity of prefix-cache hits (whole blocks only), and how
#   the attention kernel reads the cache.
# - The default is 16 when unset, but the backend decides: FlashMLA 64, CUTLASS-MLA 128, the CPU
#   build 128, and the CPU build *requires* a multiple of 32 (16 crashes at start-up despite a
#   log line that only says "prefers").
# - The pool's size in token slots does not depend on the block size; the number of blocks does.
#   vLLM 0.32's log line "KV cache size" is max concurrency × `max_model_len`; the number of
#   blocks is the `num_gpu_blocks` label of `vllm:cache_config_info`.
# - Measured on CPU: finer prefix caching and less waste at 32, no speed difference. Leave the
#   default unless a measurement on your hardware and workload says otherwise.
#
# ## Exercises
# 1. 🌟 A system prompt of 500 tokens (BOS included) is shared by every request. How many of its
#    tokens does the prefix cache reuse at block sizes 16, 32, 128 and 512?
# 2. 🌟 Start a server with `--block-size 16` on the CPU build (wrap the run in a `try` and print
#    the `ServerError`). Where in the log does it fail, and what does the warning before it say?
# 3. 🌟🌟 Give the server a pool of 2,048 tokens (`--kv-cache-memory-bytes` of 2,048 ×
#    `BYTES_PER_TOKEN`, 8 MiB for `tiny-mistral` in float32, and `--max-model-len 1024`, as in
#    chapter 03) and send 40 requests of 20 prompt + 10 output
#    tokens at once. Predict the most requests that can run at once at block sizes 32 and 128,
#    then check with `server_metrics.num_requests_running_peak`.
# 4. 🌟🌟🌟 Repeat section 6 with 1,500-token prompts (attention has more to read per step).
#    Does block size 32 or 512 change TPOT beyond the noise? How many repeats do you need to
#    tell?
#
# Answers: `solutions/chapters/10_block_size.md`.

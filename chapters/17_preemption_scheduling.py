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
# # 17 · Preemption and scheduling policy
#
# *Stage 2: tune each knob, principle and trade-off.* Checked against vLLM 0.32.0 (CPU build,
# profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# When the KV cache has no free block for a running request's next token, vLLM takes the blocks
# of another running request: it **preempts** it. This chapter shows how V1 does that (by
# recomputing, never by swapping), which request it picks under each scheduling policy, what a
# preemption storm looks like and how to end it, and what per-request priorities buy and cost.
#
# Claims this chapter corrects, read against vLLM's source (`vllm/v1/core/sched/scheduler.py`,
# `vllm/v1/core/sched/request_queue.py`) and docs ("Preemption" in
# `docs/configuration/optimization.md`): "when memory runs
# short vLLM preempts the **oldest** sequence and **swaps** its KV cache to CPU memory" (false in
# V1: it frees the blocks and recomputes later, and under the default policy the victim is the
# *newest* running request; `--swap-space` is gone), and "`--scheduling-policy priority` serves
# the requests that waited longest" (false: it serves the lowest `priority` value first, with no
# aging; waiting longest first is what the default, `fcfs`, already does).
#
# ## What you will learn
# - what preemption does in vLLM V1: free the blocks, recompute later; why there is no swap;
# - how a preemption storm looks in `vllm:num_preemptions_total` and in the token streams, and how
#   a `max_num_seqs` that fits the KV cache ends it;
# - which running request is the victim under `fcfs` (the newest) and under `priority` (the least
#   important, even if it is the oldest), seen in the streams;
# - per-request `priority` with `--scheduling-policy priority`: the important class's P99 TTFT
#   improves, at the others' cost.

# %%
from vllm_course import notebook as nb

profile = nb.setup()

# %% [markdown]
# ## 1. Preemption in V1: recompute, never swap
# Each step the scheduler first serves the running requests. A request that needs a new KV block
# (its tokens just crossed a block boundary) asks the pool; if the pool is empty, the scheduler
# preempts a running request (抢占) and tries again (`Scheduler.schedule()` and
# `_preempt_request()` in `vllm/v1/core/sched/scheduler.py`):
#
# 1. the victim's blocks go back to the pool;
# 2. its `num_computed_tokens` is set to 0: everything it had computed is forgotten;
# 3. it goes back to the **front** of the waiting queue (under `priority`: to its place in the
#    priority order). When it is admitted again, its prompt
#    *and the tokens it had already generated* are prefilled again (重计算, recompute), and
#    generation continues where it stopped. The client sees its stream pause, then resume.
#
# Only a running request that needs a block triggers this; a waiting request never preempts
# anyone, it just waits. With prefix caching on (the default), the freed blocks stay in the cache
# until they are reused, so the recompute may find part of its own prefix still there.
#
# **Which request?** Under `fcfs` (the default) the victim is `self.running.pop()`: the **most
# recently admitted** running request, not the oldest. Under `priority` it is
# `max(running, key=(priority, arrival_time))`: the least important (largest `priority` value),
# and among equals the latest arrival.
#
# **No swap.** vLLM's old V0 engine could copy a victim's blocks to CPU memory (`--swap-space`,
# chosen with `--preemption-mode swap`) and copy them back later. V1 never read that setting,
# and vLLM 0.18 removed the flag; the docs
# say "In vLLM V1, the default preemption mode is RECOMPUTE rather than SWAP". CPU KV
# *offloading* (`--kv-offloading-size`, 0.12+) is a separate cache tier, not swap-on-preemption.
# Ask the installed vLLM:

# %%
from vllm_course import UnknownFlagError
from vllm_course.server import check_flags, known_flags

for flag in ("--swap-space", "--preemption-mode"):
    try:
        check_flags([flag, "4"])
        print(f"{flag}: accepted")
    except UnknownFlagError as err:
        print(err)
print("flags about preemption, scheduling or offloading that do exist:",
      ", ".join(f for f in known_flags() if any(w in f for w in ("sched", "offloading-size",
                                                                 "preempt", "swap"))))

# %% [markdown]
# ## 2. A KV pool of 7 blocks
# To watch preemptions one by one we need a pool that a few requests fill. Chapter 03's
# arithmetic: `--kv-cache-memory-bytes` = 8 blocks of 128 tokens (the CPU backend's block size)
# × 4,096 bytes per token for `tiny-mistral` (float32 on the CPU profile; the code reads it from the
# card) = 4 MiB, of which one block is vLLM's reserved null block: **7 usable blocks, 896
# tokens**. Two servers:
#
# - `STORM`: this pool and vLLM's defaults (`fcfs`, `max_num_seqs` 128 on the CPU);
# - `FITTED`: the same pool with `--max-num-seqs 3` (three requests of up to 256 tokens fit in
#   the 7 blocks) and `--scheduling-policy priority` (used in sections 4 and 5).
#
# `--max-model-len 512` keeps vLLM's startup check happy (the pool must hold one request of that
# length), and `--enforce-eager` makes a CPU server start faster.

# %%
import math

from vllm_course import (
    FileWorkload,
    LoadSpec,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
    run_experiment,
    workload,
)
from vllm_course.models import CARDS

OUT = nb.results_root("17_preemption_scheduling")
BLOCK = 128                                            # the CPU backend's block size
POOL_BLOCKS = 8                                        # 7 usable + the null block
BYTES_PER_TOKEN = CARDS[profile.model].kv_bytes_per_token
POOL = {"enforce-eager": True, "max-model-len": 512,
        "kv-cache-memory-bytes": POOL_BLOCKS * BLOCK * BYTES_PER_TOKEN,
        # on a GPU (default block 16) ask for 128-token blocks, so the arithmetic is the same
        **({} if profile.device == "cpu" else {"block-size": BLOCK})}
STORM = ServerConfig(model=profile.model, args=POOL)
FITTED = ServerConfig(model=profile.model, args={**POOL, "max-num-seqs": 3,
                                                 "scheduling-policy": "priority"})
tokenizer = workload.PromptTokenizer(profile.model)
print(f"--kv-cache-memory-bytes {POOL['kv-cache-memory-bytes']:,} = {POOL_BLOCKS} blocks x "
      f"{BLOCK} tokens x {BYTES_PER_TOKEN:,} B")

# %% [markdown]
# ## 3. A preemption storm under `fcfs`, and its victims
# A burst of 12 requests (24 in the full-size run) on the `STORM` server, sent 20 ms apart, each a
# 100-token prompt and 64 output tokens: 164 tokens, two blocks at the end. The cap of 128 admits
# as many as have a block for their prompt: 7. A few tokens later each of them needs its second
# block, and the pool holds only three requests at full length. The scheduler preempts; a
# re-admitted victim is again the most recently admitted request, the first in line for the next
# preemption: a **preemption storm** (抢占风暴).

# %%
from dataclasses import replace

import pandas as pd

IN_ORDER = LoadSpec(rate_rps=50, burstiness=math.inf)  # one request every 20 ms, in order
N = nb.scaled(full=24, ci=12)
burst = workload.synthesize(SyntheticWorkload(num_requests=N, input_len=100, output_len=64,
                                              seed=18), tokenizer, "completions")
workload.write_jsonl(burst, OUT / "burst.jsonl")
nb.start_servers(STORM, FITTED)   # side by side: faster on a spare core
storm = await run_experiment(
    RunConfig(name="storm", server=STORM, workload=FileWorkload(path=OUT / "burst.jsonl"),
              load=IN_ORDER), OUT)
storm

# %% [markdown]
# Which requests were preempted? The client cannot ask the server, but it can see it: a preempted
# request's stream stops while the others keep receiving tokens, then resumes once the request has
# been admitted again and recomputed. For each request we count the tokens the *other* requests
# received while it stood still (in its longest pause, leaving out 0.1 s at each end). On a busy
# 2-core machine the client's own event loop sometimes stalls; it then reads every stream's
# waiting chunks late, in one burst, in no particular order. The client records each stall
# (`result.client.stalls_s`, chapter 08), so tokens read during a stall or within 0.1 s after it
# do not count either: they say nothing about which stream the server served.

# %%
import matplotlib.pyplot as plt
import numpy as np


def by_send_order(run) -> list:
    return sorted(run.records(), key=lambda r: r.sent_s)


def stood_still(run, margin_s: float = 0.1) -> list[int]:
    """Per request, in sending order: the most output tokens the other requests received during
    one of its pauses (gaps between its own tokens), ``margin_s`` at both ends left out, and
    tokens read during a recorded client stall or within ``margin_s`` after it left out."""
    records = by_send_order(run)
    stalls = run.client.stalls_s if run.client is not None else []

    def read_on_time(t: float) -> bool:
        return not any(a - margin_s <= t <= b + margin_s for a, b in stalls)

    out = []
    for i, r in enumerate(records):
        others = [(t, n) for j, o in enumerate(records) if j != i
                  for t, n in zip(o.chunk_s, o.chunk_tokens) if read_on_time(t)]
        out.append(max([sum(n for t, n in others if a + margin_s < t < b - margin_s)
                        for a, b in zip(r.chunk_s, r.chunk_s[1:]) if b - a > 2 * margin_s],
                       default=0))
    return out


def plot_streams(ax, run, title: str) -> None:
    """Output tokens received over time, one line per request, coloured by sending order."""
    records = by_send_order(run)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(records)))
    for i, (r, c) in enumerate(zip(records, colors)):
        ax.step([r.sent_s, *r.chunk_s], np.cumsum([0, *r.chunk_tokens]), where="post",
                color=c, lw=1.2, label=f"request {i + 1}" if len(records) <= 4 else None)
    ax.set_title(f"{title}\n{run.server_metrics.preemptions:.0f} preemption(s)", fontsize=10)
    ax.set_xlabel("time since the first request was sent (s)")
    ax.grid(alpha=0.3)


storm_still = stood_still(storm)
fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8))
plot_streams(a, storm, f"storm on STORM (fcfs, max_num_seqs {storm.startup.max_num_seqs}): "
                        "streams, dark = sent first")
a.set_ylabel("output tokens received")
b.bar(range(1, N + 1), storm_still, color=plt.cm.viridis(np.linspace(0, 0.9, N)))
b.set_xlabel("request, in sending order")
b.set_ylabel("tokens the others received\nwhile it stood still")
b.set_title("who was preempted", fontsize=10)
plt.tight_layout()
plt.show()
print("tokens the others received while each request stood still, in sending order:",
      storm_still)

# %% [markdown]
# The first requests sent, the oldest, never stood still: each time a request needed a block, the
# scheduler took it from the *newest* running request (`self.running.pop()`), and the oldest
# requests ran to the end untouched. The victims are all among the later requests; a victim that
# is admitted again goes to the end of the running list and is the first candidate next time.
# That is the opposite of the popular "preempts the oldest sequence".
#
# ### The fix
# Admit no more than the pool holds: `--max-num-seqs 3` (`FITTED`); giving the KV cache more
# memory (chapter 09) would be the other fix. The same burst on `FITTED`, without priorities:
# with every request at the default priority 0, the `priority` policy orders the queue by
# arrival, exactly as `fcfs` would, so only the cap differs.

# %%
fixed = await run_experiment(
    RunConfig(name="fixed", server=FITTED, workload=FileWorkload(path=OUT / "burst.jsonl"),
              load=IN_ORDER), OUT)


def describe(run) -> dict:
    s, m = run.summary, run.server_metrics
    return {"preemptions (vllm:num_preemptions_total)": m.preemptions,
            "requests that stood still": sum(v > 0 for v in stood_still(run)),
            "output tok/s": s.output_throughput_tok_s, "P50 TPOT (ms)": s.tpot_ms.p50,
            "P99 TPOT (ms)": s.tpot_ms.p99, "P99 ITL (ms)": s.itl_ms.p99,
            "P99 TTFT (ms)": s.ttft_ms.p99, "P99 E2EL (ms)": s.e2el_ms.p99}


pd.DataFrame({f"storm: max_num_seqs {storm.startup.max_num_seqs}": describe(storm),
              "fixed: max_num_seqs 3": describe(fixed)}).round(1)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
plot_streams(axes[0], storm, f"storm: max_num_seqs {storm.startup.max_num_seqs}")
plot_streams(axes[1], fixed, "fixed: max_num_seqs 3")
axes[0].set_ylabel("output tokens received")
plt.tight_layout()
plt.show()

# %% [markdown]
# In the storm, streams start, stall and restart; `vllm:num_preemptions_total` counts how often.
# The recomputed work shows in no counter: vLLM counts a request's prompt tokens (and its
# prefix-cache lookups) at its first prefill only, "not post-preemption repeat prefills"
# (`scheduler.py`). Stalled streams make the tail of TPOT and ITL long. With `max_num_seqs` at
# what the pool holds, no request is preempted and every stream is smooth; the price is a queue
# (later requests wait for a slot in waves of three), which shows in TTFT instead.
#
# On this tiny model the storm's throughput can be close to the fixed server's: recomputing a
# 100-token prompt is cheap, and the storm runs more requests per step. With long prompts and a
# large model each preemption throws away much more work (chapter 27 dissects a storm in
# production).

# %% [markdown]
# ## 4. The victim under `priority`
# Under `--scheduling-policy priority` the victim is the running request with the largest
# `priority` value (the least important), the latest arrival among equals, however far it has
# got. Three requests on `FITTED`, each a 200-token prompt and 184 output tokens (384 tokens,
# three blocks at the end), sent 20 ms apart. Two of them fit the pool at full length (6 blocks),
# three do not (9): each holds two blocks after its prefill (6 of the 7); when the leaders cross
# 256 tokens and ask for a third, the 7th goes to the first and the pool is empty for the second.
# We mark request 1, the **oldest** and the furthest ahead, as the least important
# (`"priority": 1`, the others 0). The field goes in the request body (`/v1/completions`,
# `/v1/chat/completions` and `/v1/responses` accept it); the workload's JSONL lines
# carry it (`{"prompt": ..., "output_len": 184, "priority": 1}`). The `fcfs` policy ignores it.

# %%
trio = workload.synthesize(SyntheticWorkload(num_requests=3, input_len=200, output_len=184,
                                             seed=17), tokenizer, "completions")
workload.write_jsonl([replace(r, priority=p) for r, p in zip(trio, [1, 0, 0])],
                     OUT / "trio-priority.jsonl")
trio_config = RunConfig(name="victim-priority", server=FITTED,
                        workload=FileWorkload(path=OUT / "trio-priority.jsonl"), load=IN_ORDER)
victim = await run_experiment(trio_config, OUT)

trio_still = stood_still(victim)
trio_end = [r.last_choice_s for r in by_send_order(victim)]
fig, ax = plt.subplots(figsize=(7, 3.8))
plot_streams(ax, victim, "FITTED (priority): request 1 has priority 1, requests 2-3 have 0")
ax.set_ylabel("output tokens received")
ax.legend(fontsize=8)
plt.show()
print("tokens the others received while each stood still:", trio_still,
      "; finished at (s):", [round(t, 2) for t in trio_end])

# %% [markdown]
# Request 1 was ahead, yet it is the one that stops: the pool ran dry when request 2 asked for a
# block, and the scheduler took request 1's blocks because of its `priority` value. It waits
# until request 2 or 3 finishes, is recomputed (its 200-token prompt and the tokens it had
# generated), and finishes last. Under `fcfs` the same three requests would lose request 3, the
# newest (exercise 1 runs the equal-priority case). Priority protects the important requests
# from preemption too, and throws away the work already done for the others.

# %% [markdown]
# ## 5. Per-request priority
# The burst of section 3 on `FITTED` again, now with priorities: the first 9 (18) requests are a
# batch job (`priority` 1), the last 3 (6) interactive requests (`priority` 0, served first). They
# are sent 20 ms apart, the interactive ones last, so in arrival order they would be served last;
# the whole burst is in within a quarter of a second, long before the first slots free up. The
# `fixed` run above is that arrival order (all priorities 0); this run differs only in the
# `priority` fields.

# %%
N_HIGH = N // 4
prioritized = [replace(r, priority=0 if i >= N - N_HIGH else 1) for i, r in enumerate(burst)]
workload.write_jsonl(prioritized, OUT / "burst-priority.jsonl")
ranked = await run_experiment(
    RunConfig(name="priority", server=FITTED,
              workload=FileWorkload(path=OUT / "burst-priority.jsonl"), load=IN_ORDER), OUT)

# %% [markdown]
# With `max_num_seqs` 3 and equal lengths the requests go through in waves of three, so TTFT is
# about a whole number of request durations. The speed of this shared 2-core machine can change
# from one run to the next, so next to the TTFT in ms we also give it in request durations (the
# run's makespan, from the first request sent to the last token received, divided by its N / 3
# waves), which compares the two runs fairly. A whole-run figure is used because a pause of the
# machine can make the client read a request's chunks all at once, which would shrink any
# per-request duration.

# %%
from vllm_course import metrics


def ttft_by_class(run) -> dict[str, dict[str, np.ndarray]]:
    """TTFT of the interactive (the last N_HIGH sent) and the batch requests: in ms, and in
    request durations (the run's makespan divided by its waves of max_num_seqs = 3)."""
    done = [r for r in run.records() if r.success]
    makespan = max(r.last_choice_s for r in done) - min(r.sent_s for r in done)
    duration = makespan / math.ceil(N / 3)
    out = {}
    for cls, keep in (("interactive", lambda i: i >= N - N_HIGH),
                      ("batch", lambda i: i < N - N_HIGH)):
        ms = np.array([1000 * metrics.ttft_s(r) for r in done if keep(r.index)])
        out[cls] = {"ms": ms, "durations": ms / 1000 / duration}
    return out


arrival, prio = ttft_by_class(fixed), ttft_by_class(ranked)
p99 = {(run, cls, unit): np.percentile(d[cls][unit], 99)
       for run, d in (("arrival", arrival), ("priority", prio))
       for cls in ("interactive", "batch") for unit in ("ms", "durations")}
pd.DataFrame({
    (cls, f"P99 TTFT ({unit})"): {"arrival order (all priority 0)": p99[("arrival", cls, unit)],
                                  "priority 0 / 1": p99[("priority", cls, unit)]}
    for cls in ("interactive", "batch") for unit in ("ms", "durations")
}).round(2)

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
for (name, data), style in zip([("arrival order", arrival), ("priority", prio)], ["--", "-"]):
    for cls, color in (("interactive", "tab:red"), ("batch", "tab:blue")):
        v = np.sort(data[cls]["durations"])
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", ls=style, color=color,
                label=f"{cls}, {name}")
ax.set_xlabel("TTFT (request durations)")
ax.set_ylabel("share of requests")
ax.set_title(f"TTFT by class, a burst of {N} requests, max_num_seqs 3")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# With priorities the interactive requests jump the queue: they take the first slots that free up.
# In arrival order they would wait for every wave before them (about three request durations in
# the CI-size run); with priorities they wait only for the first wave to end, less than one
# duration since they were sent (four local CI-size runs: median 2.32-2.43 -> 0.36-0.43
# durations). The batch requests pay for it: the last of them now wait for the interactive ones
# too, and the batch class's P99 TTFT grows (1.64-1.78 -> 2.51-2.59 durations in those runs).
# Nothing is faster in total; priority only moves waiting from one class to another.
#
# Two cautions from the source (`vllm/v1/core/sched/request_queue.py`): there is no aging, so a
# steady stream of priority-0 requests can starve priority-1 requests indefinitely; and under
# `fcfs` a request's `priority` field is silently ignored (the docs say it raises an error; the V1
# code has no such check). And as section 4 showed, under `priority` the low-priority requests
# are also the first victims of preemption.

# %% [markdown]
# ## What you should see
# - **V1 has no swap**: `--swap-space` is not a flag of the installed vLLM.
# - **A storm is made and fixed**: the `STORM` server preempts several times on the burst (the
#   arithmetic of section 2 leaves it no choice: 7 admitted requests need 14 blocks of a pool of
#   7), the `FITTED` server never (3 requests of at most 2 blocks each fit in 7). No stream of the
#   fixed server stands still while the others receive tokens.
# - **The `fcfs` victims are never the oldest**: the two requests sent first never stood still
#   although the storm preempted several times. (The later requests that did stand still vary from
#   run to run: a request preempted before its first token shows no pause, only a late start, and
#   a pause of the whole machine can hide a short stand-still. Which of them stood still is in the
#   bar chart; the check asks only what the scheduler guarantees: `running.pop()` never reaches
#   the two oldest while five or more requests run.)
# - **The `priority` victim is the least important request, here the oldest**: the run preempted,
#   and request 1 (priority 1), sent first, finished more than 0.1 s after the other two: it was
#   recomputed and generated its last 128 tokens after they were done. The client records every
#   pause of its own event loop (`result.client.stalls_s`, chapter 08). Chunks that arrive
#   during a pause are read when it ends, so only a pause that began before the other two were
#   done and ended just before request 1's last chunk was read can hide the order; then the check
#   says so instead of judging it (five local CI-size runs finished request 1 last by 0.86 to
#   1.2 s).
# - **Priorities help the important class at the others' cost**: measured in request durations,
#   the interactive class's P99 TTFT drops below 60 % of that in arrival order (four local
#   CI-size runs: 2.36-2.47 -> 0.36-0.43). The batch requests pay: those not in the first wave
#   now get their first token after every interactive request (at least half of them; none in
#   arrival order).

# %%
def order_hidden(run, last_s: float, others_s: float) -> list[tuple[float, float]]:
    """The client's recorded event-loop stalls (s on the records' clock) that can hide whether a
    stream read at ``last_s`` finished after streams read by ``others_s``: a stall that began
    (0.05 s slack) no later than ``others_s`` and ended less than 0.1 s before ``last_s``. Chunks
    that arrive during a stall are read when it ends, so such a last chunk may have been produced
    as early as the stall began; one read at any other time was produced when it was read."""
    stalls = run.client.stalls_s if run.client is not None else []
    return [(a, b) for a, b in stalls if a - 0.05 <= others_s and last_s <= b + 0.1]


try:
    check_flags(["--swap-space", "4"])
    swap_gone = False
except UnknownFlagError:
    swap_gone = True
nb.check(swap_gone, "V1 has no swap: --swap-space is not a flag of this vLLM",
         f"vLLM {storm.startup.vllm_version}")
runs = [storm, fixed, victim, ranked]
nb.check(all(r.summary.failed == 0 and r.summary.completed > 0 for r in runs),
         "every request of every run completed",
         ", ".join(f"{r.config.name} {r.summary.completed}" for r in runs))
# A stand-still: while this stream got nothing for > 0.2 s, the others received tokens. A stall
# of the client cannot make one (tokens read during a recorded stall or in the 0.1 s after it do
# not count), so "never stood still" is safe to assert; noise allows a few tokens.
NOISE = 5
ps, pf = storm.server_metrics.preemptions, fixed.server_metrics.preemptions
fixed_still = stood_still(fixed)
nb.check(ps >= 3 and pf == 0 and max(fixed_still) <= NOISE,
         "a storm on the default cap; none with max_num_seqs fitted to the pool, whose streams "
         "never stand still",
         f"{ps:.0f} vs {pf:.0f} preemptions for {N} requests; stood still (tokens the others "
         f"received): storm {storm_still}, fixed {fixed_still}; P99 ITL "
         f"{storm.summary.itl_ms.p99:.1f} vs {fixed.summary.itl_ms.p99:.1f} ms")
nb.check(ps >= 3 and max(storm_still[:2]) <= NOISE,
         "fcfs never preempts the oldest: the two requests sent first never stood still",
         f"{ps:.0f} preemptions; tokens the others received while each stood still: {storm_still}")
ends_hidden = order_hidden(victim, trio_end[0], max(trio_end[1:]))
if ends_hidden:
    print(f"not judged: which request finished last (the client's event loop stalled at "
          f"{[(round(a, 2), round(b, 2)) for a, b in ends_hidden]} s, and the three requests "
          f"finished at {[round(t, 2) for t in trio_end]} s: request 1's last chunk may have "
          "waited in that stall)")
nb.check(victim.server_metrics.preemptions >= 1
         and (bool(ends_hidden) or trio_end[0] > max(trio_end[1:]) + 0.1),
         "priority preempts the largest priority value: request 1, the oldest, finished last",
         f"{victim.server_metrics.preemptions:.0f} preemption(s); stood still {trio_still}; "
         f"finished at {[round(t, 2) for t in trio_end]} s")
hi_a, hi_p = p99[("arrival", "interactive", "durations")], p99[("priority", "interactive", "durations")]
med_a, med_p = (np.median(d["interactive"]["durations"]) for d in (arrival, prio))
lo_a, lo_p = p99[("arrival", "batch", "durations")], p99[("priority", "batch", "durations")]
nb.check(hi_p < 0.6 * hi_a, "priority improves the interactive class's P99 TTFT",
         f"P99 {hi_a:.2f} -> {hi_p:.2f} request durations "
         f"({p99[('arrival', 'interactive', 'ms')]:.0f} -> "
         f"{p99[('priority', 'interactive', 'ms')]:.0f} ms); median {med_a:.2f} -> {med_p:.2f}")


def served_after_interactive(run) -> int:
    """Batch requests whose first token came after every interactive request's first token."""
    first = {r.index: r.sent_s + metrics.ttft_s(r) for r in run.records() if r.success}
    last_interactive = max(t for i, t in first.items() if i >= N - N_HIGH)
    return sum(1 for i, t in first.items() if i < N - N_HIGH and t > last_interactive)


queued_a, queued_p = served_after_interactive(fixed), served_after_interactive(ranked)
behind = N - N_HIGH - 3          # batch requests not in the first wave of max_num_seqs = 3
nb.check(queued_a == 0 and queued_p >= behind // 2,
         "at the batch class's cost: batch requests now wait behind the interactive ones",
         f"batch requests first served after all interactive ones: {queued_a} in arrival order, "
         f"{queued_p} of the {behind} beyond the first wave with priorities; batch P99 TTFT "
         f"{lo_a:.2f} -> {lo_p:.2f} request durations "
         f"({p99[('arrival', 'batch', 'ms')]:.0f} -> {p99[('priority', 'batch', 'ms')]:.0f} ms)")

# %% [markdown]
# ## On the H200
# The H200 runs the same scheduler over a far larger pool. Chapter 03's `h200-burst` run
# (vLLM 0.26.0, `mistral-7b-v0.3`, the default `max_num_seqs` 1024, 2,000 requests of 1,024 prompt +
# 256 output tokens at once) is a storm of the same kind: the pool held fewer such requests at full
# length than the cap let in.

# %%
burst_h200 = nb.reference("h200/observability/h200-burst/summary.json")
if burst_h200:
    m, s = burst_h200["server_metrics"], burst_h200["startup"]
    wl = burst_h200["config"]["workload"]
    full = math.ceil((wl["input_len"] + wl["output_len"]) / s["block_size"])
    print(f"H200 h200-burst: max_num_seqs {s['max_num_seqs']}, pool "
          f"{s['kv_cache_tokens'] // s['block_size']:,} blocks = "
          f"{s['kv_cache_tokens'] // s['block_size'] // full} requests at full length; running "
          f"peak {m['num_requests_running_peak']:.0f}; {m['preemptions']:.0f} preemptions; "
          f"prompt tokens counted {m['prompt_tokens']:,.0f} for "
          f"{burst_h200['summary']['total_input_tokens']:,} sent; P99 TPOT "
          f"{burst_h200['summary']['tpot_ms']['p99']:.0f} ms")

# %% [markdown]
# Each of those preemptions threw away up to 1,280 tokens of computed KV cache (prompt and
# generated tokens) for a 7B model, yet the prompt-token counter equals the tokens sent: the
# recompute shows in no counter, only in `vllm:num_preemptions_total` and in the streams.
#
# This notebook's own cells ran on the H200 too (2026-12-04, `vllm-course reference run ch17`,
# `reference/h200/chapters/17_preemption_scheduling/`), unchanged with the 7B card: the same
# 8-block pool (1,024 tokens in 128-token blocks, 128 KiB per token), and every check passed. The
# GPU default `max_num_seqs` is 1,024, not 128, which changes nothing here: both caps let in far
# more than the three requests the pool holds at full length.

# %%
nb.show_reference_run("h200/chapters/17_preemption_scheduling/run.json")

# %% [markdown]
# The storm looked as on the CPU: 21 preemptions for 24 requests, 10 streams standing still
# while others went on, and a P99 ITL of 101 ms against 30 ms with the cap fitted to the pool.
# The fitted cap had the lower output tok/s (164 vs 221) and the higher P99 TTFT (7.9 vs 4.9 s)
# on this burst: with three requests running, the other 21 wait in the queue instead of
# stalling mid-stream, so the cost moves from the streams (ITL, TPOT) to the wait before the
# first token. Which of the two a service prefers is the SLO's question (chapter 05); what
# preemption adds is the recomputed prefill and the stalls. With priorities the interactive
# class's P99 TTFT fell from 7.9 to 1.7 s while the batch class's rose from 6.1 to 6.4 s.

# %% [markdown]
# ## Summary
# - V1 preempts by recompute only: the victim's blocks are freed, its computed tokens forgotten,
#   and it is prefilled again (prompt and generated tokens) when re-admitted. There is no swap;
#   `--swap-space` was V0-only and is gone since vLLM 0.18.
# - The victim under `fcfs` is the most recently admitted running request; under `priority`, the
#   largest `priority` value, latest arrival among equals. Only a running request that needs a
#   block causes a preemption.
# - A `max_num_seqs` above what the KV cache holds causes a preemption storm
#   (`vllm:num_preemptions_total` climbs, streams stall, prefill work is repeated). Fix it with a
#   cap that fits the pool, or a larger pool.
# - `--scheduling-policy priority` with a per-request `priority` field moves waiting from the
#   important class to the others; there is no aging, and it changes nothing when every request
#   has the same priority.
#
# ## Exercises
# 1. 🌟 Rerun section 4's three requests on `FITTED` with priorities `[0, 0, 0]`, and on `STORM`
#    (`fcfs`). Which request is the victim in each run, and why the same one?
# 2. 🌟🌟 Predict how many requests the storm server admits at the start of the burst and when the
#    first preemption happens (in output tokens); check with a finer `sample_interval_s` and the
#    `running` and `preemptions` columns of `storm.timeseries()`.
# 3. 🌟🌟 Send the priority burst of section 5 to the `STORM` server (`fcfs`). What happens to the
#    interactive class's TTFT, and to the number of preemptions?
# 4. 🌟🌟🌟 Keep the storm server's cap of 128 and fix the storm with memory instead: what is the
#    smallest `--kv-cache-memory-bytes` with which the 12-request burst runs without preemption?
#    Compute it, then check it.
#
# Answers: `solutions/chapters/17_preemption_scheduling.md`.

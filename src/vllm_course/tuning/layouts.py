"""Two devices, four ways to serve one model on them, measured back to back (chapter 18).

The layouts, each on the same model card, vLLM and prefix-caching state:

* ``1 device``: one server on one device, the baseline;
* ``TP=2``: one server with ``--tensor-parallel-size 2``: every layer's weights split over the two
  devices, an all-reduce of the hidden state twice per layer per step between them;
* ``DP=2``: one server with ``--data-parallel-size 2``: two engines, each a whole copy of the
  model with its own scheduler, behind vLLM's own front end;
* ``2 replicas``: two independent single-device servers behind the course's client-side round
  robin (request ``i`` to replica ``i % 2``, :func:`vllm_course.loadgen.run_load`).

A device is a GPU (``CUDA_VISIBLE_DEVICES``, ordered by PCI bus as NVML numbers them) or, on the
CPU build, a CPU core (``VLLM_CPU_OMP_THREADS_BIND``: one core per rank, ``|`` between ranks,
as vLLM's CPU backend reads it). The CPU form is how the code path is tried on a machine without
two GPUs: vLLM's CPU backend runs TP and DP with one rank per bound core; it proves the
commands and the bookkeeping, not what two GPUs would measure.

Each device gets the profile's memory settings (``--gpu-memory-utilization`` of each GPU, or
the CPU profile's ``--kv-cache-memory-bytes`` per rank). Under TP each rank holds half of the
KV heads, so the same bytes per rank hold twice the tokens of one device's pool; under DP and
as replicas each engine has a pool of its own, one device's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vllm_course import metrics
from vllm_course.config import LoadSpec, ServerConfig, SyntheticWorkload
from vllm_course.env import Profile
from vllm_course.env.telemetry import NVML, ProcessCPU
from vllm_course.loadgen import run_load, warm_up
from vllm_course.loadgen.selfcheck import LoopLagMonitor, limited_sentence, run_checks
from vllm_course.server import VLLMServer
from vllm_course.server.startup import kv_cache_tokens_per_engine
from vllm_course.workload import PromptTokenizer, synthesize

LAYOUTS = ("1 device", "TP=2", "DP=2", "2 replicas")
"""The layouts in the order :func:`measure_layouts` runs them."""

#: How often the devices are read during a run (s).
SAMPLE_S = 0.5


def layout_servers(model: str, devices: Sequence[int], cpu: bool,
                   args: dict[str, Any] | None = None) -> dict[str, list[ServerConfig]]:
    """The servers of each layout (:data:`LAYOUTS`) on ``devices`` (two GPU indices as NVML and
    ``nvidia-smi`` number them, or two CPU core ids on the CPU build).

    Args:
        model: the model card or id every server serves.
        devices: exactly two device ids; the single device is the first.
        cpu: the CPU build (cores), else GPUs.
        args: vLLM flags every server gets (e.g. ``{"enforce-eager": True}``).

    Raises:
        ValueError: not two distinct non-negative device ids.
    """
    if len(devices) != 2 or len(set(devices)) != 2 or min(devices) < 0:
        raise ValueError(f"two distinct device ids are needed (e.g. [0, 1]), got {list(devices)}")
    a, b = (str(d) for d in devices)
    common = dict(args or {})

    def pin(*ids: str) -> dict[str, str]:
        if cpu:
            return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(ids)}
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(ids)}

    def server(env: dict[str, str], **extra: Any) -> ServerConfig:
        return ServerConfig(model=model, args={**common, **extra}, env=env)

    return {
        "1 device": [server(pin(a))],
        "TP=2": [server(pin(a, b), **{"tensor-parallel-size": 2})],
        "DP=2": [server(pin(a, b), **{"data-parallel-size": 2})],
        "2 replicas": [server(pin(a)), server(pin(b))],
    }


class DeviceSampler:
    """Reads each GPU (NVML) or each server's CPU use while a run goes on, every
    :data:`SAMPLE_S` seconds: a task of the running event loop, reading in a worker thread.

    After :meth:`stop`, :meth:`summary` gives per device the mean utilization (%, NVML's share
    of time a kernel ran) and the peak memory used (GiB), and per server the mean CPU cores.
    """

    def __init__(self, gpus: Sequence[int], server_pids: Sequence[int]):
        self.nvml = NVML.open(list(gpus)) if gpus else None
        self.cpus = [ProcessCPU(pid) for pid in server_pids]
        self.util: list[list[float]] = []
        self.mem: list[list[float]] = []
        self.cores: list[list[float]] = [[] for _ in self.cpus]
        self._task: asyncio.Task | None = None
        self._lock = threading.Lock()   # a cancelled loop's reading may still run in its thread

    def _read(self) -> None:
        with self._lock:
            self._read_locked()

    def _read_locked(self) -> None:
        if self.nvml is not None:
            per = self.nvml.per_device()
            self.util.append([d.get("gpu_util_pct", math.nan) for d in per])
            self.mem.append([d.get("gpu_mem_used_bytes", math.nan) for d in per])
        for i, cpu in enumerate(self.cpus):
            if (c := cpu.sample().get("server_cpu_cores")) is not None:
                self.cores[i].append(c)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            # off the event loop, which times the requests' chunks meanwhile
            await asyncio.to_thread(self._read)

    def start(self) -> None:
        """Prime the CPU readings and start sampling."""
        for cpu in self.cpus:
            cpu.sample()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Take a last reading and stop; release NVML."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._read()
        if self.nvml is not None:
            self.nvml.close()

    def summary(self) -> dict[str, list[float] | None]:
        """``gpu_util_pct`` (mean per GPU, %, to 0.1), ``gpu_mem_gib`` (peak per GPU, GiB, to
        0.01; ``None`` without NVML) and ``server_cpu_cores`` (mean per server, cores, to
        0.01)."""
        def per_device(rows: list[list[float]], reduce: Callable) -> list[float] | None:
            if not rows:
                return None
            return [reduce([r[i] for r in rows]) for i in range(len(rows[0]))]

        def mean(xs: list[float]) -> float:
            xs = [x for x in xs if not math.isnan(x)]
            return sum(xs) / len(xs) if xs else math.nan

        mem = per_device(self.mem, lambda xs: round(max(xs) / 2**30, 2))
        return {"gpu_util_pct": per_device(self.util, lambda xs: round(mean(xs), 1)),
                "gpu_mem_gib": mem,
                "server_cpu_cores": [round(mean(c), 2) for c in self.cores]}


async def measure_layouts(
    profile: Profile,
    devices: Sequence[int],
    levels: Sequence[int],
    workload: SyntheticWorkload,
    out_dir: Path,
    *,
    cpu: bool,
    requests_per_level: Sequence[int] | None = None,
    args: dict[str, Any] | None = None,
    warmups: int = 4,
    layouts: Sequence[str] = LAYOUTS,
    echo: Callable[[str], None] = print,
) -> list[dict]:
    """Start each layout's servers on ``devices``, measure ``workload`` at each concurrency of
    ``levels`` (all requests at once, at most that many in flight), and stop them before the
    next layout starts; one layout at a time, on the same host, back to back.

    Each level sends ``workload`` with its own seed (``workload.seed`` + the level's index), so
    no run reuses another's prefixes from the prefix cache; every layout sees the same prompts.
    Servers start one after another; their logs go to ``out_dir``, and the rows measured so far
    to ``out_dir/layouts.json`` after every run (a later failure keeps them).

    Args:
        profile: the hardware profile (its model and server flags: each device's memory).
        devices: two device ids (:func:`layout_servers`).
        levels: client concurrency levels, e.g. a light one and a saturating one.
        workload: the requests of one level (lengths in tokens).
        out_dir: where the server logs go.
        cpu: the CPU build (devices are cores).
        requests_per_level: each level's number of requests (default: ``workload``'s for
            each), e.g. more at a saturating level, so that its run is not mostly ramp-up.
        args: vLLM flags every server gets.
        warmups: requests sent (and waited for) to each server before its first level.
        layouts: which of :data:`LAYOUTS` to run, in this order.
        echo: progress lines.

    Returns:
        One row per layout and level: ``layout``, ``concurrency``, ``requests``, ``completed``,
        ``output_tok_s`` and ``total_tok_s`` (tok/s, as vllm/benchmarks/serve.py computes them:
        tokens over the run's duration), ``p99_ttft_ms``, ``p99_tpot_ms``, ``mean_tpot_ms``
        (ms), ``kv_cache_tokens`` (the layout's engines together, from the startup logs),
        ``kv_cache_tokens_per_engine``, ``startup_s`` (each server's seconds from launch to
        ``/health``), ``gpu_util_pct``, ``gpu_mem_gib`` (per GPU, ``None`` on the CPU build),
        ``server_cpu_cores`` (per server), ``client_limited`` (the client's self-checks'
        reasons, :func:`~vllm_course.loadgen.selfcheck.run_checks`: empty where the client kept
        up; where not, the row's latencies include the client's own delay and a warning line is
        echoed).

    Raises:
        ValueError: an unknown layout, devices as :func:`layout_servers` refuses them, or
            ``requests_per_level`` not one positive count per level.
        ServerError: a server failed to start or died (its log tail included).
    """
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layout(s) {', '.join(unknown)}; the layouts are "
                         f"{', '.join(LAYOUTS)}")
    counts = list(requests_per_level or [workload.num_requests] * len(levels))
    if len(counts) != len(levels) or min(counts, default=1) < 1:
        raise ValueError(f"requests_per_level needs one positive count per level ({len(levels)}), "
                         f"got {counts}")
    servers_of = layout_servers(profile.model, devices, cpu, args)
    tokenizer = PromptTokenizer(profile.model)
    level_requests = [synthesize(workload.model_copy(update={"seed": workload.seed + n,
                                                             "num_requests": count}),
                                 tokenizer, "completions") for n, count in enumerate(counts)]
    warm = synthesize(workload.model_copy(update={"num_requests": max(1, warmups),
                                                  "seed": workload.seed + 10_000}),
                      tokenizer, "completions")[:warmups]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for name in layouts:
        configs = servers_of[name]
        with contextlib.ExitStack() as stack:
            servers = []
            for i, config in enumerate(configs):
                slug = name.replace(" ", "-").replace("=", "")
                log = out_dir / f"{slug}-{i}.log"
                t = time.monotonic()
                servers.append(stack.enter_context(
                    VLLMServer(config, log_path=log, profile_args=profile.server_args)))
                echo(f"{name}: server {i + 1}/{len(configs)} ready in "
                     f"{time.monotonic() - t:.0f} s ({log.name})")
            per_engine = [n for s in servers
                          for n in kv_cache_tokens_per_engine(Path(s.log_path).read_text(
                              errors="replace"))]
            urls = [s.base_url for s in servers]
            for s in servers:
                if warm:
                    await warm_up(s.base_url, warm, LoadSpec(), profile.model)
            for level, requests in zip(levels, level_requests, strict=True):
                sampler = DeviceSampler([] if cpu else list(devices), [s.proc.pid for s in servers])
                sampler.start()
                try:
                    async with LoopLagMonitor() as lag:
                        result = await run_load(urls if len(urls) > 1 else urls[0],
                                                profile.model, requests,
                                                LoadSpec(max_concurrency=level))
                finally:
                    await sampler.stop()
                client = run_checks(result, lag)
                for s in servers:
                    s.check_alive()
                s_ = metrics.summarize(result.records, duration_s=result.duration_s)
                rows.append({
                    "layout": name, "concurrency": level, "requests": s_.num_requests,
                    "completed": s_.completed, "output_tok_s": s_.output_throughput_tok_s,
                    "total_tok_s": s_.total_throughput_tok_s,
                    "p99_ttft_ms": s_.ttft_ms.p99, "p99_tpot_ms": s_.tpot_ms.p99,
                    "mean_tpot_ms": s_.tpot_ms.mean,
                    "kv_cache_tokens": sum(per_engine) if per_engine else None,
                    "kv_cache_tokens_per_engine": per_engine,
                    "startup_s": [s.facts.ready_s for s in servers],
                    **sampler.summary(), "client_limited": client.reasons})
                # kept after every run: a layout that fails later, or a call that runs out of
                # time, leaves the rows measured so far
                (out_dir / "layouts.json").write_text(json.dumps(rows, indent=1) + "\n")
                echo(f"{name} at {level} in flight: {s_.output_throughput_tok_s:,.0f} output "
                     f"tok/s, P99 TTFT {s_.ttft_ms.p99:,.0f} ms, P99 TPOT "
                     f"{s_.tpot_ms.p99:,.1f} ms, {s_.completed}/{s_.num_requests} completed")
                if client.saturated:
                    whose = f"{name} at {level} in flight"
                    echo(f"warning: {limited_sentence(client.reasons, whose)}")
    return rows

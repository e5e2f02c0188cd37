"""This machine: what it has, which hardware profile fits it, whether the course can run here.

``machine`` reads the installed vLLM (version, CPU or CUDA build), the GPUs (one
``nvidia-smi`` reader), CPU flags and memory; ``profile`` holds the hardware profiles (YAML in
``profiles/``: default server flags, demo sizes, SLOs); ``doctor`` runs the set-up checks
``make doctor`` prints; ``telemetry`` samples GPU (NVML) and process CPU use during a run.

May import: ``config``, ``errors`` and ``models`` (nothing that starts a server or sends a
request).
"""

from vllm_course.env.machine import (
    BROKEN_BESIDE_CPU_TORCH,
    GPU_PROFILES,
    GPU_QUERY,
    GPUInfo,
    broken_packages,
    cpu_flags,
    cpu_model,
    current_profile,
    detect_profile_name,
    driver_version,
    facts,
    gpu_info,
    gpus,
    hardware,
    memory_available_bytes,
    parse_gpu_query,
    profile_for_gpus,
    supports_cpu_fp8_kv,
    vllm_build,
    vllm_version,
)
from vllm_course.env.profile import Profile, load_profile, profile_names

__all__ = [
    "BROKEN_BESIDE_CPU_TORCH", "GPU_PROFILES", "GPU_QUERY", "GPUInfo", "Profile",
    "broken_packages", "cpu_flags", "cpu_model", "current_profile", "detect_profile_name",
    "driver_version",
    "facts", "gpu_info", "gpus", "hardware", "load_profile", "memory_available_bytes",
    "parse_gpu_query", "profile_for_gpus", "profile_names", "supports_cpu_fp8_kv", "vllm_build",
    "vllm_version",
]

"""What a started server reports about itself (:class:`StartupFacts`, read from its log), and
vLLM's own defaults for the batch limits where the log does not say them."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from vllm_course.env import machine


class StartupFacts(BaseModel):
    """What the server said about itself while starting.

    Attributes:
        vllm_version: version in the banner.
        kv_cache_tokens: KV cache size in tokens ("GPU/CPU KV cache size: N tokens"; the first
            engine's where several logged one: :func:`kv_cache_tokens_per_engine`).
        max_concurrency: "Maximum concurrency for L tokens per request: X" (the X).
        max_concurrency_at_len: the L of that line, in tokens.
        attention_backend: e.g. ``FLASH_ATTN``, or ``None`` where the build does not log it.
        engine_init_s: "init engine ... took S seconds".
        ready_s: seconds from launch until ``/health`` answered 200.
        block_size: tokens per KV cache block, from the ``vllm:cache_config_info`` metric (the
            attention backend may override ``--block-size``; vLLM's CPU backend uses 128).
        max_model_len: longest request (prompt + output tokens) the server accepts: "Using max
            model len N", or the engine config's ``max_seq_len=N`` (vLLM 0.26 and 0.32 log both).
        max_num_batched_tokens: the scheduler's token budget per step: "Chunked prefill is
            enabled with max_num_batched_tokens=N", else the flag from "non-default args".
        max_num_seqs: most requests in the running batch: the flag from "non-default args",
            else vLLM's default for this machine (:func:`default_max_num_seqs`; vLLM does not log
            it).
        max_num_seqs_source: ``"flag"`` or ``"vLLM default"``.
    """

    model_config = ConfigDict(extra="ignore")

    vllm_version: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_len: int | None = None
    attention_backend: str | None = None
    engine_init_s: float | None = None
    ready_s: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_seqs_source: str | None = None


def kv_cache_tokens_per_engine(log_text: str) -> list[int]:
    """Every engine's KV cache size in tokens from a server log ("GPU/CPU KV cache size: N
    tokens", logged once per engine: once for tensor parallelism, once per data-parallel rank),
    in the order logged."""
    return [int(n.replace(",", "")) for n in re.findall(r"KV cache size: ([\d,]+) tokens",
                                                         log_text)]


def parse_startup_log(text: str) -> StartupFacts:
    """Extract :class:`StartupFacts` from a server log (missing facts stay ``None``)."""
    facts = StartupFacts()
    if m := re.search(r"LLM engine \(v([^)\s]+)\)", text) or re.search(
        r"version (\d+\.\d+\S*)", text
    ):
        facts.vllm_version = m.group(1)
    if pools := kv_cache_tokens_per_engine(text):
        facts.kv_cache_tokens = pools[0]
    if m := re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x", text):
        facts.max_concurrency_at_len = int(m.group(1).replace(",", ""))
        facts.max_concurrency = float(m.group(2).replace(",", ""))
    if m := re.search(
        r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend", text
    ):
        facts.attention_backend = m.group(1)
    if m := re.search(r"init engine .*? took ([\d.]+) s", text):
        facts.engine_init_s = float(m.group(1))
    if m := re.search(r"Using max model len (\d+)", text) or re.search(
        r"LLM engine \(v[^)]*\) with config: .*?\bmax_seq_len=(\d+)", text
    ):
        facts.max_model_len = int(m.group(1))
    if m := re.search(r"max_num_batched_tokens=(\d+)", text) or re.search(
        r"non-default args: \{.*?'max_num_batched_tokens': (\d+)", text
    ):
        facts.max_num_batched_tokens = int(m.group(1))
    if m := re.search(r"non-default args: \{.*?'max_num_seqs': (\d+)", text):
        facts.max_num_seqs = int(m.group(1))
        facts.max_num_seqs_source = "flag"
    return facts


def this_machine() -> tuple[str, int | None, str]:
    """(device, GPU memory in bytes, GPU name) as :func:`default_max_num_seqs` and
    :func:`default_max_num_batched_tokens` take them, for this machine: ``"cpu"`` under vLLM's
    CPU build, else the first GPU ``nvidia-smi`` lists (none listed: ``None`` and ``""``, which
    count as a small GPU)."""
    if machine.vllm_build() == "cpu":
        return "cpu", None, ""
    gpus = machine.gpu_info()
    return ("gpu", gpus[0].memory_mib * 2**20, gpus[0].name) if gpus else ("gpu", None, "")


def default_max_num_seqs(
    device: str, gpu_memory_bytes: int | None = None, gpu_name: str = "",
    performance_mode: str | None = None, max_num_batched_tokens: int | None = None,
) -> int:
    """vLLM's default ``max_num_seqs`` for ``vllm serve`` (``EngineArgs.get_batch_defaults``).

    CPU: 128 per tensor-parallel rank (world size 1 assumed here); a GPU with at least 70 GiB
    that is not an A100: 1024; other GPUs: 256; ``--performance-mode throughput`` doubles it;
    vLLM then caps it at ``max_num_batched_tokens`` (``vllm/engine/arg_utils.py``,
    ``get_batch_defaults``; read in 0.26 and 0.32).

    Args:
        device: ``"cpu"`` or ``"gpu"``.
        gpu_memory_bytes: total memory of the GPU (bytes); ``None`` counts as small.
        gpu_name: e.g. ``"NVIDIA H200"``.
        performance_mode: the ``--performance-mode`` flag, if given.
        max_num_batched_tokens: the step budget, if known.
    """
    if device == "cpu":
        seqs = 128
    elif (gpu_memory_bytes or 0) >= 70 * 2**30 and "a100" not in gpu_name.lower():
        seqs = 1024
    else:
        seqs = 256
    if performance_mode == "throughput":
        seqs *= 2
    return min(seqs, max_num_batched_tokens) if max_num_batched_tokens else seqs


def default_max_num_batched_tokens(
    device: str, gpu_memory_bytes: int | None = None, gpu_name: str = "",
    performance_mode: str | None = None,
) -> int:
    """vLLM's default ``max_num_batched_tokens`` for ``vllm serve`` (``get_batch_defaults``).

    CPU: 2048 (world size 1); a GPU with at least 160 GiB: 16384; at least 70 GiB and not an
    A100 (H100, H200): 8192; other GPUs: 2048; ``--performance-mode throughput`` doubles it
    (``vllm/engine/arg_utils.py`` of 0.32, the same table for H200 in 0.26).
    vLLM logs the value only sometimes ("Chunked prefill is enabled with ..."), hence this.
    """
    mem = gpu_memory_bytes or 0
    if device == "cpu":
        budget = 2048
    elif mem >= 160 * 2**30:
        budget = 16384
    elif mem >= 70 * 2**30 and "a100" not in gpu_name.lower():
        budget = 8192
    else:
        budget = 2048
    return budget * 2 if performance_mode == "throughput" else budget

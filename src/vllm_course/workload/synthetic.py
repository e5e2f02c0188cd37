"""Synthetic request sets: prompt and output lengths drawn around a center from a seed, the
prompts built to their exact lengths (``kind: synthetic`` in a run config), and warm-up requests."""

from __future__ import annotations

import numpy as np

from vllm_course.config import Endpoint, SyntheticWorkload
from vllm_course.workload.request import Request
from vllm_course.workload.tokenizer import PromptTokenizer


def _lengths(center: int, spread: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if spread == 0:
        return np.full(n, center, dtype=int)
    lo, hi = max(1, round(center * (1 - spread))), max(1, round(center * (1 + spread)))
    return rng.integers(lo, hi + 1, size=n)


def synthesize(
    spec: SyntheticWorkload, tokenizer: PromptTokenizer, endpoint: Endpoint = "completions"
) -> list[Request]:
    """Seeded synthetic requests with exact prompt lengths for ``endpoint``.

    The same ``spec`` (seed included) and tokenizer give the same requests byte for byte.

    Raises:
        WorkloadError: if a length is too short for the endpoint's template.
    """
    rng = np.random.default_rng(spec.seed)
    isl = _lengths(spec.input_len, spec.input_len_range, spec.num_requests, rng)
    osl = _lengths(spec.output_len, spec.output_len_range, spec.num_requests, rng)
    return [
        Request(tokenizer.make_prompt(int(i), endpoint, rng), int(o), int(i))
        for i, o in zip(isl, osl, strict=True)
    ]


def warmup_requests(tokenizer: PromptTokenizer, n: int, endpoint: Endpoint) -> list[Request]:
    """``n`` short requests (32 prompt, 8 output tokens) that share no prefix with a workload."""
    rng = np.random.default_rng(2**31 - 1)
    return [Request(tokenizer.make_prompt(32, endpoint, rng), 8, 32) for _ in range(n)]

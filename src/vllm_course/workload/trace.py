"""Public LLM-serving traces as request sets: the Azure LLM inference CSVs and Mooncake's JSONL.

Two layouts are read, as the public files write them (Azure/AzurePublicDataset,
``AzureLLMInferenceDataset2023.md``; kvcache-ai/Mooncake, ``FAST25-release/traces``):

* **azure**: CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (extra columns, such
  as the 2025 multimodal file's ``NumImages``, are ignored). ``TIMESTAMP`` is a date-time as the
  public files write it: ``2023-11-16 18:17:03.9799600`` (2023: naive, 7 fractional digits) or
  ``2024-05-10 00:00:00.009930+00:00`` (2024: UTC offset, the fraction sometimes missing). A plain
  number is taken as seconds. The files carry no text, so each prompt is readable text built to
  exactly ``ContextTokens`` tokens as the server counts them for the endpoint (no two prompts
  share a prefix).
* **mooncake**: JSONL with ``timestamp`` (ms from the trace start), ``input_length``,
  ``output_length`` and ``hash_ids`` (optional here; other keys are ignored). Each hash id stands
  for one block of ``block_size`` tokens (512 in the public traces); equal ids at positions
  ``0..k`` mean the first ``(k+1) * block_size`` tokens are equal.

Mooncake prompts are **token ids** (``/v1/completions`` only), not text: block ``j`` of a prompt
(positions ``j*block_size`` up to ``(j+1)*block_size``) is drawn from a generator seeded with the
block's hash id, as whole-word vocabulary tokens (``PromptTokenizer.words``, so the prompt decodes
to readable words). Requests with equal leading hash ids therefore have token-identical prefixes,
which the server's prefix cache sees. Text would not do: re-tokenizing concatenated blocks can
merge tokens across a block boundary and shift every later block. vLLM does not add BOS to a
token-id prompt (it skips tokenization, ``usage.prompt_tokens`` is ``len(ids)``), so position 0
is the model's BOS id (1 for Mistral) in place of the first block's first word, and the prompt is
exactly ``input_length`` ids. Tokens past the last hash id's block are unique to the request.

Rows are sorted by timestamp (stably: ties keep file order; the public files are already in
order). ``window_s=(start, end)`` keeps requests with ``start <= t < end``, ``t`` in trace seconds
from the file's first request; ``limit`` then keeps the first N. Each kept request's
``timestamp_s`` is ``(t - t_first_kept) / time_scale``: the first is sent at 0, and
``time_scale=2.0`` replays twice as fast.

Every problem is a :class:`~vllm_course.workload.WorkloadError` naming ``path:line``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vllm_course.config import Endpoint, TraceWorkload
from vllm_course.workload.request import Request, WorkloadError
from vllm_course.workload.tokenizer import PromptTokenizer
from vllm_course.workload.trace_rows import (  # noqa: F401 (the rows' API, re-exported)
    AZURE_COLUMNS,
    MOONCAKE_BLOCK_SIZE,
    MOONCAKE_FIELDS,
    TraceFormat,
    TraceRow,
    detect_format,
    parse_timestamp,
    read_rows,
    replay_times,
    select,
)


def bos_ids(tokenizer: PromptTokenizer) -> list[int]:
    """The ids the server puts before a text prompt on ``/v1/completions`` (``[1]`` for Mistral)."""
    full = tokenizer.prompt_ids("hello", "completions")
    body = tokenizer.encode("hello")
    for i in range(len(full) - len(body) + 1):
        if full[i : i + len(body)] == body:
            return list(full[:i])
    return []


def word_token_ids(tokenizer: PromptTokenizer) -> np.ndarray:
    """Token ids of the whole words in ``tokenizer.words`` that are one token each, sorted."""
    ids: set[int] = set()
    for word in tokenizer.words:
        for candidate in (tokenizer.encode(" " + word), tokenizer.encode(word)):
            if len(candidate) == 1:
                ids.add(candidate[0])
                break
    if not ids:
        raise WorkloadError(f"{tokenizer.model}: no single-token words in the vocabulary")
    return np.array(sorted(ids), dtype=np.int64)


class BlockPrompts:
    """Token-id prompts whose blocks are fixed by Mooncake hash ids (see the module docstring).

    Args:
        tokenizer: the model's tokenizer (for its BOS and whole-word ids).
        block_size: tokens per hash id.
        seed: salt; the same seed gives the same tokens for the same hash id.
    """

    def __init__(
        self, tokenizer: PromptTokenizer, block_size: int = MOONCAKE_BLOCK_SIZE, seed: int = 0
    ):
        self.block_size = block_size
        self.seed = seed
        self.bos = bos_ids(tokenizer)
        self.words = word_token_ids(tokenizer)
        self._blocks: dict[int, np.ndarray] = {}

    def _draw(self, *key: int, size: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, *key])
        return self.words[rng.integers(0, len(self.words), size=size)]

    def block(self, hash_id: int) -> np.ndarray:
        """The ``block_size`` token ids of one hash id (cached)."""
        got = self._blocks.get(hash_id)
        if got is None:
            got = self._blocks[hash_id] = self._draw(0, hash_id, size=self.block_size)
        return got

    def prompt(self, length: int, hash_ids: Sequence[int], unique_key: int) -> tuple[int, ...]:
        """``length`` ids: BOS, then the hash ids' blocks, then tokens drawn from ``unique_key``.

        Position ``p`` (``p >= len(BOS)``) holds token ``p`` of the concatenated blocks, so the
        first ``(k+1) * block_size`` tokens depend only on ``hash_ids[:k+1]``.
        """
        if length < max(1, len(self.bos)):
            raise WorkloadError(f"a token-id prompt needs at least {max(1, len(self.bos))} tokens")
        parts = [self.block(h) for h in hash_ids]
        covered = len(hash_ids) * self.block_size
        if covered < length:
            parts.append(self._draw(1, unique_key, size=length - covered))
        body = np.concatenate(parts)[:length] if parts else np.zeros(0, dtype=np.int64)
        return tuple(self.bos) + tuple(body[len(self.bos) :].tolist())


def build_requests(
    rows: Sequence[TraceRow],
    tokenizer: PromptTokenizer,
    spec: TraceWorkload,
    endpoint: Endpoint = "completions",
) -> list[Request]:
    """Requests for rows already selected from ``spec.path``: exact ``prompt_len``/``output_len``,
    ``timestamp_s`` from 0 (``spec``'s ``time_scale``, ``block_size`` and ``seed`` apply).

    Azure rows get text prompts (either endpoint), Mooncake rows token-id prompts (completions).

    Raises:
        WorkloadError: a Mooncake trace sent to the chat endpoint, or a prompt too short for the
            endpoint's template (naming ``source:line``).
    """
    source, seed = str(spec.path), spec.seed
    times = replay_times(rows, spec.time_scale)
    out = []
    if spec.trace_format == "mooncake":
        if endpoint != "completions":
            raise WorkloadError(
                f"{source}: a Mooncake trace replays as token-id prompts (exact shared prefixes), "
                "which only the completions endpoint accepts; set load.endpoint: completions"
            )
        blocks = BlockPrompts(tokenizer, spec.block_size, seed)
        for row, t in zip(rows, times, strict=True):
            try:
                prompt = blocks.prompt(row.input_len, row.hash_ids, row.line)
            except WorkloadError as exc:
                raise WorkloadError(f"{source}:{row.line}: {exc}") from None
            out.append(Request(prompt, row.output_len, row.input_len, timestamp_s=t))
        return out
    for row, t in zip(rows, times, strict=True):
        rng = np.random.default_rng([seed, row.line])
        try:
            text = tokenizer.make_prompt(row.input_len, endpoint, rng)
        except WorkloadError as exc:
            raise WorkloadError(f"{source}:{row.line}: {exc}") from None
        out.append(Request(text, row.output_len, row.input_len, timestamp_s=t))
    return out


def import_trace(
    trace: str | Path | TraceWorkload,
    tokenizer: PromptTokenizer | str = "tiny-mistral",
    endpoint: Endpoint = "completions",
) -> list[Request]:
    """Read a trace file into requests (see the module docstring for every option).

    ``trace`` is the file (every option at its default) or a ``kind: trace`` workload, the same
    :class:`~vllm_course.config.TraceWorkload` a run config holds (format, time scale, window,
    limit, Mooncake block size, seed, empty rows). The same trace and arguments give the same
    requests byte for byte.

    Example::

        reqs = import_trace(TraceWorkload(path="datasets/traces/mooncake_sample.jsonl",
                                          time_scale=2.0, window_s=(0, 30), limit=50),
                            "tiny-mistral")

    Raises:
        FileNotFoundError: if the file does not exist.
        WorkloadError: for a bad line (``path:line``), an empty window, or a Mooncake trace on
            the chat endpoint.
    """
    spec = trace if isinstance(trace, TraceWorkload) else TraceWorkload(path=trace)
    rows = read_rows(spec.path, spec.format, block_size=spec.block_size,
                     drop_empty=spec.drop_empty)
    rows = select(rows, window_s=spec.window_s, limit=spec.limit)
    tok = PromptTokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    return build_requests(rows, tok, spec, endpoint)

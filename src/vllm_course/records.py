"""The raw record of one streamed request: timestamps and token counts, nothing derived.

Times are seconds on the client's monotonic clock (``time.perf_counter()``), relative to the start
of the run (the moment the first measured request was scheduled), so a record can be saved and
summarised later. Derived metrics (TTFT, TPOT, ITL, E2EL) live in :mod:`vllm_course.metrics`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it.

    Attributes:
        index: position of the request in the workload.
        prompt_len: the prompt length the workload asked for, in tokens (``None`` if unknown).
        max_tokens: requested output tokens.
        scheduled_s: when the arrival process said to send it (s since run start).
        dispatched_s: when the load generator released it (s), before it waited for a
            concurrency slot; ``dispatched_s - scheduled_s`` is the client's send lag (how late
            its event loop was), ``sent_s - dispatched_s`` the wait for a slot under
            ``max_concurrency``. ``None`` in records from before this field existed.
        sent_s: when the HTTP request was actually sent (s); ``sent_s - scheduled_s`` is client
            queue time (waiting for a concurrency slot) plus send lag.
        role_chunk_s: arrival time of an empty role-only chunk (chat endpoint), if one came.
        chunk_s: arrival time of each chunk that carried generated tokens, in order (s).
        chunk_tokens: generated tokens in each of those chunks (same length as ``chunk_s``).
        last_choice_s: arrival of the last chunk with a non-empty ``choices`` list (s).
        end_s: when the request ended: stream closed, or the error was seen (s).
        prompt_tokens: ``usage.prompt_tokens`` from the server.
        output_tokens: ``usage.completion_tokens`` from the server's final usage, or the sum of
            ``chunk_tokens`` if the server sent no usage.
        token_count_source: ``"continuous_usage"`` (per-chunk usage from the server),
            ``"chunks"`` (server sent no per-chunk usage: one token per text chunk assumed).
        finish_reason: the server's finish reason of the (only) choice.
        error: why the request failed, or ``None`` if it succeeded.
        warmup: True for warmup requests (never part of results).
    """

    index: int
    prompt_len: int | None = None
    max_tokens: int = 0
    scheduled_s: float = 0.0
    dispatched_s: float | None = None
    sent_s: float | None = None
    role_chunk_s: float | None = None
    chunk_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    last_choice_s: float | None = None
    end_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    token_count_source: str = "continuous_usage"
    finish_reason: str | None = None
    error: str | None = None
    warmup: bool = False

    @property
    def success(self) -> bool:
        """True if the request finished without error and produced at least one token."""
        return self.error is None and bool(self.chunk_s)

    def accounting_errors(self) -> list[str]:
        """What is wrong with this record's token accounting; empty when it adds up.

        The invariants hold for any correct client of a vLLM server, whatever the server's
        output path does (``--stream-interval``, speculative decoding, or a stream that fell
        behind may put several tokens in one chunk; vLLM's ``continuous_usage_stats`` then still
        reports the cumulative ``completion_tokens`` on each chunk):

        * one arrival time per token-carrying chunk, and every such chunk carries >= 1 token
          (a chunk counted twice shows up as a chunk of 0 tokens);
        * the chunks' tokens add up to ``output_tokens`` (the server's ``usage``);
        * a successful request that stopped for ``length`` produced ``max_tokens`` tokens.

        A record of a failed request is checked only for the first invariant.
        """
        errors = []
        if len(self.chunk_s) != len(self.chunk_tokens):
            errors.append(f"{len(self.chunk_s)} chunk times for {len(self.chunk_tokens)} chunks")
        if any(n < 1 for n in self.chunk_tokens):
            errors.append(f"a chunk without tokens among {self.chunk_tokens}")
        if not self.success:
            return errors
        if sum(self.chunk_tokens) != self.output_tokens:
            errors.append(f"chunks carry {sum(self.chunk_tokens)} tokens, usage says "
                          f"{self.output_tokens}")
        if self.finish_reason == "length" and self.output_tokens != self.max_tokens:
            errors.append(f"{self.output_tokens} tokens for max_tokens {self.max_tokens} "
                          "(finish_reason length)")
        return errors

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of ``requests.jsonl``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)

"""The prefix-cache hit rate a request set should show on vLLM, computed from the set itself.

vLLM V1's automatic prefix caching keeps the KV of every *full* block of ``block_size`` tokens,
keyed by a hash of the block's tokens chained with the hash of the block before it, so a block is
reused only when the whole prefix up to and including it is identical. When a request arrives,
``KVCacheManager.get_computed_blocks`` looks up its blocks in order, stopping at the first miss,
with ``max_cache_hit_length = num_tokens - 1``: the last prompt token is always computed (its
logits are needed), and because the hit must be whole blocks, a fully cached prompt whose length
is a multiple of ``block_size`` recomputes its whole last block. The counters
``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` then grow by the prompt's
token count and by the cached tokens.

:func:`prefix_stats` replays that rule on a fresh server with enough KV cache that nothing is
evicted, requests taken in file order. vLLM registers a block in the cache when it is *scheduled*
(``KVCacheManager.allocate_slots``), so a request scheduled later in the same step already hits it;
concurrency alone does not lower the rate. A real run can still differ: requests that reach the
scheduler out of file order, a shared prefix whose prefill chunked prefill splits over several
steps (a request scheduled in the first step hits only the part scheduled so far), evictions when
the cache is full. Output tokens are cached by vLLM too, but synthetic prompts never continue a
model's own output, so they are ignored.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_course.config import Endpoint


@dataclass(frozen=True)
class PrefixStats:
    """Prefix sharing of a request set.

    Attributes:
        num_requests: requests replayed.
        block_size: the KV cache block size assumed (vLLM's default is 16).
        prompt_tokens: Σ prompt tokens: Δ ``vllm:prefix_cache_queries_total``.
        cached_tokens: Σ tokens served from the cache: Δ ``vllm:prefix_cache_hits_total``.
        shared_tokens: Σ over requests of the longest common token prefix with any earlier
            request (no block flooring, no last-token rule): how much the set shares.
    """

    num_requests: int
    block_size: int
    prompt_tokens: int
    cached_tokens: int
    shared_tokens: int

    @property
    def hit_rate(self) -> float:
        """Expected token-level prefix-cache hit rate: cached / prompt tokens."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def sharing_ratio(self) -> float:
        """Fraction of prompt tokens shared with an earlier request."""
        return self.shared_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def cached_tokens(token_ids: Sequence[Sequence[int]], block_size: int = 16) -> list[int]:
    """Tokens of each prompt that vLLM serves from its prefix cache, replayed in order.

    A trie of full blocks (a block's key is its parent node and its tokens, which is what vLLM's
    chained block hash stands for) holds every full block seen so far.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    trie: dict[tuple[int, tuple[int, ...]], int] = {}
    hits: list[int] = []
    for ids in token_ids:
        limit = max(len(ids) - 1, 0) // block_size  # max_cache_hit_length, floored to blocks
        node, matched, missed = 0, 0, False
        for start in range(0, len(ids) - block_size + 1, block_size):
            key = (node, tuple(ids[start:start + block_size]))
            child = trie.get(key)
            if child is None:
                missed = True
                child = trie[key] = len(trie) + 1
            elif not missed and matched < limit:
                matched += 1
            node = child
        hits.append(matched * block_size)
    return hits


def shared_tokens(token_ids: Sequence[Sequence[int]]) -> list[int]:
    """Longest common token prefix of each prompt with any earlier prompt.

    The earlier prompts are kept sorted; the longest common prefix with a set of sequences is
    reached at one of the two sorted neighbours of the new one, so each prompt costs a bisection.
    """
    seen: list[tuple[int, ...]] = []
    out: list[int] = []
    for ids in token_ids:
        key = tuple(ids)
        i = bisect.bisect_left(seen, key)
        neighbours = seen[max(i - 1, 0):i + 1]
        out.append(max((_common(key, other) for other in neighbours), default=0))
        seen.insert(i, key)
    return out


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def prefix_stats(token_ids: Sequence[Sequence[int]], block_size: int = 16) -> PrefixStats:
    """:class:`PrefixStats` of prompts given as token ids, in arrival order."""
    return PrefixStats(
        num_requests=len(token_ids),
        block_size=block_size,
        prompt_tokens=sum(len(ids) for ids in token_ids),
        cached_tokens=sum(cached_tokens(token_ids, block_size)),
        shared_tokens=sum(shared_tokens(token_ids)),
    )


def expected_prefix_hit_rate(
    requests: Sequence, tokenizer, endpoint: Endpoint, block_size: int = 16
) -> PrefixStats:
    """Prefix-cache statistics of ``requests`` sent in order to ``endpoint`` on a fresh server.

    Args:
        requests: :class:`vllm_course.workload.Request` objects, in sending order.
        tokenizer: a :class:`vllm_course.workload.PromptTokenizer` for the served model.
        endpoint: ``completions`` or ``chat``; prompts are tokenized as the server does.
        block_size: the server's ``--block-size`` (16 by default in vLLM).

    Returns:
        :class:`PrefixStats`; ``hit_rate`` is the expected Δhits / Δqueries.
    """
    ids = [tokenizer.prompt_ids(r.prompt, endpoint) for r in requests]
    return prefix_stats(ids, block_size)

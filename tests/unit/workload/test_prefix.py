"""Expected prefix-cache hits: vLLM's full-block and last-token rules on hand-made prompts."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_course.workload.prefix import (
    PrefixStats,
    cached_tokens,
    expected_prefix_hit_rate,
    prefix_stats,
    shared_tokens,
)

B = 16


def seq(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_first_request_never_hits():
    assert cached_tokens([seq(100)], B) == [0]


def test_identical_prompt_keeps_its_last_token_uncached():
    # 33 tokens: max_cache_hit_length 32 -> two full blocks served from the cache
    assert cached_tokens([seq(33), seq(33)], B) == [0, 32]


def test_identical_prompt_of_whole_blocks_recomputes_its_last_block():
    # 32 tokens: max_cache_hit_length 31 -> floored to one block; the second block is recomputed
    assert cached_tokens([seq(32), seq(32)], B) == [0, 16]
    assert cached_tokens([seq(16), seq(16)], B) == [0, 0]


def test_partial_block_is_not_a_hit():
    second = seq(20) + seq(30, 1000)
    assert cached_tokens([seq(50), second], B) == [0, 16]
    assert cached_tokens([seq(50), seq(15) + [9999] + seq(40, 100)], B) == [0, 0]


def test_only_full_blocks_of_the_earlier_prompt_are_cached():
    # the earlier prompt has one full block (16) and 4 tokens in a partial block
    assert cached_tokens([seq(20), seq(40)], B) == [0, 16]
    # a shorter prompt that is a prefix of an earlier one: capped by its own length - 1
    assert cached_tokens([seq(40), seq(20)], B) == [0, 16]


def test_blocks_are_chained_to_their_prefix():
    # same second block, different first block: no hit (vLLM hashes a block with its parent)
    a = seq(16, 0) + seq(16, 500) + [1]
    b = seq(16, 100) + seq(16, 500) + [1]
    assert cached_tokens([a, b], B) == [0, 0]


def test_longest_match_over_all_earlier_prompts():
    p = seq(64)
    prompts = [p[:20] + seq(40, 900), p[:50] + seq(10, 700), p + [5]]
    assert cached_tokens(prompts, B) == [0, 16, 48]
    assert shared_tokens(prompts) == [0, 20, 50]


def test_block_size_one_and_errors():
    assert cached_tokens([seq(5), seq(5)], 1) == [0, 4]
    with pytest.raises(ValueError):
        cached_tokens([seq(5)], 0)


def _brute_force(prompts, block):
    hits, shared = [], []
    for i, p in enumerate(prompts):
        best = 0
        for q in prompts[:i]:
            n = 0
            while n < min(len(p), len(q)) and p[n] == q[n]:
                n += 1
            best = max(best, n)
        shared.append(best)
        hits.append(min(best, len(p) - 1) // block * block)
    return hits, shared


def test_matches_a_brute_force_replay_on_random_prompts():
    rng = np.random.default_rng(0)
    stems = [rng.integers(0, 3, size=80).tolist() for _ in range(4)]
    prompts = []
    for _ in range(200):
        stem = stems[int(rng.integers(0, 4))]
        cut = int(rng.integers(0, 80))
        prompts.append(stem[:cut] + rng.integers(0, 3, size=int(rng.integers(1, 40))).tolist())
    for block in (1, 4, 16):
        hits, shared = _brute_force(prompts, block)
        assert cached_tokens(prompts, block) == hits
        assert shared_tokens(prompts) == shared


def test_stats_ratios():
    s = prefix_stats([seq(33), seq(33), seq(10, 500)], B)
    assert s == PrefixStats(3, B, 76, 32, 33)
    assert s.hit_rate == pytest.approx(32 / 76) and s.sharing_ratio == pytest.approx(33 / 76)
    empty = prefix_stats([], B)
    assert empty.hit_rate == 0.0 and empty.sharing_ratio == 0.0


class _FakeTokenizer:
    """Words are tokens; completions adds BOS (1), chat wraps each user turn in [3] ... [4]."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def _ids(self, text):
        return [self.vocab.setdefault(w, len(self.vocab) + 10) for w in text.split()]

    def prompt_ids(self, prompt, endpoint):
        if endpoint == "completions":
            return [1] + self._ids(prompt)
        ids = [1]
        for role, content in prompt:
            words = self._ids(content)
            ids += [3, *words, 4] if role == "user" else [*words, 2]
        return ids


def test_expected_hit_rate_tokenizes_per_endpoint():
    shared = " ".join(f"w{i}" for i in range(40))
    requests = [type("R", (), {"prompt": f"{shared} a{i} b{i}"})() for i in range(3)]
    s = expected_prefix_hit_rate(requests, _FakeTokenizer(), "completions")
    assert s.prompt_tokens == 3 * 43 and s.cached_tokens == 2 * 32 and s.shared_tokens == 2 * 41
    turn1 = (("user", shared),)
    turn2 = turn1 + (("assistant", "x " * 20), ("user", "next question"))
    chat = [type("R", (), {"prompt": p})() for p in (turn1, turn2)]
    s = expected_prefix_hit_rate(chat, _FakeTokenizer(), "chat")
    assert s.cached_tokens == 32 and s.shared_tokens == 43  # BOS + [INST] + 40 words + [/INST]

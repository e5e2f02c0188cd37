"""``vllm_course.workload``: JSONL request sets and exact-length synthetic prompts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vllm_course import workload
from vllm_course.config import FileWorkload, SyntheticWorkload
from vllm_course.workload import (
    PromptTokenizer,
    Request,
    WorkloadError,
    read_jsonl,
    synthesize,
    write_jsonl,
)


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer("tiny-mistral")


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "reqs.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = '{"prompt": "hi", "output_len": 4}'


# -- read_jsonl -----------------------------------------------------------------------------


def test_read_jsonl_all_forms(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"prompt": "some text", "output_len": 64, "prompt_len": 256}',
        "",
        "   ",
        '{"prompt_token_ids": [1, 3, 5], "output_len": 2}',
        '{"output_len": 1, "prompt": "caf\u00e9"}',
    )
    assert read_jsonl(path) == [
        Request("some text", 64, 256),
        Request((1, 3, 5), 2, None),
        Request("caf\u00e9", 1, None),
    ]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"prompt": "hi", "output_len": 4', r"not valid JSON"),
        ('{"prompt": "hi"}', r"missing field 'output_len'"),
        ('{"prompt": "hi", "output_len": -3}', r"'output_len' must be an integer >= 1, got -3"),
        ('{"prompt": "hi", "output_len": 0}', r"'output_len' must be an integer >= 1, got 0"),
        ('{"prompt": "hi", "output_len": 2.5}', r"'output_len' must be an integer >= 1, got 2.5"),
        ('{"prompt": "hi", "output_len": true}', r"'output_len' must be an integer >= 1, got True"),
        (
            '{"prompt": "hi", "prompt_token_ids": [1], "output_len": 4}',
            r"give exactly one of 'prompt', 'prompt_token_ids' or 'messages'",
        ),
        ('{"output_len": 4}', r"give exactly one of 'prompt', 'prompt_token_ids' or 'messages'"),
        (
            '{"prompt": "hi", "output_len": 4, "max_tokens": 9}',
            r"unknown field\(s\) \['max_tokens'\]",
        ),
        ('{"prompt": 42, "output_len": 4}', r"'prompt' must be a string"),
        ('{"prompt": ["a"], "output_len": 4}', r"'prompt' must be a string"),
        ('{"prompt_token_ids": [], "output_len": 4}', r"'prompt_token_ids' must be non-empty"),
        ('{"prompt_token_ids": [1, -2], "output_len": 4}', r"'prompt_token_ids' must be non-empty"),
        ('{"prompt": "hi", "output_len": 4, "prompt_len": 0}', r"'prompt_len' must be an integer"),
        ("[1, 2]", r"expected a JSON object"),
    ],
)
def test_read_jsonl_errors_name_path_and_line(tmp_path: Path, line: str, match: str) -> None:
    # the bad line is line 3 of the file (after a good line and a blank one)
    path = _write(tmp_path, GOOD, "", line, GOOD)
    with pytest.raises(WorkloadError, match=match) as info:
        read_jsonl(path)
    assert str(info.value).startswith(f"{path}:3: ")


@pytest.mark.parametrize(
    "line",
    [
        '{"prompt": "hi", "output_len": 4, "prompt_len": true}',
        '{"prompt_token_ids": [true, 5], "output_len": 4}',
    ],
)
def test_read_jsonl_rejects_booleans_as_ints(tmp_path: Path, line: str) -> None:
    with pytest.raises(WorkloadError):
        read_jsonl(_write(tmp_path, line))


def test_read_jsonl_limit(tmp_path: Path) -> None:
    lines = [json.dumps({"prompt": f"p{i}", "output_len": i + 1}) for i in range(5)]
    # a bad line after the limit is never read
    path = _write(tmp_path, lines[0], "", *lines[1:], "{broken")
    got = read_jsonl(path, limit=3)
    assert got == [Request("p0", 1), Request("p1", 2), Request("p2", 3)]
    with pytest.raises(WorkloadError, match=r":7: not valid JSON"):
        read_jsonl(path)


def test_read_jsonl_empty_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "", "  ")
    with pytest.raises(WorkloadError, match="no requests in file"):
        read_jsonl(path)


def test_read_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")


def test_write_read_round_trip_is_byte_identical(tmp_path: Path) -> None:
    reqs = [Request("plain", 3, 7), Request((1, 2, 3), 8), Request('\u00fcber "quoted"\n', 1, 2)]
    first = tmp_path / "a.jsonl"
    write_jsonl(reqs, first)
    text = first.read_bytes()
    assert text.endswith(b"\n") and b"\r\n" not in text
    assert text.splitlines()[0] == b'{"output_len": 3, "prompt": "plain", "prompt_len": 7}'
    back = read_jsonl(first)
    assert back == reqs
    second = tmp_path / "b.jsonl"
    write_jsonl(back, second)
    assert second.read_bytes() == text


def test_request_to_json() -> None:
    assert Request((4, 5), 2).to_json() == '{"output_len": 2, "prompt_token_ids": [4, 5]}'
    assert Request("é", 1, 3).to_json() == '{"output_len": 1, "prompt": "é", "prompt_len": 3}'


def test_load_file_workload(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD, '{"prompt_token_ids": [1, 2], "output_len": 3}', GOOD)
    got = workload.load_requests(FileWorkload(path=path, num_requests=2), "tiny-mistral",
                                 "completions")
    assert got == [Request("hi", 4), Request((1, 2), 3)]
    with pytest.raises(WorkloadError, match=r"1 token-id prompt\(s\) \(first: request 2\) only work with the completions endpoint, not chat: set the load's endpoint to completions \(load: \{endpoint: completions\} in a YAML file\)"):
        workload.load_requests(FileWorkload(path=path), "tiny-mistral", "chat")
    only_text = _write(tmp_path, GOOD)
    only = workload.load_requests(FileWorkload(path=only_text), "tiny-mistral", "chat")
    assert only == [Request("hi", 4)]


# -- tokenizer and synthetic prompts (real offline tokenizer) -------------------------------


def test_prompt_len_matches_server_counts(tok: PromptTokenizer) -> None:
    # observed from a real vLLM 0.32 server's usage.prompt_tokens for "hello there"
    assert tok.prompt_len("hello there", "completions") == 4
    assert tok.prompt_len("hello there", "chat") == 6
    ids = tok.encode("hello there")
    assert len(ids) == 3
    assert tok.decode(ids) == "hello there"


def test_words_are_plain_lowercase_words(tok: PromptTokenizer) -> None:
    words = tok.words
    assert len(words) > 1000
    assert words == sorted(words)
    assert all(w.isascii() and w.isalpha() and w.islower() and len(w) >= 3 for w in words)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_make_prompt_exact_lengths(tok: PromptTokenizer, endpoint: str) -> None:
    rng = np.random.default_rng(1234)
    lengths = sorted(
        {
            5,
            6,
            7,
            8,
            9,
            10,
            11,
            16,
            31,
            32,
            33,
            64,
            100,
            127,
            128,
            255,
            256,
            257,
            511,
            512,
            599,
            600,
        }
        | set(range(12, 600, 23))
    )
    for length in lengths:
        text = tok.make_prompt(length, endpoint, rng)
        assert isinstance(text, str) and text == text.strip() and text
        assert tok.prompt_len(text, endpoint) == length, (length, text)


def test_make_prompt_minimum_lengths(tok: PromptTokenizer) -> None:
    rng = np.random.default_rng(0)
    # completions: BOS + 1 token; chat: BOS [INST] ... [/INST] + 1 token
    assert tok.prompt_len(tok.make_prompt(2, "completions", rng), "completions") == 2
    assert tok.prompt_len(tok.make_prompt(4, "chat", rng), "chat") == 4
    with pytest.raises(WorkloadError, match="a completions prompt needs at least 2 tokens"):
        tok.make_prompt(1, "completions", rng)
    with pytest.raises(WorkloadError, match=r"a chat prompt needs at least 4 tokens \(3 for"):
        tok.make_prompt(3, "chat", rng)


def test_synthesize_is_reproducible(tok: PromptTokenizer) -> None:
    spec = SyntheticWorkload(
        num_requests=6,
        input_len=40,
        output_len=8,
        input_len_range=0.5,
        output_len_range=0.5,
        seed=7,
    )
    a = synthesize(spec, tok, "completions")
    b = synthesize(spec, tok, "completions")
    assert [r.to_json() for r in a] == [r.to_json() for r in b]
    c = synthesize(spec.model_copy(update={"seed": 8}), tok, "completions")
    assert [r.to_json() for r in a] != [r.to_json() for r in c]
    for r in a:
        assert isinstance(r.prompt, str)
        assert 20 <= r.prompt_len <= 60
        assert 4 <= r.output_len <= 12
        assert tok.prompt_len(r.prompt, "completions") == r.prompt_len
    assert len({r.prompt for r in a}) == 6


def test_synthesize_fixed_lengths_for_chat(tok: PromptTokenizer) -> None:
    spec = SyntheticWorkload(num_requests=3, input_len=25, output_len=5, seed=0)
    reqs = synthesize(spec, tok, "chat")
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(25, 5)] * 3
    assert all(tok.prompt_len(r.prompt, "chat") == 25 for r in reqs)


def test_synthesize_too_short_raises(tok: PromptTokenizer) -> None:
    with pytest.raises(WorkloadError, match="at least 4 tokens"):
        synthesize(SyntheticWorkload(num_requests=2, input_len=3, output_len=2), tok, "chat")


def test_warmup_requests(tok: PromptTokenizer) -> None:
    reqs = workload.warmup_requests(tok, 3, "chat")
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(32, 8)] * 3
    assert all(tok.prompt_len(r.prompt, "chat") == 32 for r in reqs)
    assert len({r.prompt for r in reqs}) == 3
    assert [r.prompt for r in workload.warmup_requests(tok, 3, "chat")] == [r.prompt for r in reqs]

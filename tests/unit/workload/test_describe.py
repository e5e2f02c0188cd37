"""``vllm_course.workload.stats`` and ``vllm-course workload describe`` on tiny files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.config import TraceWorkload
from vllm_course.workload import PromptTokenizer, Request, prefix, trace, write_jsonl
from vllm_course.workload.stats import (
    WorkloadStats,
    describe_file,
    describe_requests,
    detect_file_format,
    hash_id_prefix,
    prompt_lengths,
    save_histogram_png,
)

REPO = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer("tiny-mistral")


def _tiny_jsonl(tmp_path: Path) -> Path:
    base = (1, *range(100, 131))  # 32 tokens: two full 16-token blocks
    requests = [
        Request(base, 10, timestamp_s=1.0),
        Request(base + tuple(range(200, 216)), 20, timestamp_s=2.0),  # shares the 32
        Request((1, *range(300, 315)), 30, timestamp_s=3.0),  # 16 tokens, shares BOS only
        Request((1, *range(400, 415)), 40, timestamp_s=5.0),
    ]
    path = tmp_path / "tiny.jsonl"
    write_jsonl(requests, path)
    return path


def test_describe_jsonl_numbers(tmp_path: Path, tok: PromptTokenizer) -> None:
    stats = describe_file(_tiny_jsonl(tmp_path), model="tiny-mistral")
    assert stats.format == "jsonl" and stats.num_requests == 4
    assert stats.prompt_lens == [32, 48, 16, 16]
    assert stats.output_lens == [10, 20, 30, 40]
    assert (stats.prompt.p50, stats.prompt.max, stats.prompt.mean) == (24.0, 48.0, 28.0)
    assert stats.prompt.p90 == pytest.approx(43.2)  # linear interpolation
    assert stats.output.p99 == pytest.approx(39.7)
    assert (stats.total_prompt_tokens, stats.total_output_tokens, stats.total_tokens) == (
        112,
        100,
        212,
    )
    # request 2 finds 32 tokens cached; requests 3 and 4 share only BOS (1 token each)
    assert stats.prefix_hit_rate == pytest.approx(32 / 112)
    assert stats.prefix_sharing == pytest.approx((32 + 1 + 1) / 112)
    assert stats.span_s == 4.0 and stats.arrival_rate_rps == pytest.approx(0.75)
    text = stats.report()
    for piece in (
        "requests       4",
        "prompt tokens  mean 28.0  P50 24  P90 43  P99 48  max 48",
        "total tokens   212 (112 prompt + 100 output)",
        "prefix sharing 30.4% of prompt tokens",
        "prefix cache   28.6% expected hit rate",
        "arrivals       0.750 req/s over 4.000 s (trace timestamps)",
    ):
        assert piece in text, (piece, text)


def test_describe_requests_without_timestamps(tok: PromptTokenizer) -> None:
    stats = describe_requests([Request("hello there", 5), Request("hello there", 5)], tokenizer=tok)
    assert stats.prompt_lens == [4, 4] and stats.timestamps_s is None
    assert stats.arrival_rate_rps is None and "no timestamps" in stats.report()
    same_time = WorkloadStats("x", "jsonl", [4, 4], [1, 1], timestamps_s=[2.0, 2.0])
    assert same_time.arrival_rate_rps is None and "all 2 at the same time" in same_time.report()


def test_prompt_lengths(tok: PromptTokenizer) -> None:
    reqs = [Request("hello there", 1), Request((1, 2, 3), 1), Request("x", 1, 77)]
    assert prompt_lengths(reqs, "completions", tok) == [4, 3, 77]
    assert prompt_lengths(reqs, "chat", "tiny-mistral") == [6, 3, 77]
    assert prompt_lengths(reqs[1:]) == [3, 77]


def test_describe_mooncake_trace_matches_the_built_prompts(tok: PromptTokenizer) -> None:
    path = REPO / "datasets" / "traces" / "mooncake_sample.jsonl"
    stats = describe_file(path)
    assert stats.format == "mooncake" and stats.num_requests == 24
    rows = trace.read_rows(path)
    assert stats.prompt_lens == [r.input_len for r in rows]
    assert stats.timestamps_s[0] == 0.0 and stats.timestamps_s[-1] == pytest.approx(11.625)
    # the hash-id shortcut gives what vllm_course.workload.prefix computes on the real token ids
    ids = [r.prompt for r in trace.import_trace(path, tok)]
    shared, cached = hash_id_prefix(rows)
    assert cached == prefix.cached_tokens(ids)
    assert stats.prefix_hit_rate == pytest.approx(prefix.prefix_stats(ids).hit_rate)
    # token-level sharing also counts the BOS every prompt starts with (and chance equal words)
    assert all(0 <= t - h <= 2 for t, h in zip(prefix.shared_tokens(ids), shared, strict=True))
    assert 0.6 < stats.prefix_sharing < 0.7


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hash_id_prefix_on_random_traces(tmp_path: Path, tok: PromptTokenizer, seed: int) -> None:
    # hash ids as Mooncake's: one id per distinct prefix of blocks (a few branches per level)
    rng = np.random.default_rng(seed)
    block, ids_of, lines = 16, {}, []
    for t in range(40):
        n_blocks = int(rng.integers(1, 5))
        path = tuple(int(rng.integers(0, 2)) for _ in range(n_blocks))
        ids = [ids_of.setdefault(path[: k + 1], len(ids_of)) for k in range(n_blocks)]
        length = (n_blocks - 1) * block + int(rng.integers(1, block + 1))
        row = {"timestamp": t, "input_length": length, "output_length": 1, "hash_ids": ids}
        lines.append(json.dumps(row))
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows = trace.read_rows(path, block_size=block)
    prompts = [r.prompt for r in trace.import_trace(TraceWorkload(path=path, block_size=block),
                                                    tok)]
    shared, cached = hash_id_prefix(rows, block, 16)
    assert sum(cached) > 0
    assert cached == prefix.cached_tokens(prompts, 16)
    diff = [t - h for t, h in zip(prefix.shared_tokens(prompts), shared, strict=True)]
    assert all(0 <= d <= 2 for d in diff)


def test_describe_azure_trace(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.0000000,100,10\n"
        "2023-11-16 18:17:04.0000000,300,30\n"
        "2023-11-16 18:17:05.0000000,200,20\n"
    )
    stats = describe_file(path)
    assert stats.format == "azure" and stats.prompt_lens == [100, 300, 200]
    assert stats.prompt.p50 == 200 and stats.output.mean == 20
    assert stats.prefix_sharing == 0.0 and stats.prefix_hit_rate == 0.0
    assert stats.timestamps_s == [0.0, 1.0, 2.0] and stats.arrival_rate_rps == 1.0


def test_detect_file_format(tmp_path: Path) -> None:
    assert detect_file_format(REPO / "datasets" / "traces" / "azure_sample.csv") == "azure"
    assert detect_file_format(REPO / "datasets" / "traces" / "mooncake_sample.jsonl") == "mooncake"
    assert detect_file_format(REPO / "datasets" / "demo.jsonl") == "jsonl"
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert detect_file_format(empty) == "jsonl"


def test_histogram_png_leaves_pyplot_alone(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    with_times = WorkloadStats("a.jsonl", "jsonl", [5, 9, 12], [1, 2, 3], timestamps_s=[0, 1.5, 3])
    without = WorkloadStats("b.jsonl", "jsonl", [5], [1])
    for stats, name in ((with_times, "a.png"), (without, "b.png")):
        out = save_histogram_png(stats, tmp_path / name)
        assert out.read_bytes().startswith(PNG)
    assert plt.get_fignums() == before


def test_cli_describe(tmp_path: Path) -> None:
    runner = CliRunner()
    png = tmp_path / "hist.png"
    result = runner.invoke(
        main, ["workload", "describe", str(_tiny_jsonl(tmp_path)), "--png", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert "requests       4" in result.output and f"wrote {png}" in result.output
    assert png.read_bytes().startswith(PNG)
    sample = REPO / "datasets" / "traces" / "mooncake_sample.jsonl"
    with runner.isolated_filesystem(temp_dir=tmp_path):
        result = runner.invoke(main, ["workload", "describe", str(sample)])
        assert result.exit_code == 0, result.output
        assert "(mooncake)" in result.output and "arrivals       1.978 req/s" in result.output
        assert Path("mooncake_sample.png").read_bytes().startswith(PNG)
    forced = runner.invoke(
        main,
        [
            "workload",
            "describe",
            str(sample),
            "--format",
            "mooncake",
            "--block-size",
            "1024",
            "--png",
            str(png),
        ],
    )
    assert (
        forced.exit_code == 2 and "3 hash_ids of 1024 tokens need more than 2048" in forced.output
    )


def test_cli_describe_reports_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "output_len": 2}\n{"prompt": "hi"}\n')
    result = CliRunner().invoke(main, ["workload", "describe", str(bad)])
    assert result.exit_code == 2
    assert f"Error: {bad}:2: missing field 'output_len'" in result.output

"""``vllm_course.workload.trace``: Azure CSV and Mooncake JSONL traces into requests (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from vllm_course.config import LoadSpec, RunConfig, TraceWorkload
from vllm_course.workload import PromptTokenizer, Request, WorkloadError, trace
from vllm_course.workload.trace import TraceRow, import_trace, parse_timestamp, read_rows, select

REPO = Path(__file__).resolve().parents[3]
BLOCK = 16  # small blocks keep the Mooncake samples short


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer("tiny-mistral")


def _file(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


AZURE_2023 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens",
    "2023-11-16 18:17:03.9799600,48,10",
    "2023-11-16 18:17:04.4799600,30,5",
    "2023-11-16 18:17:06.0000000,100,7",
    "2023-11-16 18:17:06.2500000,12,3",
)


def _mooncake(tmp_path: Path, *rows: dict, name: str = "trace.jsonl") -> Path:
    return _file(tmp_path, name, *(json.dumps(r) for r in rows))


MOONCAKE = (
    {"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]},
    {"timestamp": 250, "input_length": 35, "output_length": 6, "hash_ids": [1, 2, 4]},
    {"timestamp": 900, "input_length": 20, "output_length": 7, "hash_ids": [7, 8]},
    {"timestamp": 1500, "input_length": 60, "output_length": 8, "hash_ids": [1, 2]},
)


# -- timestamps ---------------------------------------------------------------------------------


def test_parse_timestamp_public_formats() -> None:
    a, off_a = parse_timestamp("2023-11-16 18:17:03.9799600")
    b, _ = parse_timestamp("2023-11-16 18:17:04.0000000")
    assert not off_a
    assert b - a == pytest.approx(0.02004, abs=1e-6)
    c, off_c = parse_timestamp("2024-05-10 00:00:00.009930+00:00")
    d, _ = parse_timestamp("2024-05-10 00:00:01+00:00")  # no fraction in some 2024 rows
    assert off_c and d - c == pytest.approx(0.99007, abs=1e-6)
    # an offset shifts the instant
    e, _ = parse_timestamp("2024-05-10 02:00:00+02:00")
    assert e == pytest.approx(c - 0.00993, abs=1e-6)
    assert parse_timestamp("12.5") == (12.5, False)
    for bad in ("yesterday", "2023-13-45 00:00:00", "nan", ""):
        with pytest.raises(ValueError):
            parse_timestamp(bad)


# -- Azure ----------------------------------------------------------------------------------------


def test_azure_import(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _file(tmp_path, "azure.csv", *AZURE_2023)
    reqs = import_trace(path, tok)
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(48, 10), (30, 5), (100, 7), (12, 3)]
    assert [r.timestamp_s for r in reqs] == [0.0, 0.5, 2.02004, 2.27004]
    for r in reqs:
        assert isinstance(r.prompt, str)
        assert tok.prompt_len(r.prompt, "completions") == r.prompt_len
    # same file, same requests; the chat endpoint counts its template
    assert import_trace(path, tok) == reqs
    chat = import_trace(path, tok, endpoint="chat")
    assert all(tok.prompt_len(r.prompt, "chat") == r.prompt_len for r in chat)


def test_azure_2024_layout_and_extra_columns(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "mm.csv",
        "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens",
        "2024-05-10 00:00:00.009930+00:00,2,100,20",
        "2024-05-10 00:00:01+00:00,0,50,10",
    )
    rows = read_rows(path)
    assert [(r.line, r.input_len, r.output_len) for r in rows] == [(2, 100, 20), (3, 50, 10)]
    assert rows[1].time_s - rows[0].time_s == pytest.approx(0.99007, abs=1e-6)


def test_azure_rows_are_sorted_stably(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "unsorted.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:17:05.0,10,1",
        "2023-11-16 18:17:03.0,20,2",
        "2023-11-16 18:17:05.0,30,3",
    )
    assert [r.line for r in read_rows(path)] == [3, 2, 4]


@pytest.mark.parametrize(
    ("lines", "line", "match"),
    [
        (
            ("TIMESTAMP,Context,GeneratedTokens", "x,1,1"),
            1,
            r"missing column\(s\) \['ContextTokens'\]",
        ),
        ((AZURE_2023[0], "2023-11-16 18:17:03.0,5"), 2, r"2 field\(s\), the header has 3"),
        ((AZURE_2023[0], "soon,5,5"), 2, r"'TIMESTAMP': unreadable timestamp 'soon'"),
        ((AZURE_2023[0], "2023-11-16 18:17:03.0,-5,5"), 2, r"'ContextTokens' is negative \(-5\)"),
        ((AZURE_2023[0], "2023-11-16 18:17:03.0,5,-1"), 2, r"'GeneratedTokens' is negative"),
        ((AZURE_2023[0], "2023-11-16 18:17:03.0,5.5,1"), 2, r"'ContextTokens' must be an integer"),
        ((AZURE_2023[0], "2023-11-16 18:17:03.0,5,0"), 2, r"'GeneratedTokens' is 0"),
        (
            (AZURE_2023[0], "2024-05-10 00:00:00+00:00,5,5", "", "2024-05-10 00:00:01,5,5"),
            4,
            r"mixes times with and without a UTC offset",
        ),
        # the csv module's own limit (131,072 characters a field) was a traceback
        ((AZURE_2023[0], '2023-11-16 18:17:03.0,"' + "9" * 140_000 + '",5'), 2,
         r"not readable as CSV \(field larger than field limit"),
    ],
)
def test_azure_errors_name_file_and_line(
    tmp_path: Path, lines: tuple[str, ...], line: int, match: str
) -> None:
    path = _file(tmp_path, "bad.csv", *lines)
    with pytest.raises(WorkloadError, match=match) as info:
        read_rows(path)
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_azure_empty_files(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="empty file"):
        read_rows(_file(tmp_path, "empty.csv", ""))
    with pytest.raises(WorkloadError, match="no requests in file"):
        read_rows(_file(tmp_path, "header.csv", AZURE_2023[0]))


def test_drop_empty_skips_zero_lengths(tmp_path: Path) -> None:
    path = _file(
        tmp_path, "z.csv", AZURE_2023[0], "2023-11-16 18:17:03.0,5,0", "2023-11-16 18:17:04.0,6,2"
    )
    assert [r.line for r in read_rows(path, drop_empty=True)] == [3]


def test_azure_prompt_too_short_names_the_line(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _file(tmp_path, "short.csv", AZURE_2023[0], "2023-11-16 18:17:03.0,1,2")
    with pytest.raises(WorkloadError, match=rf"^{path}:2: a completions prompt needs at least 2"):
        import_trace(path, tok)


# -- Mooncake -------------------------------------------------------------------------------------


def test_mooncake_import(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _mooncake(tmp_path, *MOONCAKE)
    reqs = import_trace(TraceWorkload(path=path, block_size=BLOCK), tok)
    assert [(r.prompt_len, r.output_len, r.timestamp_s) for r in reqs] == [
        (40, 5, 0.0),
        (35, 6, 0.25),
        (20, 7, 0.9),
        (60, 8, 1.5),
    ]
    words = set(trace.word_token_ids(tok).tolist())
    for r in reqs:
        assert isinstance(r.prompt, tuple) and len(r.prompt) == r.prompt_len
        assert r.prompt[0] == 1  # Mistral's BOS, which vLLM does not add to token ids
        assert set(r.prompt[1:]) <= words  # whole words: the prompt decodes to readable text
    assert tok.decode(reqs[0].prompt[1:6]).count(" ") == 4
    assert import_trace(TraceWorkload(path=path, block_size=BLOCK), tok) == reqs
    other_seed = import_trace(TraceWorkload(path=path, block_size=BLOCK, seed=1), tok)
    assert [r.prompt for r in other_seed] != [r.prompt for r in reqs]


def test_shared_hash_ids_give_token_identical_prefixes(
    tmp_path: Path, tok: PromptTokenizer
) -> None:
    a, b, c, d = import_trace(TraceWorkload(path=_mooncake(tmp_path, *MOONCAKE), block_size=BLOCK), tok)
    # a [1,2,3] and b [1,2,4]: the first two blocks are identical, the third is not
    assert a.prompt[: 2 * BLOCK] == b.prompt[: 2 * BLOCK]
    assert a.prompt[2 * BLOCK : 35] != b.prompt[2 * BLOCK : 35]
    # c [7,8] shares nothing but BOS with a
    assert c.prompt[0] == a.prompt[0]
    assert sum(x == y for x, y in zip(c.prompt[1:BLOCK], a.prompt[1:BLOCK], strict=True)) < 3
    # d [1,2] + 28 tokens past its blocks: the blocks equal a's, the rest is its own
    assert d.prompt[: 2 * BLOCK] == a.prompt[: 2 * BLOCK]
    assert d.prompt[2 * BLOCK : 40] != a.prompt[2 * BLOCK : 40]


def test_same_hash_id_same_tokens_across_lengths(tmp_path: Path, tok: PromptTokenizer) -> None:
    # a partial last block is the start of the same block in a longer request
    path = _mooncake(
        tmp_path,
        {"timestamp": 0, "input_length": 20, "output_length": 1, "hash_ids": [5, 6]},
        {"timestamp": 1, "input_length": 32, "output_length": 1, "hash_ids": [5, 6]},
    )
    short, full = import_trace(TraceWorkload(path=path, block_size=BLOCK), tok)
    assert full.prompt[:20] == short.prompt
    # the real traces' 512-token blocks by default
    one = _mooncake(
        tmp_path,
        {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [0, 1]},
        {"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [0, 9]},
        name="big.jsonl",
    )
    x, y = import_trace(one, tok)
    assert x.prompt[:512] == y.prompt[:512] and x.prompt[512:600] != y.prompt[512:600]


def test_mooncake_prompts_need_completions(tmp_path: Path, tok: PromptTokenizer) -> None:
    with pytest.raises(WorkloadError, match="only the completions endpoint accepts"):
        import_trace(TraceWorkload(path=_mooncake(tmp_path, *MOONCAKE), block_size=BLOCK), tok,
                     endpoint="chat")


GOOD = json.dumps(MOONCAKE[0])


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"timestamp": 0, "input_length": 4', r"not valid JSON"),
        ("[1, 2]", r"expected a JSON object"),
        ('{"timestamp": 0, "output_length": 4}', r"missing field\(s\) \['input_length'\]"),
        ('{"input_length": 4, "output_length": 4}', r"missing field\(s\) \['timestamp'\]"),
        (
            '{"timestamp": 0, "input_length": -4, "output_length": 4}',
            r"'input_length' is negative \(-4\)",
        ),
        (
            '{"timestamp": 0, "input_length": 4, "output_length": -1}',
            r"'output_length' is negative",
        ),
        ('{"timestamp": -3, "input_length": 4, "output_length": 4}', r"'timestamp' is negative"),
        (
            '{"timestamp": "0", "input_length": 4, "output_length": 4}',
            r"'timestamp' must be a number",
        ),
        (
            '{"timestamp": 0, "input_length": 4.5, "output_length": 4}',
            r"'input_length' must be an int",
        ),
        ('{"timestamp": 0, "input_length": 4, "output_length": 0}', r"'output_length' is 0"),
        (
            '{"timestamp": 0, "input_length": 4, "output_length": 4, "hash_ids": [1, -2]}',
            r"'hash_ids' must be a list of integers >= 0",
        ),
        (
            '{"timestamp": 0, "input_length": 16, "output_length": 4, "hash_ids": [1, 2]}',
            r"2 hash_ids of 16 tokens need more than 16 tokens, but input_length is 16",
        ),
    ],
)
def test_mooncake_errors_name_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    path = _file(tmp_path, "bad.jsonl", GOOD, "", line, GOOD)
    with pytest.raises(WorkloadError, match=match) as info:
        read_rows(path, "mooncake", block_size=BLOCK)
    assert str(info.value).startswith(f"{path}:3: ")


def test_mooncake_without_hash_ids_and_extra_keys(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _file(
        tmp_path, "plain.jsonl", '{"timestamp": 3, "input_length": 9, "output_length": 2, "x": 1}'
    )
    (req,) = import_trace(path, tok)
    assert req == Request(req.prompt, 2, 9, timestamp_s=0.0) and len(req.prompt) == 9


def test_empty_mooncake_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no requests in file"):
        read_rows(_file(tmp_path, "e.jsonl", "", " "))


# -- time scale, window, limit --------------------------------------------------------------------


def test_time_scale(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _mooncake(tmp_path, *MOONCAKE)
    fast = import_trace(TraceWorkload(path=path, block_size=BLOCK, time_scale=2.0), tok)
    slow = import_trace(TraceWorkload(path=path, block_size=BLOCK, time_scale=0.5), tok)
    assert [r.timestamp_s for r in fast] == [0.0, 0.125, 0.45, 0.75]
    assert [r.timestamp_s for r in slow] == [0.0, 0.5, 1.8, 3.0]
    with pytest.raises(ValueError, match="time_scale"):
        import_trace(TraceWorkload(path=path, block_size=BLOCK, time_scale=0), tok)


def test_window_and_limit(tmp_path: Path, tok: PromptTokenizer) -> None:
    # the window is in trace seconds from the first request; the first kept request is sent at 0
    path = _file(tmp_path, "azure.csv", *AZURE_2023)  # t = 0, 0.5, 2.02004, 2.27004
    reqs = import_trace(TraceWorkload(path=path, window_s=(0.5, 2.1)), tok)
    assert [(r.prompt_len, r.timestamp_s) for r in reqs] == [(30, 0.0), (100, 1.52004)]
    assert [r.prompt_len for r in import_trace(TraceWorkload(path=path, window_s=(0.5, 10), limit=2),
                                               tok)] == [30, 100]
    assert [r.prompt_len for r in import_trace(TraceWorkload(path=path, limit=1), tok)] == [48]
    scaled = import_trace(TraceWorkload(path=path, window_s=(2.0, 3.0), time_scale=2.0), tok)
    assert [r.timestamp_s for r in scaled] == [0.0, 0.125]
    with pytest.raises(WorkloadError, match=r"no requests in the window 3-4 s .*spans 2\.270 s"):
        import_trace(TraceWorkload(path=path, window_s=(3, 4)), tok)


def test_select_rejects_bad_arguments() -> None:
    rows = [TraceRow(1, 10.0, 5, 5)]
    with pytest.raises(ValueError, match="window_s"):
        select(rows, window_s=(2, 1))
    with pytest.raises(ValueError, match="limit"):
        select(rows, limit=0)


# -- committed samples and config ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["azure_sample.csv", "mooncake_sample.jsonl"])
def test_committed_samples_import(name: str, tok: PromptTokenizer) -> None:
    path = REPO / "datasets" / "traces" / name
    reqs = import_trace(TraceWorkload(path=path, limit=6), tok)
    assert len(reqs) == 6 and reqs[0].timestamp_s == 0.0
    assert all(r.prompt_len + r.output_len <= 4096 for r in import_trace(path, tok))
    if name.endswith(".jsonl"):
        for row in read_rows(path):
            assert len(row.hash_ids) == -(-row.input_len // 512)  # ceil, as in the public files


def test_trace_workload_config(tmp_path: Path, tok: PromptTokenizer) -> None:
    path = _mooncake(tmp_path, *MOONCAKE)
    spec = TraceWorkload(path=path, block_size=BLOCK, time_scale=2.0, window_s=(0.2, 2), limit=2)
    assert spec.trace_format == "mooncake"
    assert TraceWorkload(path=tmp_path / "x.CSV").trace_format == "azure"
    reqs = trace.import_trace(spec, "tiny-mistral")
    assert [(r.prompt_len, r.timestamp_s) for r in reqs] == [(35, 0.0), (20, 0.325)]
    with pytest.raises(ValidationError, match="window_s"):
        TraceWorkload(path=path, window_s=(5, 1))
    with pytest.raises(ValidationError):
        TraceWorkload(path=path, time_scale=0)


def test_run_config_trace_kind_and_arrivals(tmp_path: Path) -> None:
    cfg = RunConfig.model_validate(
        {"workload": {"path": "t.csv", "window_s": [0, 60]}, "load": {"max_concurrency": 4}}
    )
    assert isinstance(cfg.workload, TraceWorkload) and cfg.workload.window_s == (0.0, 60.0)
    assert cfg.arrivals == "trace"
    jsonl = RunConfig.model_validate({"workload": {"path": "t.jsonl", "format": "mooncake"}})
    assert isinstance(jsonl.workload, TraceWorkload)
    plain = RunConfig.model_validate({"workload": {"path": "t.jsonl"}})
    assert plain.workload.kind == "file" and plain.arrivals == "process"
    replay = RunConfig.model_validate(
        {"workload": {"path": "t.jsonl"}, "load": {"arrivals": "trace"}}
    )
    assert replay.arrivals == "trace"
    # a trace's lengths with a Poisson process instead of its timestamps
    poisson = RunConfig.model_validate(
        {
            "workload": {"kind": "trace", "path": "t.csv"},
            "load": {"arrivals": "process", "rate_rps": 4},
        }
    )
    assert poisson.arrivals == "process"
    with pytest.raises(ValidationError, match="load.rate_rps does not apply"):
        RunConfig.model_validate({"workload": {"path": "t.csv"}, "load": {"rate_rps": 4}})
    with pytest.raises(ValidationError, match="load.burstiness does not apply"):
        LoadSpec(arrivals="trace", burstiness=0.5)
    with pytest.raises(ValidationError):
        LoadSpec(arrivals="poisson")


def test_trace_run_config_survives_summary_json(tmp_path: Path) -> None:
    # summary.json writes rate_rps=inf as null; a saved trace run must load back unchanged
    from vllm_course.results import RunResult

    config = RunConfig(workload=TraceWorkload(path=tmp_path / "t.csv", window_s=(1, 5)))
    RunResult(name="t", created_at="now", config=config, summary=None).save(tmp_path)
    back = RunResult.load(tmp_path).config
    assert back == config and back.arrivals == "trace"
    assert LoadSpec(rate_rps=None).rate_rps == float("inf")
    assert LoadSpec(arrivals="trace", rate_rps=float("inf"), burstiness=1.0).arrivals == "trace"

"""Checks before anything is sent: JSONL lines, replay offsets, ``max_model_len`` (no server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_course import experiment, workload
from vllm_course.config import FileWorkload, LoadSpec, RunConfig, ServerConfig, TraceWorkload
from vllm_course.experiment import (
    check_max_model_len,
    max_model_len_from_args,
    run_experiment,
    send_offsets,
)
from vllm_course.server import StartupFacts
from vllm_course.workload import (
    PromptTokenizer,
    Request,
    WorkloadError,
    load_requests,
    read_jsonl,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer("tiny-mistral")


def _write(tmp_path: Path, *lines: str, name: str = "reqs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = '{"prompt": "hi", "output_len": 4}'


# -- JSONL lines: the cases test_workload.py does not cover ---------------------------------


HI = {"prompt": "hi", "output_len": 4}
USER, BOT = {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({**HI, "prompt_len": -5}, r"'prompt_len' must be an integer >= 1, got -5"),
        ({**HI, "timestamp_s": -0.5}, r"'timestamp_s' must be a finite number >= 0, got -0.5"),
        ({**HI, "timestamp_s": "1"}, r"'timestamp_s' must be a finite number"),
        ({**HI, "timestamp_s": True}, r"'timestamp_s' must be a finite number"),
        ({**HI, "priority": 1.5}, r"'priority' must be an integer"),
        ({"messages": [], "output_len": 4}, r"'messages' must be a non-empty list"),
        ({"messages": [{"role": "user"}], "output_len": 4}, r"messages\[0\] must be"),
        ({"messages": [{**USER, "role": "bot"}], "output_len": 4}, r"messages\[0\] must be"),
        ({"messages": [USER, BOT], "output_len": 4}, r"the last message must be the user's"),
        ({"prompt_token_ids": "1 2", "output_len": 4}, r"'prompt_token_ids' must be non-empty"),
        ({"prompt": "hi", "output_len": None}, r"'output_len' must be an integer >= 1, got None"),
    ],
)
def test_jsonl_errors_name_path_and_line(tmp_path: Path, fields: dict, match: str) -> None:
    path = _write(tmp_path, GOOD, "", "", json.dumps(fields), GOOD)
    with pytest.raises(WorkloadError, match=match) as info:
        read_jsonl(path)
    assert str(info.value).startswith(f"{path}:4: ")


def test_jsonl_timestamps_priority_and_messages_are_read(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"prompt": "a", "output_len": 2, "timestamp_s": 1.5, "priority": -1}',
        '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], '
        '"output_len": 3, "timestamp_s": 2}',
    )
    a, b = read_jsonl(path)
    assert a == Request("a", 2, priority=-1, timestamp_s=1.5)
    assert b == Request((("system", "s"), ("user", "u")), 3, timestamp_s=2.0)


# -- replay offsets -------------------------------------------------------------------------


def test_send_offsets_process_and_trace() -> None:
    reqs = [Request("a", 1, timestamp_s=t) for t in (5.0, 5.25, 7.0)]
    assert send_offsets(reqs, "process") is None
    assert send_offsets(reqs, "trace") == [0.0, 0.25, 2.0]
    assert send_offsets([], "trace") == []
    with pytest.raises(ValueError, match="arrivals"):
        send_offsets(reqs, "poisson")


def test_send_offsets_need_timestamps_in_order() -> None:
    missing = [Request("a", 1, timestamp_s=0.0), Request("b", 1), Request("c", 1)]
    with pytest.raises(
        WorkloadError, match=r"^f\.jsonl: 2 request\(s\) have no timestamp_s \(first: request 2\)"
    ):
        send_offsets(missing, "trace", "f.jsonl")
    unordered = [Request("a", 1, timestamp_s=t) for t in (0.0, 2.0, 1.0)]
    with pytest.raises(WorkloadError, match=r"request 3 has timestamp_s 1, earlier than request 2"):
        send_offsets(unordered, "trace")


def test_jsonl_with_timestamps_replays(tmp_path: Path) -> None:
    lines = [json.dumps({"prompt": "x", "output_len": 1, "timestamp_s": t}) for t in (1, 1.5, 4)]
    config = RunConfig(
        workload=FileWorkload(path=_write(tmp_path, *lines)), load=LoadSpec(arrivals="trace")
    )
    reqs = load_requests(config.workload, "tiny-mistral", "completions")
    assert send_offsets(reqs, config.arrivals) == [0.0, 0.5, 3.0]


# -- max_model_len ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"max-model-len": 4096}, 4096),
        ({"max-model-len": "2048"}, 2048),
        ({"max-model-len": "8k"}, 8000),
        ({"max-model-len": "4K"}, 4096),
        ({"max-model-len": "1.5k"}, 1500),
        ({"max-model-len": -1}, None),
        ({"max-model-len": "auto"}, None),
        ({"max-model-len": None}, None),
        ({"max-model-len": True}, None),
        ({"max-num-seqs": 8}, None),
        ({}, None),
    ],
)
def test_max_model_len_from_args(args: dict, expected: int | None) -> None:
    assert max_model_len_from_args(args) == expected


def test_check_max_model_len_counts_and_names_requests() -> None:
    reqs = [Request((1, 2, 3), 5, 100)] * 2 + [Request((1,), 1, 60)] * 7 + [Request("x", 40, 60)]
    check_max_model_len(reqs, 105)  # exactly prompt + output fits
    with pytest.raises(WorkloadError) as info:
        check_max_model_len(reqs, 100, source="w.jsonl")
    msg = str(info.value)
    assert msg.startswith("w.jsonl: 2 of 10 request(s) need more than the server's max_model_len ")
    assert "of 100 tokens (prompt + output): requests 1 (105 tokens), 2 (105 tokens); " in msg
    assert "nothing was sent" in msg
    with pytest.raises(
        WorkloadError,
        match=r"^workload: 10 of 10 .* requests 1 \(105 tokens\), "
        r"2 \(105 tokens\), 3 \(61 tokens\), 4 \(61 tokens\), 5 \(61 tokens\), \.\.\.",
    ):
        check_max_model_len(reqs, 50)


def test_check_max_model_len_counts_unlabelled_prompts(tok: PromptTokenizer) -> None:
    text = "hello there"  # 4 tokens on completions (BOS + 3), 6 on chat
    reqs = [Request(text, 10), Request((1, 5, 6, 7, 8), 10)]
    check_max_model_len(reqs, 15, tokenizer=tok)
    with pytest.raises(WorkloadError, match=r"1 of 2 .* requests 2 \(15 tokens\)"):
        check_max_model_len(reqs, 14, tokenizer=tok)
    with pytest.raises(WorkloadError, match=r"requests 1 \(16 tokens\)"):
        check_max_model_len(reqs[:1], 15, endpoint="chat", tokenizer="tiny-mistral")
    with pytest.raises(ValueError, match="a tokenizer is needed"):
        check_max_model_len(reqs, 14)
    check_max_model_len(reqs[1:], 15)  # token ids need no tokenizer


class _Pool:
    """A pool that hands out a stand-in server (only its startup facts) and records calls."""

    def __init__(self, max_model_len: int | None, profile_args: dict | None = None):
        self.server = SimpleNamespace(facts=StartupFacts(max_model_len=max_model_len))
        self.profile_args = profile_args or {}
        self.acquired = 0
        self.released = 0

    def acquire(self, config, log_path=None):
        self.acquired += 1
        return self.server

    def release(self, server) -> None:
        self.released += 1


def _trace_config(tmp_path: Path, **server_args) -> RunConfig:
    return RunConfig(
        name="t",
        server=ServerConfig(args=server_args),
        workload=TraceWorkload(path=REPO / "datasets" / "traces" / "mooncake_sample.jsonl"),
    )


def test_too_long_requests_fail_before_the_server_starts(tmp_path: Path) -> None:
    # --max-model-len in the config (or the profile) is checked before any server is acquired
    pool = _Pool(max_model_len=None)
    config = _trace_config(tmp_path, max_model_len=2048)
    with pytest.raises(
        WorkloadError,
        match=r"mooncake_sample\.jsonl: \d+ of 24 request\(s\) need "
        r"more than the server's max_model_len of 2048",
    ):
        asyncio.run(run_experiment(config, tmp_path, pool=pool))
    assert pool.acquired == 0 and not list(tmp_path.iterdir())
    profile_pool = _Pool(max_model_len=None, profile_args={"max-model-len": 1024})
    with pytest.raises(WorkloadError, match="max_model_len of 1024"):
        asyncio.run(run_experiment(_trace_config(tmp_path), tmp_path, pool=profile_pool))
    assert profile_pool.acquired == 0


def test_too_long_requests_fail_after_start_before_sending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # without the flag, the limit comes from the server's startup log; nothing is measured
    async def no_measure(*args, **kwargs):
        raise AssertionError("requests were sent")

    monkeypatch.setattr(experiment, "_measure", no_measure)
    pool = _Pool(max_model_len=2000)
    with pytest.raises(WorkloadError, match="max_model_len of 2000"):
        asyncio.run(run_experiment(_trace_config(tmp_path), tmp_path, pool=pool))
    assert pool.acquired == 1 and pool.released == 1


def test_trace_replay_passes_the_timestamps_as_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {}

    async def fake_measure(config, server, requests, warmups, run_dir, hooks):
        seen.update(requests=requests, offsets=hooks.offsets, on_chunk=hooks.on_chunk)
        return "result"

    monkeypatch.setattr(experiment, "_measure", fake_measure)
    pool = _Pool(max_model_len=4096)
    config = _trace_config(tmp_path).model_copy(
        update={
            "workload": TraceWorkload(
                path=REPO / "datasets" / "traces" / "mooncake_sample.jsonl", time_scale=2.0, limit=5
            )
        }
    )
    assert asyncio.run(run_experiment(config, tmp_path, pool=pool)) == "result"
    assert seen["offsets"] == [r.timestamp_s for r in seen["requests"]]
    assert seen["offsets"] == [0.0, 0.1435, 0.406, 0.6465, 0.733]
    assert seen["on_chunk"] is None
    # the same trace with a rate process sends at the process's times instead
    poisson = config.model_copy(update={"load": LoadSpec(arrivals="process", rate_rps=5)})
    hook = [].append
    asyncio.run(run_experiment(poisson, tmp_path, pool=pool, on_chunk=hook))
    assert seen["offsets"] is None
    assert seen["on_chunk"] is hook   # the chunk hook reaches the measurement untouched


def test_requests_handed_in_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CLI reads the workload before starting a server and passes the requests on
    seen = {}

    async def fake_measure(config, server, requests, *args):
        seen["requests"] = requests
        return "result"

    def no_read(*args, **kwargs):
        raise AssertionError("the workload was read again")

    config = _trace_config(tmp_path)
    requests = load_requests(config.workload, "tiny-mistral", "completions")[:3]
    monkeypatch.setattr(experiment, "_measure", fake_measure)
    monkeypatch.setattr(workload, "load_requests", no_read)
    assert asyncio.run(run_experiment(config, tmp_path, pool=_Pool(4096),
                                      requests=requests)) == "result"
    assert seen["requests"] == requests
    with pytest.raises(AssertionError, match="read again"):
        asyncio.run(run_experiment(config, tmp_path, pool=_Pool(4096)))

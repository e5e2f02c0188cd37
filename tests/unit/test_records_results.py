"""``RequestRecord`` (de)serialisation and ``RunResult`` save/load/report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_course import metrics
from vllm_course.config import SLO, LoadSpec, RunConfig
from vllm_course.loadgen.selfcheck import client_checks
from vllm_course.prom import ServerMetrics
from vllm_course.records import RequestRecord
from vllm_course.results import SCHEMA_VERSION, Checks, RunResult, read_records


def _record(index: int, ttft: float, gap: float, n: int = 3, **kw) -> RequestRecord:
    sent = 0.01 * index
    chunks = [sent + ttft + gap * k for k in range(n)]
    return RequestRecord(
        index=index,
        prompt_len=16,
        max_tokens=n,
        scheduled_s=0.0,
        sent_s=sent,
        chunk_s=chunks,
        chunk_tokens=[1] * n,
        last_choice_s=chunks[-1],
        end_s=chunks[-1] + 0.001,
        prompt_tokens=16,
        output_tokens=n,
        finish_reason="length",
        **kw,
    )


RECORDS = [
    _record(0, ttft=0.100, gap=0.020),
    _record(1, ttft=0.200, gap=0.030),
    RequestRecord(
        index=2, prompt_len=16, max_tokens=3, sent_s=0.02, end_s=0.05, error="HTTP 400: bad"
    ),
]


def test_record_round_trip_through_json() -> None:
    r = RequestRecord(
        index=3,
        prompt_len=10,
        max_tokens=4,
        scheduled_s=0.5,
        dispatched_s=0.505,
        sent_s=0.51,
        role_chunk_s=0.6,
        chunk_s=[0.7, 0.8],
        chunk_tokens=[1, 3],
        last_choice_s=0.81,
        end_s=0.82,
        prompt_tokens=10,
        output_tokens=4,
        token_count_source="chunks",
        finish_reason="length",
        error=None,
        warmup=True,
    )
    d = r.to_dict()
    assert d == {
        "index": 3,
        "prompt_len": 10,
        "max_tokens": 4,
        "scheduled_s": 0.5,
        "dispatched_s": 0.505,
        "sent_s": 0.51,
        "role_chunk_s": 0.6,
        "chunk_s": [0.7, 0.8],
        "chunk_tokens": [1, 3],
        "last_choice_s": 0.81,
        "end_s": 0.82,
        "prompt_tokens": 10,
        "output_tokens": 4,
        "token_count_source": "chunks",
        "finish_reason": "length",
        "error": None,
        "warmup": True,
    }
    back = RequestRecord.from_dict(json.loads(json.dumps(d)))
    assert back == r
    # the dict is a copy: mutating it does not touch the record
    d["chunk_s"].append(9.0)
    assert r.chunk_s == [0.7, 0.8]


def test_default_record_round_trip_and_success() -> None:
    r = RequestRecord(index=0)
    assert RequestRecord.from_dict(r.to_dict()) == r
    assert not r.success  # no chunks
    assert RECORDS[0].success
    assert not RECORDS[2].success  # error
    assert not RequestRecord(index=0, chunk_s=[1.0], error="x").success


def test_record_from_dict_rejects_unknown_keys() -> None:
    with pytest.raises(TypeError):
        RequestRecord.from_dict({"index": 0, "ttft": 1.0})


def _result(tmp_path: Path | None = None, **kw) -> RunResult:
    summary = metrics.summarize(RECORDS, slo=SLO(ttft_ms=150))
    cfg = RunConfig(name="unit", load=LoadSpec(rate_rps=2.0, max_concurrency=4))
    return RunResult(
        name="unit",
        created_at="2026-01-02T03:04:05+00:00",
        config=cfg,
        summary=summary,
        checks=Checks(client_output_tokens=6, server_generation_tokens=6.0),
        startup={"kv_cache_tokens": 131072, "vllm_version": "0.32.0"},
        env={"python": "3.11"},
        vllm_bench_keys=summary.to_vllm_keys(),
        **kw,
    )


def test_summary_of_the_scripted_records() -> None:
    s = metrics.summarize(RECORDS, slo=SLO(ttft_ms=150))
    assert (s.num_requests, s.completed, s.failed) == (3, 2, 1)
    assert s.errors == {"HTTP 400: bad": 1}
    assert s.ttft_ms.n == 2
    assert s.ttft_ms.p50 == pytest.approx(150.0)
    assert s.ttft_ms.p99 == pytest.approx(199.0)
    assert s.good_requests == 1


def test_run_result_save_load_round_trip(tmp_path: Path) -> None:
    run = _result()
    path = run.save(tmp_path)
    assert path == tmp_path / "summary.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["path"] is None
    loaded = RunResult.load(tmp_path)
    assert loaded.path == str(tmp_path)
    assert loaded.model_copy(update={"path": None}) == run
    assert loaded.summary == run.summary
    assert loaded.config == run.config
    assert loaded.summary.ttft_ms.p99 == run.summary.ttft_ms.p99
    # saving the loaded result again gives the same file apart from the path
    other = tmp_path / "again"
    other.mkdir()
    loaded.save(other)
    again = json.loads((other / "summary.json").read_text())
    assert again == {**data, "path": str(tmp_path)}


def test_load_missing_summary(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RunResult.load(tmp_path)


def test_records_beside_a_loaded_result(tmp_path: Path) -> None:
    _result().save(tmp_path)
    (tmp_path / "requests.jsonl").write_text(
        "".join(json.dumps(r.to_dict()) + "\n" for r in RECORDS) + "\n"
    )
    loaded = RunResult.load(tmp_path)
    assert loaded.records() == RECORDS
    assert read_records(tmp_path / "requests.jsonl") == RECORDS
    with pytest.raises(ValueError, match="not loaded from or saved to a folder"):
        _result().records()


def test_report_contains_the_numbers(tmp_path: Path) -> None:
    run = _result()
    run.save(tmp_path)
    report = RunResult.load(tmp_path).report()
    p99 = run.summary.ttft_ms.p99
    assert f"P99 {p99:.1f}" in report
    assert "P99 199.0" in report
    lines = report.splitlines()
    assert lines[0] == f"Run unit  ({tmp_path})"
    ttft_line = next(ln for ln in lines if ln.strip().startswith("TTFT ms"))
    assert "mean 150.0  P50 150.0  P90 190.0  P99 199.0  (n=2)" in ttft_line
    assert any("2 completed, 1 failed" in ln for ln in lines)
    assert any("goodput" in ln and "(1 of 3 requests met the SLO)" in ln for ln in lines)
    assert any("131,072 tokens (vLLM 0.32.0)" in ln for ln in lines)
    assert not any(ln.strip().startswith("warning") for ln in lines)
    assert "<b>Run unit</b>" in run._repr_html_()


def test_report_with_server_metrics_and_warnings() -> None:
    run = _result(
        server_metrics=ServerMetrics(
            prompt_tokens=32.0,
            generation_tokens=6.0,
            preemptions=2.0,
            kv_cache_usage_peak=0.125,
            num_requests_running_peak=2.0,
            num_requests_waiting_peak=0.0,
            samples=3,
            interval_s=1.0,
        ),
        stopped_early="the vLLM server died",
    )
    run = run.model_copy(update={"checks": Checks(client_output_tokens=6, warnings=["mismatch!"])})
    report = run.report()
    assert "peak running 2, waiting 0, KV cache 12.5%, preemptions 2" in report
    assert "warning" in report and "mismatch!" in report
    assert "stopped early" in report and "the vLLM server died" in report


def test_report_shows_the_client_checks_and_their_notes() -> None:
    stalled = client_checks([], [1.0] * 95 + [200.0] * 5, 0.25)   # P90 1 ms, P99 200 ms
    rows = _result(client=stalled).rows()
    assert ("client", "loop lag P90 1.0 ms, send lag P50 n/a ms, CPU 0.25 cores, n/a µs/token, "
                      "bunched n/a") in rows
    assert ("note", "sporadic stalls: event-loop lag P99 200 ms, max 200 ms (the OS paused this "
                    "process now and then; requests in flight then were timed late)") in rows
    healthy = _result(client=client_checks([], [1.0] * 10, 0.25)).rows()
    assert not any(k == "note" for k, _ in healthy)


def test_report_without_summary() -> None:
    cfg = RunConfig(name="empty")
    run = RunResult(
        name="empty", created_at="t", config=cfg, summary=None, stopped_early="the vLLM server died"
    )
    assert run.report() == "Run empty\n  status  the vLLM server died"
    run = RunResult(name="empty", created_at="t", config=cfg, summary=None)
    assert run.rows() == [("status", "no summary")]


def test_report_with_partial_server_metrics() -> None:
    run = _result(server_metrics=ServerMetrics(generation_tokens=6.0, samples=0))
    report = run.report()
    assert "server" in report


def test_record_saved_before_dispatched_s_existed_loads_with_none() -> None:
    old = RequestRecord(index=1, scheduled_s=0.25, sent_s=0.3).to_dict()
    del old["dispatched_s"]
    r = RequestRecord.from_dict(old)
    assert r.dispatched_s is None
    assert (r.scheduled_s, r.sent_s) == (0.25, 0.3)

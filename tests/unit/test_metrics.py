"""Unit tests of vllm_course.metrics with scripted times and hand-computed expected values."""

from __future__ import annotations

import pytest

from vllm_course.config import SLO
from vllm_course.metrics import (
    DEV_CHUNKS,
    DEV_GOODPUT,
    DEV_PEAK,
    DEV_TTFT,
    Dist,
    e2el_s,
    itl_s,
    percentile,
    summarize,
    tpot_s,
    ttft_s,
)
from vllm_course.records import RequestRecord

approx = pytest.approx


def rec_a() -> RequestRecord:
    """Completions request; the middle chunk carries 3 tokens."""
    return RequestRecord(
        index=0,
        scheduled_s=0.0,
        sent_s=0.0,
        chunk_s=[0.2, 0.5, 1.2],
        chunk_tokens=[1, 3, 1],
        last_choice_s=1.2,
        end_s=1.25,
        prompt_tokens=10,
        output_tokens=5,
        finish_reason="length",
    )


def rec_b() -> RequestRecord:
    """Chat request: empty role chunk at 0.62 s, first token at 0.7 s; waited 100 ms for a slot."""
    return RequestRecord(
        index=1,
        scheduled_s=0.5,
        sent_s=0.6,
        role_chunk_s=0.62,
        chunk_s=[0.7, 0.9, 1.3],
        chunk_tokens=[1, 1, 1],
        last_choice_s=1.3,
        end_s=1.4,
        prompt_tokens=20,
        output_tokens=3,
        finish_reason="length",
    )


def rec_c() -> RequestRecord:
    """A 1-token output."""
    return RequestRecord(
        index=2,
        scheduled_s=1.0,
        sent_s=1.0,
        chunk_s=[1.5],
        chunk_tokens=[1],
        last_choice_s=1.5,
        end_s=1.6,
        prompt_tokens=5,
        output_tokens=1,
        finish_reason="length",
    )


def rec_d() -> RequestRecord:
    """Fails mid-stream after 4 chunks; fast, so it would meet every SLO if it counted."""
    return RequestRecord(
        index=3,
        scheduled_s=1.5,
        sent_s=1.5,
        chunk_s=[1.6, 1.7, 1.8, 1.9],
        chunk_tokens=[1, 1, 1, 1],
        last_choice_s=1.9,
        end_s=2.0,
        prompt_tokens=7,
        output_tokens=4,
        error="connection reset by peer",
    )


def rec_warmup() -> RequestRecord:
    return RequestRecord(
        index=-1,
        scheduled_s=0.0,
        sent_s=0.0,
        chunk_s=[50.0, 99.0],
        chunk_tokens=[40, 40],
        last_choice_s=99.0,
        end_s=100.0,
        prompt_tokens=1000,
        output_tokens=80,
        error="boom",
        warmup=True,
    )


def run() -> list[RequestRecord]:
    return [rec_a(), rec_b(), rec_c(), rec_d()]


# --- per-request metrics ----------------------------------------------------------------------


def test_chat_role_chunk_does_not_end_ttft():
    r = rec_b()
    assert ttft_s(r) == approx(0.1)  # 0.7 - 0.6, not 0.62 - 0.6
    assert e2el_s(r) == approx(0.7)  # 1.3 - 0.6
    assert tpot_s(r) == approx(0.3)  # (0.7 - 0.1) / 2
    assert itl_s(r) == approx([0.2, 0.4])  # role chunk adds no ITL sample


def test_multi_token_chunk_gives_one_itl_sample_per_chunk():
    r = rec_a()
    assert ttft_s(r) == approx(0.2)
    assert e2el_s(r) == approx(1.2)
    assert tpot_s(r) == approx(0.25)  # (1.2 - 0.2) / (5 - 1)
    assert itl_s(r) == approx([0.3, 0.7])
    assert len(itl_s(r)) == 2  # 3 token-carrying chunks - 1


def test_one_token_output_has_no_tpot_or_itl():
    r = rec_c()
    assert ttft_s(r) == approx(0.5)
    assert e2el_s(r) == approx(0.5)
    assert tpot_s(r) is None
    assert itl_s(r) == []


def test_failed_request_has_no_metrics():
    r = rec_d()
    assert not r.success
    assert ttft_s(r) is None
    assert e2el_s(r) is None
    assert tpot_s(r) is None
    assert itl_s(r) == []
    no_chunks = RequestRecord(index=9, sent_s=0.0)
    assert ttft_s(no_chunks) is None and itl_s(no_chunks) == []


# --- Dist / percentile --------------------------------------------------------------------------


def test_percentile_linear_interpolation():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert percentile(values, 99) == approx(9.91)
    assert percentile(values, 50) == approx(5.5)
    d = Dist.of(values)
    assert d.n == 10
    assert d.mean == approx(5.5)
    assert d.std == approx(2.8722813)  # population std: sqrt(8.25)
    assert (d.min, d.max) == (1.0, 10.0)
    assert d.p50 == approx(5.5)
    assert d.p90 == approx(9.1)
    assert d.p95 == approx(9.55)
    assert d.p99 == approx(9.91)


def test_dist_of_empty_and_percentile_of_empty():
    d = Dist.of([])
    assert d.n == 0
    assert d.mean is None and d.p99 is None and d.max is None
    with pytest.raises(ValueError):
        percentile([], 50)


# --- summarize ---------------------------------------------------------------------------------


def test_summary_counts_tokens_and_throughput():
    s = summarize(run())
    assert (s.num_requests, s.completed, s.failed) == (4, 3, 1)
    assert s.duration_s == approx(2.0)  # latest end_s, the failed request's
    assert s.total_input_tokens == 35  # 10 + 20 + 5; the failed request's 7 left out
    assert s.total_output_tokens == 9  # 5 + 3 + 1; the failed request's 4 left out
    assert s.request_throughput_rps == approx(1.5)
    assert s.output_throughput_tok_s == approx(4.5)
    assert s.total_throughput_tok_s == approx(22.0)
    assert s.errors == {"connection reset by peer": 1}
    assert s.token_count_source == "continuous_usage"
    assert s.slo is None and s.good_requests is None and s.goodput_rps is None


def test_summary_throughput_with_explicit_duration():
    s = summarize(run(), slo=SLO(tpot_ms=260), duration_s=4.0)
    assert s.duration_s == 4.0
    assert s.request_throughput_rps == approx(0.75)
    assert s.output_throughput_tok_s == approx(2.25)
    assert s.total_throughput_tok_s == approx(11.0)
    assert s.goodput_rps == approx(0.5)


def test_peak_per_token_and_per_chunk():
    # bucket 0: A 0.2(1) 0.5(3), B 0.7(1) 0.9(1) -> 6 tokens, 4 chunks
    # bucket 1: A 1.2, B 1.3, C 1.5 -> 3 tokens, 3 chunks (failed D's 4 chunks excluded)
    s = summarize(run())
    assert s.peak_output_tok_s == 6.0
    assert s.peak_output_tok_s_per_chunk == 4.0
    assert s.peak_output_tok_s >= s.peak_output_tok_s_per_chunk


def test_latency_distributions():
    s = summarize(run())
    t = s.ttft_ms  # [200, 100, 500]
    assert t.n == 3
    assert t.mean == approx(266.6666667)
    assert t.std == approx(169.9673171)
    assert (t.min, t.p50, t.max) == (approx(100.0), approx(200.0), approx(500.0))
    assert (t.p90, t.p95, t.p99) == (approx(440.0), approx(470.0), approx(494.0))

    p = s.tpot_ms  # [250, 300]; the 1-token request has no TPOT
    assert p.n == 2
    assert p.mean == approx(275.0)
    assert p.std == approx(25.0)
    assert (p.p50, p.p90, p.p95, p.p99) == (
        approx(275.0),
        approx(295.0),
        approx(297.5),
        approx(299.5),
    )

    i = s.itl_ms  # pooled [300, 700, 200, 400]
    assert i.n == 4
    assert i.mean == approx(400.0)
    assert i.std == approx(187.0828693)
    assert (i.min, i.max) == (approx(200.0), approx(700.0))
    assert (i.p50, i.p90, i.p95, i.p99) == (
        approx(350.0),
        approx(610.0),
        approx(655.0),
        approx(691.0),
    )

    e = s.e2el_ms  # [1200, 700, 500]
    assert e.n == 3
    assert e.mean == approx(800.0)
    assert e.std == approx(294.3920289)
    assert (e.p50, e.p90, e.p95, e.p99) == (
        approx(700.0),
        approx(1100.0),
        approx(1150.0),
        approx(1190.0),
    )

    q = s.client_queue_ms  # [0, 100, 0]
    assert q.n == 3
    assert q.mean == approx(33.3333333)
    assert (q.min, q.p50, q.max) == (approx(0.0), approx(0.0), approx(100.0))


def test_failed_request_excluded_and_not_good():
    # D alone would be good under any of these SLOs (ttft 100 ms, tpot 100 ms, e2el 400 ms).
    s = summarize(run(), slo=SLO(ttft_ms=250, e2el_ms=1000))
    assert s.good_requests == 1  # only B: A's e2el 1200 > 1000, C's ttft 500 > 250
    assert s.goodput_rps == approx(0.5)
    assert s.itl_ms.n == 4 and s.e2el_ms.n == 3  # none of D's samples
    only_failed = summarize([rec_d()], slo=SLO(ttft_ms=1000))
    assert (only_failed.completed, only_failed.failed, only_failed.good_requests) == (0, 1, 0)
    assert only_failed.ttft_ms.n == 0 and only_failed.total_output_tokens == 0
    assert only_failed.peak_output_tok_s == 0.0


def test_one_token_output_passes_tpot_slo():
    s = summarize(run(), slo=SLO(tpot_ms=260))
    assert s.good_requests == 2  # A (250 ms) and C (no TPOT); B is 300 ms, D failed
    assert s.goodput_rps == approx(1.0)
    s = summarize(run(), slo=SLO(tpot_ms=1))
    assert s.good_requests == 1  # only C


def test_warmup_records_ignored():
    with_warmup = summarize([rec_warmup(), *run()])
    assert with_warmup == summarize(run())
    assert with_warmup.num_requests == 4
    assert with_warmup.duration_s == approx(2.0)
    assert "boom" not in with_warmup.errors


def test_summarize_rejects_empty_and_bad_duration():
    with pytest.raises(ValueError, match="no measured requests"):
        summarize([])
    with pytest.raises(ValueError, match="no measured requests"):
        summarize([rec_warmup()])
    with pytest.raises(ValueError, match="duration"):
        summarize(run(), duration_s=0)
    with pytest.raises(ValueError, match="duration"):
        summarize([RequestRecord(index=0, error="refused")])


def test_errors_truncated_and_counted():
    long = "x" * 300
    recs = [RequestRecord(index=i, sent_s=0.0, end_s=1.0, error=long) for i in range(2)]
    recs.append(RequestRecord(index=2, sent_s=0.0, end_s=1.0))  # no error text, no tokens
    s = summarize(recs)
    assert s.errors == {"x" * 200: 2, "no generated tokens received": 1}
    assert s.failed == 3


def test_token_count_source_and_deviations():
    s = summarize(run())
    assert s.deviations == [DEV_TTFT, DEV_GOODPUT, DEV_PEAK]
    chunks = [rec_a(), rec_b()]
    for r in chunks:
        r.token_count_source = "chunks"
    s = summarize(chunks)
    assert s.token_count_source == "chunks"
    assert DEV_CHUNKS in s.deviations
    assert summarize([*chunks, rec_c()]).token_count_source == "mixed"


def test_to_vllm_keys():
    keys = summarize(run()).to_vllm_keys()
    metric_keys = {
        f"{stat}_{m}_ms"
        for m in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "std", "p90", "p95", "p99")
    }
    assert (
        set(keys)
        == {
            "duration",
            "completed",
            "failed",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "max_output_tokens_per_s",
        }
        | metric_keys
    )
    assert keys["duration"] == approx(2.0)
    assert (keys["completed"], keys["failed"]) == (3, 1)
    assert (keys["total_input_tokens"], keys["total_output_tokens"]) == (35, 9)
    assert keys["request_throughput"] == approx(1.5)
    assert keys["output_throughput"] == approx(4.5)
    assert keys["total_token_throughput"] == approx(22.0)
    assert keys["max_output_tokens_per_s"] == 4.0  # per chunk, as vLLM counts
    assert keys["mean_ttft_ms"] == approx(266.6666667)
    assert keys["median_ttft_ms"] == approx(200.0)
    assert keys["std_ttft_ms"] == approx(169.9673171)
    assert keys["p99_ttft_ms"] == approx(494.0)
    assert keys["median_tpot_ms"] == approx(275.0)
    assert keys["p90_itl_ms"] == approx(610.0)
    assert keys["p95_e2el_ms"] == approx(1150.0)

    with_slo = summarize(run(), slo=SLO(tpot_ms=260)).to_vllm_keys()
    assert with_slo["request_goodput"] == approx(1.0)

    only_one_token = summarize([rec_c()]).to_vllm_keys()
    assert only_one_token["mean_tpot_ms"] == 0.0  # vLLM: np.mean(tpots or 0)
    assert only_one_token["p99_itl_ms"] == 0.0

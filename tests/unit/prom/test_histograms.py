"""``vllm_course.prom``: histograms (deltas, mean, quantiles) and which exposition lines are kept.

Expected quantiles are worked out by hand with Prometheus's ``histogram_quantile`` rule: find
the first bucket whose cumulative count reaches the rank ``q * count``, then interpolate linearly
between its lower bound (the previous bucket's ``le``, 0 for the first) and its ``le``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vllm_course import prom
from vllm_course.prom import (
    FAMILIES,
    ITERATION_TOKENS,
    LATENCY_HISTOGRAMS,
    Histogram,
    HistogramStats,
    Snapshot,
    parse,
    summarize_window,
    vllm_lines,
)
from vllm_course.prom.snapshot import _family

INF = math.inf
DATA = Path(__file__).parents[1] / "data"

# 10 observations: 2 in (0, 0.1], 4 in (0.1, 0.5], 2 in (0.5, 1], 2 above 1; sum 6 s
H = Histogram(buckets=[(0.1, 2.0), (0.5, 6.0), (1.0, 8.0), (INF, 10.0)], sum=6.0, count=10.0)


# -- Histogram ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.1, 0.05),   # rank 1 of 2 in (0, 0.1]: the first bucket starts at 0
        (0.2, 0.1),    # rank 2: exactly the first bucket's upper bound
        (0.5, 0.4),    # rank 5: 3 of 4 into (0.1, 0.5] -> 0.1 + 0.4 * 3/4
        (0.7, 0.75),   # rank 7: 1 of 2 into (0.5, 1] -> 0.5 + 0.5 * 1/2
        (0.8, 1.0),    # rank 8: top of the last finite bucket
        (0.9, 1.0),    # rank 9 is in the +Inf bucket: the largest finite bound
        (1.0, 1.0),
        (0.0, 0.0),    # rank 0: the bottom of the first (non-empty) bucket
    ],
)
def test_quantile_interpolates_inside_the_bucket(q: float, expected: float) -> None:
    assert H.quantile(q) == pytest.approx(expected, abs=1e-12)


def test_quantile_skips_empty_buckets() -> None:
    # nothing at or below 2: q=0 is the lower bound of the first bucket that has observations
    h = Histogram(buckets=[(1.0, 0.0), (2.0, 0.0), (4.0, 4.0), (INF, 4.0)], sum=12.0, count=4.0)
    assert h.quantile(0.0) == 2.0
    assert h.quantile(0.5) == 3.0   # rank 2 of 4 in (2, 4]
    assert h.quantile(1.0) == 4.0   # rank 4 = the bucket's top, not the +Inf bucket


def test_quantile_with_everything_above_the_last_bound() -> None:
    h = Histogram(buckets=[(1.0, 0.0), (INF, 3.0)], sum=30.0, count=3.0)
    assert h.quantile(0.5) == 1.0
    assert h.quantile(0.01) == 1.0
    # no finite bound at all: nothing to estimate with
    assert Histogram(buckets=[(INF, 3.0)], sum=3.0, count=3.0).quantile(0.5) is None


@pytest.mark.parametrize(
    "h",
    [
        Histogram(buckets=[], sum=0.0, count=0.0),
        Histogram(buckets=[(0.1, 0.0), (INF, 0.0)], sum=0.0, count=0.0),
    ],
)
def test_empty_histogram_has_no_quantiles_and_no_mean(h: Histogram) -> None:
    assert h.quantile(0.5) is None
    assert h.quantile(0.0) is None
    assert h.mean is None


@pytest.mark.parametrize("q", [-0.01, 1.01, 50.0, math.nan])
def test_quantile_outside_0_1_is_an_error(q: float) -> None:
    with pytest.raises(ValueError, match="q must be within 0..1"):
        H.quantile(q)


def test_mean_is_sum_over_count() -> None:
    assert H.mean == 0.6
    assert Histogram(buckets=[(INF, 4.0)], sum=10.0, count=4.0).mean == 2.5


def test_minus_is_the_window_between_two_scrapes() -> None:
    before = Histogram(buckets=[(0.1, 2.0), (0.5, 6.0), (INF, 8.0)], sum=5.0, count=8.0)
    after = Histogram(buckets=[(0.1, 5.0), (0.5, 9.0), (INF, 12.0)], sum=8.0, count=12.0)
    window = after.minus(before)
    assert window == Histogram(buckets=[(0.1, 3.0), (0.5, 3.0), (INF, 4.0)], sum=3.0, count=4.0)
    assert window.mean == 0.75
    # rank 2 of the window's 4: 2 of 3 into (0, 0.1]
    assert window.quantile(0.5) == pytest.approx(0.1 * 2 / 3)
    # nothing before: the whole histogram
    assert after.minus(None) is after
    # a bucket the earlier scrape did not have counts from zero
    wider = Histogram(buckets=[(0.1, 5.0), (0.2, 7.0), (0.5, 9.0), (INF, 12.0)], sum=8.0, count=12)
    assert wider.minus(before).buckets == [(0.1, 3.0), (0.2, 7.0), (0.5, 3.0), (INF, 4.0)]


def test_histogram_stats_scale_seconds_to_ms() -> None:
    stats = HistogramStats.of(H)
    assert stats.count == 10
    assert stats.mean == pytest.approx(600.0)
    assert stats.p50 == pytest.approx(400.0)
    # rank 9 and 9.9 are in the +Inf bucket: the largest finite bound, 1 s
    assert stats.p90 == pytest.approx(1000.0)
    assert stats.p99 == pytest.approx(1000.0)
    tokens = HistogramStats.of(H, scale=1.0)
    assert (tokens.mean, tokens.p50) == (pytest.approx(0.6), pytest.approx(0.4))
    assert HistogramStats.of(Histogram(buckets=[(INF, 0.0)], sum=0.0, count=0.0)) == (
        HistogramStats(count=0)
    )


# -- which lines are kept -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "family"),
    [
        ('vllm:prompt_tokens_total{engine="0",model_name="m"} 20000.0', "vllm:prompt_tokens"),
        ('vllm:prompt_tokens_created{engine="0",model_name="m"} 1.79e+09', "vllm:prompt_tokens"),
        ("# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
         "vllm:prompt_tokens"),
        ("# TYPE vllm:prompt_tokens_total counter", "vllm:prompt_tokens"),
        ("# TYPE vllm:prompt_tokens_created gauge", "vllm:prompt_tokens"),
        # a histogram whose own name ends in _total
        ('vllm:iteration_tokens_total_bucket{engine="0",le="8.0"} 318.0', "vllm:iteration_tokens"),
        ('vllm:iteration_tokens_total_sum{engine="0"} 20640.0', "vllm:iteration_tokens"),
        ('vllm:iteration_tokens_total_count{engine="0"} 338.0', "vllm:iteration_tokens"),
        ("# TYPE vllm:iteration_tokens_total histogram", "vllm:iteration_tokens"),
        ("# TYPE vllm:iteration_tokens_total_created gauge", "vllm:iteration_tokens"),
        ('vllm:time_to_first_token_seconds_bucket{le="+Inf"} 20.0',
         "vllm:time_to_first_token_seconds"),
        ("vllm:time_to_first_token_seconds_sum 35.8", "vllm:time_to_first_token_seconds"),
        ("vllm:num_requests_running 3.0", "vllm:num_requests_running"),
        ('vllm:prompt_tokens_by_source_total{source="local_compute"} 1.0',
         "vllm:prompt_tokens_by_source"),
        ('vllm:request_prompt_tokens_bucket{le="1.0"} 0.0', "vllm:request_prompt_tokens"),
        ("process_cpu_seconds_total 12.5", "process_cpu_seconds"),
        ("# EOF", ""),
    ],
)
def test_family_strips_sample_suffixes_then_total(line: str, family: str) -> None:
    assert _family(line) == family


EXPOSITION = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 9.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 500.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7959576745165322e+09
vllm:prompt_tokens_created{engine="1",model_name="m"} 1.7959576745165322e+09
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 1000.0
# HELP vllm:external_prefix_cache_queries_total External prefix cache queries.
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 77.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 20.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="m"} 9.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 10.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 100.0
vllm:iteration_tokens_total_bucket{engine="1",le="1.0",model_name="m"} 1.0
vllm:iteration_tokens_total_bucket{engine="1",le="8.0",model_name="m"} 5.0
vllm:iteration_tokens_total_bucket{engine="1",le="+Inf",model_name="m"} 6.0
vllm:iteration_tokens_total_count{engine="1",model_name="m"} 6.0
vllm:iteration_tokens_total_sum{engine="1",model_name="m"} 60.0
# HELP vllm:iteration_tokens_total_created Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total_created gauge
vllm:iteration_tokens_total_created{engine="0",model_name="m"} 1.7959576745168238e+09
# HELP vllm:request_prompt_tokens Number of prefill tokens processed.
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0",model_name="m"} 20.0
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="m"} 20.0
vllm:request_prompt_tokens_count{engine="0",model_name="m"} 20.0
vllm:request_prompt_tokens_sum{engine="0",model_name="m"} 20000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.75
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.01",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.25
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7959576745169258e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="4096"} 1.0
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/metrics",method="GET",status="2xx"} 3.0
"""


def test_vllm_lines_keeps_only_the_families_a_summary_reads() -> None:
    kept = vllm_lines(EXPOSITION).splitlines()
    assert {_family(line) for line in kept} == {
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens",
        "vllm:iteration_tokens",
        "vllm:time_to_first_token_seconds",
    }
    dropped = [line for line in EXPOSITION.splitlines() if line not in kept]
    for name in ("python_gc_objects", "process_cpu", "num_requests_waiting_by_reason",
                 "prompt_tokens_by_source", "external_prefix_cache", "request_success",
                 "request_prompt_tokens", "cache_config_info", "http_requests"):
        assert any(name in line for line in dropped), name
        assert not any(name in line for line in kept), name
    # HELP and TYPE lines of kept families stay, so the parser still knows the types
    assert "# TYPE vllm:iteration_tokens_total histogram" in kept
    assert "# TYPE vllm:prompt_tokens_total counter" in kept
    assert vllm_lines(EXPOSITION).endswith("\n")
    assert vllm_lines("") == "\n"


def test_parse_of_kept_lines_sums_engines() -> None:
    snap = parse(vllm_lines(EXPOSITION), t=3.0)
    assert snap.t == 3.0
    assert snap.values["vllm:num_requests_running"] == 7.0
    assert snap.values["vllm:kv_cache_usage_perc"] == 0.5   # the fullest engine, not 0.75
    assert snap.values["vllm:prompt_tokens_total"] == 1500.0
    assert snap.buckets == {
        ITERATION_TOKENS: {1.0: 6.0, 8.0: 14.0, INF: 16.0},
        "vllm:time_to_first_token_seconds": {0.01: 1.0, 0.1: 6.0, INF: 7.0},
    }
    assert not any("by_source" in k or "request_success" in k or k.startswith(("python", "http"))
                   for k in snap.values)
    steps = snap.histogram(ITERATION_TOKENS)
    assert steps == Histogram(buckets=[(1.0, 6.0), (8.0, 14.0), (INF, 16.0)], sum=160.0,
                              count=16.0)
    assert steps.mean == 10.0
    # rank 8 of 16: 2 of 8 into (1, 8]
    assert steps.quantile(0.5) == pytest.approx(1.0 + 7.0 * 2 / 8)
    ttft = snap.histogram("vllm:time_to_first_token_seconds")
    assert ttft is not None and (ttft.sum, ttft.count) == (1.0, 7.0)
    assert snap.histogram("vllm:e2e_request_latency_seconds") is None
    # the full text parses to the same numbers for the kept families
    full = parse(EXPOSITION, t=3.0)
    assert {k: full.buckets[k] for k in snap.buckets} == snap.buckets
    assert "vllm:request_prompt_tokens" in full.buckets   # what filtering saved parsing
    assert {k: full.values[k] for k in snap.values} == snap.values


def test_every_summary_name_is_a_kept_family() -> None:
    def base(name: str) -> str:
        return name.removesuffix("_total")

    wanted = {
        *LATENCY_HISTOGRAMS.values(), ITERATION_TOKENS, "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total", "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        *(old for olds in prom.ALIASES.values() for old in olds),
    }
    assert {base(n) for n in wanted} <= FAMILIES


# -- a real vLLM 0.32 CPU exposition --------------------------------------------------------
# tests/unit/data/metrics_vllm032_cpu.txt: /metrics of a tiny-mistral CPU server after 20
# requests of 1000 prompt tokens and 32 output tokens, --max-num-batched-tokens 64.


@pytest.fixture(scope="module")
def real_text() -> str:
    return (DATA / "metrics_vllm032_cpu.txt").read_text()


def test_real_exposition_keeps_a_third_of_the_lines(real_text: str) -> None:
    kept = vllm_lines(real_text).splitlines()
    assert len(real_text.splitlines()) == 614
    assert len(kept) == 260
    assert {_family(line) for line in kept} == {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
        "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:iteration_tokens",
        *LATENCY_HISTOGRAMS.values(),
    }


def test_real_exposition_values(real_text: str) -> None:
    snap = parse(vllm_lines(real_text), t=0.0)
    assert snap.get("vllm:prompt_tokens_total") == 20000.0
    assert snap.get("vllm:generation_tokens_total") == 640.0
    assert snap.get("vllm:prefix_cache_queries_total") == 20000.0
    assert snap.get("vllm:prefix_cache_hits_total") == 0.0
    assert snap.get("vllm:num_preemptions_total") == 0.0
    assert snap.get("vllm:num_requests_running") == 0.0
    assert snap.get("vllm:kv_cache_usage_perc") == 0.0
    assert set(snap.buckets) == {ITERATION_TOKENS, *LATENCY_HISTOGRAMS.values()}

    steps = snap.histogram(ITERATION_TOKENS)
    assert steps is not None
    assert steps.count == 338.0
    assert steps.sum == 20640.0           # 20000 prompt + 640 generated tokens
    assert steps.mean == pytest.approx(20640 / 338)
    assert len(steps.buckets) == 14 and steps.buckets[-1] == (INF, 338.0)
    # rank 169: 134 of 283 into (1, 8]; rank 334.62: 16.62 of 20 into (512, 1024]
    assert steps.quantile(0.5) == pytest.approx(1 + 7 * 134 / 283)
    assert steps.quantile(0.99) == pytest.approx(512 + 512 * 16.62 / 20)

    ttft = snap.histogram("vllm:time_to_first_token_seconds")
    assert ttft is not None
    assert ttft.count == 20.0
    assert ttft.sum == pytest.approx(35.81622862815857)
    # rank 10: 5 of 9 into (1, 2.5]; rank 18: 4 of 6 into (2.5, 5]
    assert ttft.quantile(0.5) == pytest.approx(1 + 1.5 * 5 / 9)
    assert ttft.quantile(0.9) == pytest.approx(2.5 + 2.5 * 4 / 6)
    itl = snap.histogram("vllm:inter_token_latency_seconds")
    assert itl is not None and itl.count == 620.0   # 20 requests x 31 gaps


def _zeroed(text: str) -> str:
    """The same exposition with every vllm sample at 0 (a freshly started server)."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:"):
            line = line.rsplit(" ", 1)[0] + " 0.0"
        out.append(line)
    return "\n".join(out) + "\n"


def test_real_exposition_as_a_run_window(real_text: str) -> None:
    before = parse(vllm_lines(_zeroed(real_text)), t=100.0)
    after = parse(vllm_lines(real_text), t=160.0)
    m = summarize_window(before, after, [], interval_s=1.0)
    assert (m.prompt_tokens, m.generation_tokens, m.preemptions) == (20000.0, 640.0, 0.0)
    assert (m.prefix_cache_queries, m.prefix_cache_hits, m.prefix_cache_hit_rate) == (
        20000.0, 0.0, 0.0
    )
    assert m.engine_steps == 338.0
    assert m.tokens_per_step_mean == pytest.approx(20640 / 338)
    assert set(m.latency_ms) == set(LATENCY_HISTOGRAMS)
    ttft = m.latency_ms["ttft"]
    assert ttft.count == 20
    assert ttft.mean == pytest.approx(35.81622862815857 / 20 * 1000)
    assert ttft.p50 == pytest.approx((1 + 1.5 * 5 / 9) * 1000)
    assert ttft.p90 == pytest.approx((2.5 + 2.5 * 4 / 6) * 1000)
    assert ttft.p99 == pytest.approx((2.5 + 2.5 * 5.8 / 6) * 1000)
    itl = m.latency_ms["itl"]
    assert itl.count == 620
    assert itl.mean == pytest.approx(6.13405038000019 / 620 * 1000)
    assert itl.p50 == pytest.approx((0.01 + 0.015 * 30 / 340) * 1000)   # rank 310
    assert m.latency_ms["e2el"].mean == pytest.approx(41.95457410812378 / 20 * 1000)
    assert m.latency_ms["queue"].mean == pytest.approx(31.221610315998987 / 20 * 1000)
    assert m.deprecated_names == []
    # no in-run samples: the gauges are unknown (before and after are idle)
    assert m.busy_fraction is None and m.num_requests_running_peak is None
    assert m.samples == 0


def test_missing_histograms_are_left_out_of_latency() -> None:
    m = summarize_window(Snapshot(t=0.0), Snapshot(t=1.0), [])
    assert m.latency_ms == {}
    assert m.engine_steps is None and m.tokens_per_step_mean is None

"""``vllm_course.prom``: a run window's server metrics, its time series, the background Sampler."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import types

import pytest
from fake_sse import FakeSSE, Script

from vllm_course.prom import (
    Sampler,
    Snapshot,
    TimePoint,
    TimeSeries,
    parse,
    snapshot,
    summarize_window,
    time_series,
)
from vllm_course.prom import window as prom

INF = math.inf


@pytest.fixture(autouse=True)
def _fresh_deprecation_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "_warned", set())


def _hist(name: str, buckets: dict[float, float], total: float) -> list[str]:
    """Exposition lines of one histogram on engine 0 (``buckets``: le -> cumulative count)."""
    lines = [f"# TYPE {name} histogram"]
    for le, count in buckets.items():
        bound = "+Inf" if le == INF else repr(float(le))
        lines.append(f'{name}_bucket{{engine="0",le="{bound}",model_name="m"}} {count}')
    lines.append(f'{name}_count{{engine="0",model_name="m"}} {buckets[INF]}')
    lines.append(f'{name}_sum{{engine="0",model_name="m"}} {total}')
    return lines


def expo(
    *,
    running: float = 0,
    waiting: float = 0,
    kv: float = 0.0,
    gen: float = 0,
    prompt: float = 0,
    preempt: float = 0,
    hits: float = 0,
    queries: float = 0,
    ttft: tuple[dict[float, float], float] | None = None,
    itl: tuple[dict[float, float], float] | None = None,
    steps: tuple[dict[float, float], float] | None = None,
    old_names: bool = False,
) -> str:
    """A /metrics page; ``old_names`` uses the names deprecated in vLLM 0.11."""
    kv_name = "vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc"
    itl_name = (
        "vllm:time_per_output_token_seconds" if old_names else "vllm:inter_token_latency_seconds"
    )
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}',
        f"# TYPE {kv_name} gauge",
        f'{kv_name}{{engine="0",model_name="m"}} {kv}',
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}',
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}',
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}',
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}',
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}',
    ]
    if ttft is not None:
        lines += _hist("vllm:time_to_first_token_seconds", *ttft)
    if itl is not None:
        lines += _hist(itl_name, *itl)
    if steps is not None:
        lines += _hist("vllm:iteration_tokens_total", *steps)
    return "\n".join(lines) + "\n"


# -- summarize_window -----------------------------------------------------------------------

BEFORE = parse(expo(
    gen=100, prompt=1000,
    ttft=({0.05: 2, 0.1: 4, 0.5: 4, INF: 4}, 0.2),
    itl=({0.01: 50, 0.1: 60, INF: 60}, 0.5),
    steps=({1: 10, 64: 20, INF: 20}, 300),
), t=0.0)
DURING = [
    parse(expo(running=4, waiting=2, kv=0.5), t=2.0),
    parse(expo(running=0, waiting=0, kv=0.1), t=4.0),
    parse(expo(running=2, waiting=0, kv=0.3), t=6.0),
]
AFTER = parse(expo(
    gen=400, prompt=3000,
    ttft=({0.05: 3, 0.1: 8, 0.5: 12, INF: 14}, 2.8),
    itl=({0.01: 150, 0.1: 260, INF: 260}, 4.5),
    steps=({1: 15, 64: 40, INF: 44}, 2300),
), t=8.0)


def test_window_latency_histograms_in_ms() -> None:
    m = summarize_window(BEFORE, AFTER, DURING, interval_s=2.0)
    assert set(m.latency_ms) == {"ttft", "itl"}   # only the histograms the server exposed
    ttft = m.latency_ms["ttft"]
    # window: {0.05: 1, 0.1: 4, 0.5: 8, +Inf: 10}, sum 2.6 s over 10 requests
    assert ttft.count == 10
    assert ttft.mean == pytest.approx(260.0)                 # exact: Δsum / Δcount
    assert ttft.p50 == pytest.approx((0.1 + 0.4 * 1 / 4) * 1000)   # rank 5 in (0.1, 0.5]
    assert ttft.p90 == pytest.approx(500.0)   # rank 9 is in +Inf: the largest finite bound
    assert ttft.p99 == pytest.approx(500.0)
    itl = m.latency_ms["itl"]
    # window: {0.01: 100, 0.1: 200, +Inf: 200}, sum 4 s over 200 gaps
    assert itl.model_dump() == {
        "count": 200, "mean": pytest.approx(20.0), "p50": pytest.approx(10.0),   # rank 100
        "p90": pytest.approx((0.01 + 0.09 * 80 / 100) * 1000),   # rank 180 in (0.01, 0.1]
        "p99": pytest.approx((0.01 + 0.09 * 98 / 100) * 1000),
    }


def test_window_engine_steps_and_gauge_means() -> None:
    m = summarize_window(BEFORE, AFTER, DURING, interval_s=2.0)
    assert m.engine_steps == 24.0                      # 44 - 20
    assert m.tokens_per_step_mean == pytest.approx(2000 / 24)   # (2300 - 300) / 24
    assert (m.generation_tokens, m.prompt_tokens) == (300.0, 2000.0)
    # means over the in-run samples only; peaks over every snapshot
    assert m.num_requests_running_mean == 2.0          # (4 + 0 + 2) / 3
    assert m.num_requests_waiting_mean == pytest.approx(2 / 3)
    assert m.kv_cache_usage_mean == pytest.approx(0.3)
    assert m.busy_fraction == pytest.approx(2 / 3)     # 2 of 3 samples had a running request
    assert (m.num_requests_running_peak, m.num_requests_waiting_peak) == (4.0, 2.0)
    assert m.kv_cache_usage_peak == 0.5
    assert (m.samples, m.interval_s) == (3, 2.0)
    assert m.deprecated_names == []


def _request_times(prefill: float, decode: float, queue: float, n: float) -> str:
    """The three request-time histograms with ``n`` requests and the given sums (s)."""
    lines = []
    for name, total in (("vllm:request_prefill_time_seconds", prefill),
                        ("vllm:request_decode_time_seconds", decode),
                        ("vllm:request_queue_time_seconds", queue)):
        lines += _hist(name, {1.0: n, INF: n}, total)
    return "\n".join(lines) + "\n"


def test_time_averaged_running_and_waiting_by_littles_law() -> None:
    # 10 requests finished in an 8 s run: 4 s of prefill, 12 s of decode, 20 s queued in all
    before = parse(expo() + _request_times(1.0, 2.0, 0.5, 3), t=0.0)
    after = parse(expo() + _request_times(5.0, 14.0, 20.5, 13), t=9.0)
    m = summarize_window(before, after, [], duration_s=8.0)
    assert m.running_time_avg == pytest.approx((4.0 + 12.0) / 8.0)
    assert m.waiting_time_avg == pytest.approx(20.0 / 8.0)
    assert m.samples == 0 and m.num_requests_running_mean is None   # no sample needed
    # unknown without a duration, or without the histograms
    assert summarize_window(before, after, []).running_time_avg is None
    assert summarize_window(BEFORE, AFTER, DURING, duration_s=8.0).running_time_avg is None


def test_window_without_samples_has_no_gauges() -> None:
    # before and after are taken while the server is idle: without an in-run sample nothing is
    # known about the batch, and 0 would read as "nothing ran"
    m = summarize_window(parse(expo(running=3)), parse(expo(running=0)), [])
    assert m.num_requests_running_mean is None and m.num_requests_running_peak is None
    assert m.busy_fraction is None and m.kv_cache_usage_peak is None
    assert m.samples == 0


def test_deprecated_names_are_read_and_listed_with_one_warning_each() -> None:
    old = dict(old_names=True)
    before = parse(expo(kv=0.0, itl=({0.01: 10, INF: 10}, 0.05), **old), t=0.0)
    during = [parse(expo(kv=kv, **old), t=t) for t, kv in ((1.0, 0.2), (2.0, 0.6), (3.0, 0.4))]
    after = parse(expo(kv=0.1, itl=({0.01: 30, INF: 40}, 0.55), **old), t=4.0)
    with pytest.warns(UserWarning) as caught:
        m = summarize_window(before, after, during)
    assert sorted(str(w.message) for w in caught) == [
        "server exposes deprecated vllm:gpu_cache_usage_perc; read as vllm:kv_cache_usage_perc",
        "server exposes deprecated vllm:time_per_output_token_seconds; read as "
        "vllm:inter_token_latency_seconds",
    ]
    assert m.deprecated_names == [
        "vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"
    ]
    # values come through the old names
    assert m.kv_cache_usage_peak == 0.6
    assert m.kv_cache_usage_mean == pytest.approx(0.4)
    itl = m.latency_ms["itl"]
    assert itl.count == 30
    assert itl.mean == pytest.approx(500 / 30)           # 0.5 s over 30 gaps, in ms
    assert itl.p50 == pytest.approx(10.0 * 15 / 20)      # rank 15 of 20 in (0, 0.01]
    # already warned in this process: a second window is silent (filterwarnings=error)
    assert summarize_window(before, after, during).deprecated_names == m.deprecated_names


def test_current_names_win_over_deprecated_ones_without_a_warning() -> None:
    both = expo(kv=0.25, itl=({0.01: 4, INF: 4}, 0.02)) + "\n".join(
        ["vllm:gpu_cache_usage_perc 0.9",
         *_hist("vllm:time_per_output_token_seconds", {0.01: 1, INF: 9}, 7.0)]
    ) + "\n"
    snap = parse(both)
    m = summarize_window(snap, snap, [snap])   # no warning: filterwarnings=error
    assert m.kv_cache_usage_peak == 0.25
    assert m.latency_ms["itl"].count == 0
    # only names that were read are listed: the current ones won (vLLM 0.11 showed both)
    assert m.deprecated_names == []


def test_only_the_deprecated_names_actually_read_are_listed() -> None:
    # current KV name, but ITL only under its deprecated name (mixed, as in a transition release)
    text = expo(kv=0.25) + "\n".join(
        _hist("vllm:time_per_output_token_seconds", {0.01: 3, INF: 4}, 0.05)
    ) + "\n"
    before = parse(expo(kv=0.0) + "\n".join(
        _hist("vllm:time_per_output_token_seconds", {0.01: 1, INF: 1}, 0.005)
    ) + "\n")
    after = parse(text)
    with pytest.warns(UserWarning) as caught:
        m = summarize_window(before, after, [after])
    assert [str(w.message) for w in caught] == [
        "server exposes deprecated vllm:time_per_output_token_seconds; read as "
        "vllm:inter_token_latency_seconds"
    ]
    assert m.deprecated_names == ["vllm:time_per_output_token_seconds"]
    assert m.kv_cache_usage_peak == 0.25
    assert m.latency_ms["itl"].count == 3
    assert m.latency_ms["itl"].mean == pytest.approx(15.0)   # 0.045 s over 3 gaps, in ms


def test_a_histogram_in_only_one_scrape_has_no_window_delta() -> None:
    with_hists = parse(expo(
        ttft=({0.1: 4, INF: 5}, 0.6),
        steps=({8: 10, INF: 12}, 90),
    ), t=10.0)
    without = parse(expo(), t=0.0)
    assert prom._hist_delta(without, with_hists, "vllm:time_to_first_token_seconds") is None
    assert prom._hist_delta(with_hists, without, "vllm:time_to_first_token_seconds") is None
    assert prom._hist_delta(without, without, "vllm:time_to_first_token_seconds") is None
    both = prom._hist_delta(with_hists, with_hists, "vllm:time_to_first_token_seconds")
    assert both == prom.Histogram(buckets=[(0.1, 0.0), (INF, 0.0)], sum=0.0, count=0.0)
    # the histogram appeared after the first scrape (e.g. a counter created at the first
    # request): its totals since the server started are not this window's
    for before, after in ((without, with_hists), (with_hists, without)):
        m = summarize_window(before, after, [])
        assert m.latency_ms == {}
        assert m.engine_steps is None and m.tokens_per_step_mean is None
    # nor an interval's tokens per step in the time series
    points = time_series([without, with_hists], start_t=0.0).points
    assert (points[1].tokens_per_step, points[1].steps_per_s) == (None, None)
    assert points[1].generation_tok_s == 0.0


# -- time_series ----------------------------------------------------------------------------


def _series_snapshots() -> list[Snapshot]:
    s0 = parse(expo(gen=1000, prompt=5000, preempt=2, hits=100, queries=400,
                    steps=({8: 10, INF: 10}, 50)), t=100.0)
    s0.telemetry = {"server_cpu_cores": 0.5}
    s1 = parse(expo(running=3, waiting=1, kv=0.25, gen=1100, prompt=5400, preempt=2, hits=150,
                    queries=600, steps=({8: 30, INF: 30}, 150)), t=102.0)
    s1.telemetry = {"server_cpu_cores": 1.5, "gpu_util_pct": 80.0}
    s2 = parse(expo(running=1, gen=1300, prompt=5400, preempt=5, hits=150, queries=600,
                    steps=({8: 30, INF: 40}, 1150)), t=104.5)
    # a second scrape at the same instant: no interval, so no rates
    s3 = parse(expo(gen=1300, prompt=5400, preempt=5, hits=150, queries=600,
                    steps=({8: 30, INF: 40}, 1150)), t=104.5)
    return [s0, s1, s2, s3]


def test_time_series_rates_per_interval_and_counters_since_the_first_snapshot() -> None:
    ts = time_series(_series_snapshots(), start_t=101.0, interval_s=2.0)
    assert ts.interval_s == 2.0
    assert ts.points == [
        TimePoint(t_s=-1.0, running=0.0, waiting=0.0, kv_cache_usage=0.0, preemptions=0.0,
                  prefix_cache_hits=0.0, prefix_cache_queries=0.0,
                  telemetry={"server_cpu_cores": 0.5}),
        # 2 s: +100 generated, +400 prompt, 20 steps of 100 tokens
        TimePoint(t_s=1.0, running=3.0, waiting=1.0, kv_cache_usage=0.25, preemptions=0.0,
                  prefix_cache_hits=50.0, prefix_cache_queries=200.0, prompt_tok_s=200.0,
                  generation_tok_s=50.0, tokens_per_step=5.0, steps_per_s=10.0,
                  telemetry={"server_cpu_cores": 1.5, "gpu_util_pct": 80.0}),
        # 2.5 s: +200 generated, no prompt, 10 steps of 1000 tokens
        TimePoint(t_s=3.5, running=1.0, waiting=0.0, kv_cache_usage=0.0, preemptions=3.0,
                  prefix_cache_hits=50.0, prefix_cache_queries=200.0, prompt_tok_s=0.0,
                  generation_tok_s=80.0, tokens_per_step=100.0, steps_per_s=4.0),
        TimePoint(t_s=3.5, running=0.0, waiting=0.0, kv_cache_usage=0.0, preemptions=3.0,
                  prefix_cache_hits=50.0, prefix_cache_queries=200.0),
    ]


def test_time_series_interval_without_engine_steps() -> None:
    a = parse(expo(gen=10, steps=({8: 5, INF: 5}, 20)), t=0.0)
    b = parse(expo(gen=30, steps=({8: 5, INF: 5}, 20)), t=0.5)
    point = time_series([a, b], start_t=0.0).points[1]
    assert point.generation_tok_s == 40.0
    assert point.tokens_per_step is None   # no step in the interval: no mean
    assert point.steps_per_s == 0.0


def test_time_series_of_nothing_and_missing_counters() -> None:
    assert time_series([], start_t=0.0, interval_s=1.0) == TimeSeries(interval_s=1.0)
    ts = time_series([Snapshot(t=5.0), Snapshot(t=6.0)], start_t=5.0)
    assert ts.points == [TimePoint(t_s=0.0), TimePoint(t_s=1.0)]


def test_time_series_column() -> None:
    ts = time_series(_series_snapshots(), start_t=101.0)
    assert ts.column("t_s") == [-1.0, 1.0, 3.5, 3.5]
    assert ts.column("generation_tok_s") == [None, 50.0, 80.0, None]
    assert ts.column("preemptions") == [0.0, 0.0, 3.0, 3.0]
    # telemetry keys, None where a point lacks one
    assert ts.column("server_cpu_cores") == [0.5, 1.5, None, None]
    assert ts.column("gpu_util_pct") == [None, 80.0, None, None]
    assert ts.column("no_such_key") == [None] * 4


def test_time_series_round_trips_through_json() -> None:
    ts = time_series(_series_snapshots(), start_t=101.0, interval_s=2.0)
    assert TimeSeries.model_validate_json(ts.model_dump_json()) == ts


def test_to_dataframe_rows_put_telemetry_keys_beside_the_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("pandas")
    fake.DataFrame = lambda rows: rows   # the rows pandas would get
    monkeypatch.setitem(sys.modules, "pandas", fake)
    rows = time_series(_series_snapshots()[:2], start_t=101.0).to_dataframe()
    assert rows == [
        {"t_s": -1.0, "running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0,
         "preemptions": 0.0, "prefix_cache_hits": 0.0, "prefix_cache_queries": 0.0,
         "prompt_tok_s": None, "generation_tok_s": None, "tokens_per_step": None,
         "steps_per_s": None, "server_cpu_cores": 0.5},
        {"t_s": 1.0, "running": 3.0, "waiting": 1.0, "kv_cache_usage": 0.25,
         "preemptions": 0.0, "prefix_cache_hits": 50.0, "prefix_cache_queries": 200.0,
         "prompt_tok_s": 200.0, "generation_tok_s": 50.0, "tokens_per_step": 5.0,
         "steps_per_s": 10.0, "server_cpu_cores": 1.5, "gpu_util_pct": 80.0},
    ]


def test_to_dataframe_with_pandas() -> None:
    pytest.importorskip("pandas")
    df = time_series(_series_snapshots(), start_t=101.0).to_dataframe()
    assert len(df) == 4
    assert list(df["t_s"]) == [-1.0, 1.0, 3.5, 3.5]
    assert df["generation_tok_s"].iloc[1] == 50.0
    assert df["gpu_util_pct"].iloc[1] == 80.0 and math.isnan(df["gpu_util_pct"].iloc[0])


# -- Sampler against a local HTTP server ----------------------------------------------------


def _metrics_script(fail_from: int | None = None):
    """Scrape i answers with i * 10 generated tokens (a 503 from scrape ``fail_from`` on)."""

    def script(index: int, path: str, body: dict) -> Script:
        assert path == "/metrics"
        if fail_from is not None and index >= fail_from:
            return Script(events=["busy"], status=503, content_type="text/plain")
        text = expo(running=index % 2, gen=10 * index, prompt=100 * index)
        return Script(events=[text], content_type="text/plain; version=0.0.4")

    return script


def _sampled(fake: FakeSSE, interval_s: float, seconds: float, **kwargs) -> Sampler:
    """A Sampler run against ``fake`` for ``seconds``, every ``interval_s``."""

    async def go() -> Sampler:
        async with fake.serve() as url:
            async with Sampler(url, interval_s=interval_s, **kwargs) as sampler:
                await asyncio.sleep(seconds)
        return sampler

    return asyncio.run(go())


def test_sampler_scrapes_in_the_background_with_telemetry() -> None:
    fake = FakeSSE(_metrics_script())
    threads: list[bool] = []

    def telemetry() -> dict[str, float]:
        threads.append(threading.current_thread() is threading.main_thread())
        return {"server_cpu_cores": float(len(threads))}

    sampler = _sampled(fake, interval_s=0.05, seconds=0.3, telemetry=telemetry)
    n = len(sampler.samples)
    assert 1 <= n <= 7
    calls = len(fake.calls)
    # a scrape still in flight when the block ends is cancelled and lost: at most one
    assert calls in (n + 2, n + 3) and all(c.path == "/metrics" for c in fake.calls)
    snaps = [sampler.before, *sampler.samples, sampler.after]
    # scrape i saw 10 * i generated tokens; before is the first scrape, after the last
    gens = [s.get("vllm:generation_tokens_total") for s in snaps]
    assert gens[0] == 0.0 and gens[-1] == 10.0 * (calls - 1)
    assert all(g % 10 == 0 and a < g for a, g in zip(gens, gens[1:], strict=False))
    # every snapshot got its own telemetry call, in order
    cores = [s.telemetry["server_cpu_cores"] for s in snaps]
    assert cores[0] == 1.0 and cores == sorted(set(cores)) and cores[-1] == len(threads)
    assert all(set(s.telemetry) == {"server_cpu_cores"} for s in snaps)
    assert not any(threads)   # telemetry runs off the event loop's thread
    assert all(a.t < b.t for a, b in zip(snaps, snaps[1:], strict=False))
    m = sampler.summary()
    assert m is not None
    assert m.generation_tokens == 10.0 * (calls - 1)
    assert m.prompt_tokens == 100.0 * (calls - 1)
    assert (m.samples, m.interval_s) == (n, 0.05)
    assert m.num_requests_running_peak == 1.0
    series = sampler.series(start_t=sampler.before.t)
    assert len(series.points) == n + 2
    assert series.points[0].t_s == 0.0
    assert series.column("server_cpu_cores") == cores
    assert series.interval_s == 0.05


def test_sampler_summary_counts_only_the_samples_inside_the_run_window() -> None:
    fake = FakeSSE(_metrics_script())

    sampler = _sampled(fake, interval_s=0.05, seconds=0.4)
    ts = [s.t for s in sampler.samples]
    assert len(ts) >= 3
    # a window that ends between the second and third sample keeps the first two
    window = (sampler.before.t, (ts[1] + ts[2]) / 2)
    m = sampler.summary(window)
    assert m.samples == 2
    # scrape i reads running = i % 2: the first two in-run samples (scrapes 1 and 2) read 1, 0
    assert m.num_requests_running_mean == 0.5
    # counters still come from before and after, whatever the window
    assert m.generation_tokens == sampler.summary().generation_tokens
    assert sampler.summary().samples == len(ts)
    # a window that closed before any sample: no in-run sample, gauges unknown
    none = sampler.summary((sampler.before.t, sampler.before.t))
    assert none.samples == 0 and none.num_requests_running_mean is None


def test_sampler_skips_failed_scrapes_and_has_no_summary_without_a_final_one() -> None:
    fake = FakeSSE(_metrics_script(fail_from=1))

    sampler = _sampled(fake, interval_s=0.03, seconds=0.15)
    assert len(fake.calls) >= 2   # before, failed samples, the failed final scrape
    assert sampler.samples == []
    assert sampler.after is None
    assert sampler.summary() is None
    assert sampler.before is not None and sampler.before.telemetry == {}
    assert [p.t_s for p in sampler.series(sampler.before.t).points] == [0.0]


def test_final_scrape_waits_until_the_server_counted_the_expected_tokens() -> None:
    # scrape i reports 10 * i generated tokens: the server "counts late"
    fake = FakeSSE(_metrics_script())

    async def go(expect: float | None, settle_s: float = 5.0) -> Sampler:
        async with fake.serve() as url:
            async with Sampler(url, interval_s=60.0) as sampler:
                sampler.expect_generation_tokens = expect
                sampler.settle_s = settle_s
        return sampler

    sampler = asyncio.run(go(35.0))
    # before saw 0; the final scrape is repeated until the counter reached 35: 10, 20, 30, 40
    assert sampler.after.get("vllm:generation_tokens_total") == 40.0
    assert len(fake.calls) == 5
    assert sampler.summary().generation_tokens == 40.0

    fake.calls.clear()
    sampler = asyncio.run(go(None))
    assert len(fake.calls) == 2          # no expectation: one final scrape

    fake.calls.clear()
    sampler = asyncio.run(go(10_000.0, settle_s=0.5))
    # never reached: it gives up after settle_s (scrapes every 0.2 s) and keeps the last one
    assert 3 <= len(fake.calls) <= 6
    assert sampler.after is not None

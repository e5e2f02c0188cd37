"""``vllm_course.prom``: parse vLLM's Prometheus text and summarise a run window."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import httpx
import pytest

from vllm_course.prom import (
    HistogramStats,
    ServerMetrics,
    Snapshot,
    parse,
    scrape,
    summarize_window,
)
from vllm_course.prom import snapshot as prom


@pytest.fixture(autouse=True)
def _fresh_deprecation_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh process would: no deprecated name warned about yet."""
    monkeypatch.setattr(prom, "_warned", set())


def metrics_text(
    *,
    gen: tuple[float, float],
    prompt: tuple[float, float],
    running: tuple[int, int],
    waiting: tuple[int, int],
    kv: tuple[float, float | None],
    queries: float,
    hits: float,
    preempt: float,
    kv_name: str = "vllm:kv_cache_usage_perc",
    prefix: str = "vllm:prefix_cache",
) -> str:
    """A /metrics page as vLLM V1 exposes it for two data-parallel engines.

    ``kv[1] = None`` leaves engine 1's KV usage out (a fraction per engine does not sum).
    """
    lines = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1234.0',
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running[0]}.0',
        f'vllm:num_requests_running{{engine="1",model_name="m"}} {running[1]}.0',
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting[0]}.0',
        f'vllm:num_requests_waiting{{engine="1",model_name="m"}} {waiting[1]}.0',
        f"# HELP {kv_name} KV-cache usage. 1 means 100 percent usage.",
        f"# TYPE {kv_name} gauge",
        f'{kv_name}{{engine="0",model_name="m"}} {kv[0]}',
        *([f'{kv_name}{{engine="1",model_name="m"}} {kv[1]}'] if kv[1] is not None else []),
        f"# HELP {prefix}_queries_total Prefix cache queries, in number of queried tokens.",
        f"# TYPE {prefix}_queries_total counter",
        f'{prefix}_queries_total{{engine="0",model_name="m"}} {queries}',
        f"# HELP {prefix}_hits_total Prefix cache hits, in terms of number of cached tokens.",
        f"# TYPE {prefix}_hits_total counter",
        f'{prefix}_hits_total{{engine="0",model_name="m"}} {hits}',
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}',
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt[0]}',
        f'vllm:prompt_tokens_total{{engine="1",model_name="m"}} {prompt[1]}',
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen[0]}',
        f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {gen[1]}',
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0',
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.01",model_name="m"} 0.0',
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 2.0',
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0',
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.75',
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.25',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0',
        'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2.0',
        "# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.",
        "# TYPE vllm:iteration_tokens_total histogram",
        'vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 3.0',
        'vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 10.0',
        'vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 400.0',
        'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 10.0',
    ]
    return "\n".join(lines) + "\n"


BEFORE = metrics_text(
    gen=(100.0, 40.0),
    prompt=(1000.0, 500.0),
    running=(0, 0),
    waiting=(0, 0),
    kv=(0.0, None),
    queries=2000.0,
    hits=500.0,
    preempt=1.0,
)
DURING = metrics_text(
    gen=(300.0, 90.0),
    prompt=(1800.0, 700.0),
    running=(7, 5),
    waiting=(3, 1),
    kv=(0.375, None),
    queries=2600.0,
    hits=700.0,
    preempt=2.0,
)
AFTER = metrics_text(
    gen=(500.0, 140.0),
    prompt=(2000.0, 900.0),
    running=(1, 0),
    waiting=(0, 0),
    kv=(0.0625, None),
    queries=3000.0,
    hits=1250.0,
    preempt=4.0,
)


def test_parse_sums_over_engines_and_keeps_buckets() -> None:
    snap = parse(BEFORE, t=12.5)
    assert snap.t == 12.5
    assert snap.values["vllm:generation_tokens_total"] == 140.0
    assert snap.values["vllm:prompt_tokens_total"] == 1500.0
    assert snap.values["vllm:num_requests_running"] == 0.0
    assert snap.values["vllm:prefix_cache_queries_total"] == 2000.0
    assert snap.values["python_gc_objects_collected_total"] == 1234.0
    assert snap.values["vllm:time_to_first_token_seconds_sum"] == 1.0
    assert snap.values["vllm:time_to_first_token_seconds_count"] == 7.0
    assert snap.buckets["vllm:time_to_first_token_seconds"] == {0.01: 1.0, 0.1: 6.0, math.inf: 7.0}
    # a histogram whose name ends in _total (not a counter)
    assert snap.buckets["vllm:iteration_tokens_total"] == {1.0: 3.0, math.inf: 10.0}
    assert snap.values["vllm:iteration_tokens_total_count"] == 10.0
    # buckets are not in values
    assert not any(name.endswith("_bucket") for name in snap.values)
    assert snap.get("vllm:generation_tokens_total") == 140.0
    assert snap.get("vllm:nope") is None
    assert snap.get("vllm:nope", 3.0) == 3.0


def test_parse_gauge_values() -> None:
    snap = parse(DURING)
    assert snap.values["vllm:num_requests_running"] == 12.0
    assert snap.values["vllm:num_requests_waiting"] == 4.0
    assert isinstance(snap.t, float) and snap.t > 1e9  # wall clock by default


def test_parse_without_help_and_type_lines() -> None:
    snap = parse(
        'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 3\n'
    )
    assert snap.values == {"vllm:num_requests_running": 5.0}


def test_summarize_window_deltas_rates_and_peaks() -> None:
    m = summarize_window(
        parse(BEFORE, 0.0), parse(AFTER, 10.0), [parse(DURING, 5.0)], interval_s=1.0
    )
    assert m == ServerMetrics(
        prompt_tokens=1400.0,
        generation_tokens=500.0,
        preemptions=3.0,
        prefix_cache_queries=1000.0,
        prefix_cache_hits=750.0,
        prefix_cache_hit_rate=0.75,
        kv_cache_usage_peak=0.375,
        kv_cache_usage_mean=0.375,
        num_requests_running_peak=12.0,
        num_requests_running_mean=12.0,
        num_requests_waiting_peak=4.0,
        num_requests_waiting_mean=4.0,
        busy_fraction=1.0,
        # the iteration-tokens and TTFT histograms did not move between BEFORE and AFTER
        engine_steps=0.0,
        tokens_per_step_mean=None,
        latency_ms={"ttft": HistogramStats(count=0)},
        deprecated_names=[],
        samples=1,
        interval_s=1.0,
    )


def test_summarize_window_without_samples_or_queries() -> None:
    text = metrics_text(
        gen=(1.0, 0.0),
        prompt=(1.0, 0.0),
        running=(2, 0),
        waiting=(0, 0),
        kv=(0.5, None),
        queries=0.0,
        hits=0.0,
        preempt=0.0,
    )
    m = summarize_window(parse(text), parse(text), [])
    assert m.samples == 0
    assert m.interval_s is None
    assert m.generation_tokens == 0.0
    assert m.prefix_cache_queries == 0.0
    assert m.prefix_cache_hit_rate is None  # no queries: no rate (not a ZeroDivisionError)
    # no in-run sample: the gauges are unknown, not the idle before/after values
    assert m.kv_cache_usage_peak is None and m.kv_cache_usage_mean is None
    assert m.num_requests_running_peak is None and m.num_requests_waiting_peak is None
    assert m.busy_fraction is None


def test_summarize_window_peaks_include_before_and_after_with_samples() -> None:
    text = metrics_text(gen=(1.0, 0.0), prompt=(1.0, 0.0), running=(2, 0), waiting=(0, 0),
                        kv=(0.5, None), queries=0.0, hits=0.0, preempt=0.0)
    idle = metrics_text(gen=(1.0, 0.0), prompt=(1.0, 0.0), running=(0, 0), waiting=(0, 0),
                        kv=(0.0, None), queries=0.0, hits=0.0, preempt=0.0)
    m = summarize_window(parse(text), parse(idle), [parse(idle)])
    assert m.samples == 1
    assert m.num_requests_running_peak == 2.0      # from `before`
    assert m.num_requests_running_mean == 0.0      # means are over the in-run samples only
    assert m.kv_cache_usage_peak == 0.5


def test_summarize_window_missing_metrics_are_none() -> None:
    empty = Snapshot(t=0.0)
    m = summarize_window(empty, parse(AFTER), [])
    assert m.generation_tokens is None
    assert m.prefix_cache_hit_rate is None
    assert m.preemptions is None
    # no in-run sample: no gauge value, whatever before/after held
    assert m.num_requests_running_peak is None
    n = summarize_window(empty, empty, [])
    assert n.kv_cache_usage_peak is None and n.num_requests_waiting_peak is None


def test_deprecated_aliases_are_read_with_a_warning() -> None:
    old = dict(kv_name="vllm:gpu_cache_usage_perc", prefix="vllm:gpu_prefix_cache")
    before = parse(
        metrics_text(
            gen=(0.0, 0.0),
            prompt=(0.0, 0.0),
            running=(0, 0),
            waiting=(0, 0),
            kv=(0.0, None),
            queries=100.0,
            hits=10.0,
            preempt=0.0,
            **old,
        )
    )
    after = parse(
        metrics_text(
            gen=(5.0, 0.0),
            prompt=(5.0, 0.0),
            running=(0, 0),
            waiting=(0, 0),
            kv=(0.75, None),
            queries=300.0,
            hits=110.0,
            preempt=0.0,
            **old,
        )
    )
    assert "vllm:kv_cache_usage_perc" not in after.values
    with pytest.warns(UserWarning) as first:
        assert after.get("vllm:kv_cache_usage_perc") == 0.75
    assert [str(w.message) for w in first] == [
        "server exposes deprecated vllm:gpu_cache_usage_perc; read as vllm:kv_cache_usage_perc"
    ]
    # once per process per old name: reading it again is silent (filterwarnings=error)
    assert before.get("vllm:kv_cache_usage_perc") == 0.0
    with pytest.warns(UserWarning) as caught:
        m = summarize_window(before, after, [after])  # one in-run sample
    # each name not warned about yet warns exactly once, however often it is read
    assert sorted(str(w.message) for w in caught) == [
        "server exposes deprecated vllm:gpu_prefix_cache_hits_total; read as "
        "vllm:prefix_cache_hits_total",
        "server exposes deprecated vllm:gpu_prefix_cache_queries_total; read as "
        "vllm:prefix_cache_queries_total",
    ]
    assert all(w.category is UserWarning for w in caught)
    assert prom._warned == {
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
    }
    # the summary still lists every deprecated name the server exposed
    assert m.deprecated_names == [
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
    ]
    # a later window on the same server warns no more
    again = summarize_window(before, after, [])
    assert again.deprecated_names == m.deprecated_names
    assert m.kv_cache_usage_peak == 0.75
    assert m.prefix_cache_queries == 200.0
    assert m.prefix_cache_hits == 100.0
    assert m.prefix_cache_hit_rate == 0.5


def test_current_name_wins_without_a_warning() -> None:
    snap = parse("vllm:kv_cache_usage_perc 0.5\nvllm:gpu_cache_usage_perc 0.9\n")
    assert snap.get("vllm:kv_cache_usage_perc") == 0.5  # filterwarnings=error: no warning


def test_kv_cache_usage_stays_a_fraction_under_data_parallelism() -> None:
    text = metrics_text(
        gen=(0.0, 0.0),
        prompt=(0.0, 0.0),
        running=(1, 1),
        waiting=(0, 0),
        kv=(0.6, 0.7),
        queries=0.0,
        hits=0.0,
        preempt=0.0,
    )
    m = summarize_window(parse(text), parse(text), [parse(text)])
    assert m.kv_cache_usage_peak is not None
    assert 0.0 <= m.kv_cache_usage_peak <= 1.0


def test_scrape_through_a_client() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=BEFORE)
        return httpx.Response(404)

    async def go() -> Snapshot:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(handler), base_url="http://test"
        ) as c:
            return await scrape(c)

    snap = asyncio.run(go())
    assert snap.values["vllm:generation_tokens_total"] == 140.0
    # only the families a summary reads are parsed (vllm_lines): no python_gc_* here
    assert "python_gc_objects_collected_total" not in snap.values
    assert snap.buckets["vllm:time_to_first_token_seconds"] == {0.01: 1.0, 0.1: 6.0, math.inf: 7.0}


def test_scrape_filters_and_parses_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, str, float]] = []
    real_parse, real_lines = prom.parse, prom.vllm_lines
    filtered_on: list[bool] = []

    def spy_parse(text: str, t: float | None = None) -> Snapshot:
        seen.append((threading.current_thread() is threading.main_thread(), text, t))
        return real_parse(text, t)

    def spy_lines(text: str, families: frozenset[str] = prom.FAMILIES) -> str:
        filtered_on.append(threading.current_thread() is threading.main_thread())
        return real_lines(text, families)

    monkeypatch.setattr(prom, "parse", spy_parse)
    monkeypatch.setattr(prom, "vllm_lines", spy_lines)

    async def go() -> Snapshot:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(lambda r: httpx.Response(200, text=BEFORE)),
            base_url="http://test",
        ) as c:
            return await scrape(c)

    start = time.time()
    snap = asyncio.run(go())
    # asyncio.run runs the loop on this (the main) thread: both steps ran on another one
    assert filtered_on == [False]
    assert len(seen) == 1
    on_main, text, t = seen[0]
    assert not on_main
    assert "python_gc" not in text and "vllm:generation_tokens_total" in text
    # the scrape's time is taken when the answer came, before parsing
    assert start <= t == snap.t <= time.time()
    assert snap.values["vllm:generation_tokens_total"] == 140.0


def test_parse_exposition_decodes_bytes_leniently() -> None:
    body = (
        b"# HELP vllm:num_requests_running caf\xe9 (latin-1, not UTF-8)\n"
        b"# TYPE vllm:num_requests_running gauge\n"
        b'vllm:num_requests_running{engine="0"} 2\n'
        b'vllm:num_requests_running{engine="1"} 3\n'
        b"process_cpu_seconds_total 9.5\n"
    )
    snap = prom._parse_exposition(body, 7.0)
    assert snap.t == 7.0
    assert snap.values == {"vllm:num_requests_running": 5.0}
    assert snap.buckets == {}


def test_scrape_error_status_raises() -> None:
    async def go() -> None:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(lambda r: httpx.Response(503, text="busy")),
            base_url="http://test",
        ) as c:
            await scrape(c)

    with pytest.raises(httpx.HTTPStatusError):
        asyncio.run(go())

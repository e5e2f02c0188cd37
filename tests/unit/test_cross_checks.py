"""``experiment.cross_checks``: the client's TTFT against the server's, and the client's verdict."""

from __future__ import annotations

import pytest

from vllm_course.experiment import cross_checks
from vllm_course.loadgen.selfcheck import client_checks
from vllm_course.prom import HistogramStats, ServerMetrics
from vllm_course.records import RequestRecord
from vllm_course.results import TTFT_GAP_MS


def _rec(i: int, ttft_s: float, *, sent_s: float = 1.0, warmup: bool = False,
         error: str | None = None) -> RequestRecord:
    """A one-token request whose first token came ``ttft_s`` after it was sent."""
    return RequestRecord(index=i, sent_s=sent_s, chunk_s=[sent_s + ttft_s], chunk_tokens=[1],
                         output_tokens=1, warmup=warmup, error=error)


def _server(mean_ttft_ms: float | None, tokens: float = 3.0) -> ServerMetrics:
    latency = {} if mean_ttft_ms is None else {"ttft": HistogramStats(count=3, mean=mean_ttft_ms)}
    return ServerMetrics(generation_tokens=tokens, latency_ms=latency)


def _ttft_warning(client: float, gap: float, server: float) -> str:
    return (
        f"client mean TTFT {client:.0f} ms is {gap:.0f} ms above the server's {server:.0f} ms "
        "(vllm:time_to_first_token_seconds): time the server's clock does not see: the HTTP "
        "front end and network before vLLM registered the request, or a client reading its "
        "chunks late"
    )


def test_thresholds() -> None:
    assert TTFT_GAP_MS == 100.0


def test_client_ttft_well_above_the_servers_is_flagged() -> None:
    records = [_rec(0, 0.25), _rec(1, 0.3), _rec(2, 0.35)]   # client mean 300 ms
    c = cross_checks(records, _server(100.0))
    assert c.client_ttft_mean_ms == pytest.approx(300.0)
    assert c.server_ttft_mean_ms == 100.0
    assert c.ttft_gap_ms == pytest.approx(200.0)   # > 100 ms and > 50 % of 100 ms
    assert c.client_output_tokens == 3 and c.server_generation_tokens == 3.0
    assert c.warnings == [_ttft_warning(300, 200, 100)]


@pytest.mark.parametrize(
    ("client_s", "server_ms", "warned"),
    [
        (0.190, 100.0, False),    # 90 ms gap (90 % of the server's mean): under TTFT_GAP_MS
        (0.250, 150.0, False),    # exactly 100 ms (67 %): at TTFT_GAP_MS is not over it
        (0.251, 150.0, True),     # 101 ms gap, 67 %
        (0.375, 250.0, False),    # 125 ms gap, exactly 50 % of 250 ms: not over it
        (0.376, 250.0, True),     # 126 ms gap, 50.4 %
        (0.250, 200.0, False),    # 50 ms gap, 25 %: warned under the old 50 ms / 25 % rule
        (1.300, 1000.0, False),   # 300 ms gap, but only 30 % of the server's mean
        (1.600, 1000.0, True),    # 600 ms gap, 60 %
        (0.010 + (TTFT_GAP_MS + 1) / 1000, 10.0, True),
        (0.010 + (TTFT_GAP_MS - 1) / 1000, 10.0, False),
        (0.050, 100.0, False),    # the client saw it sooner: a negative gap
    ],
)
def test_ttft_gap_needs_both_thresholds(client_s: float, server_ms: float, warned: bool) -> None:
    records = [_rec(i, client_s) for i in range(3)]
    c = cross_checks(records, _server(server_ms))
    assert c.ttft_gap_ms == pytest.approx(client_s * 1000 - server_ms)
    if warned:
        assert c.warnings == [_ttft_warning(client_s * 1000, c.ttft_gap_ms, server_ms)]
    else:
        assert c.warnings == []


def test_only_measured_successful_requests_count_for_the_client_ttft() -> None:
    records = [
        _rec(0, 0.1), _rec(1, 0.1),
        _rec(2, 5.0, warmup=True),        # a cold warmup
        _rec(3, 9.0, error="HTTP 500"),   # failed after a token
    ]
    c = cross_checks(records, _server(90.0, tokens=3.0))
    assert c.client_ttft_mean_ms == pytest.approx(100.0)
    assert c.ttft_gap_ms == pytest.approx(10.0)
    # a failed request's streamed tokens still count as received
    assert c.client_output_tokens == 3
    assert c.warnings == []


def test_without_a_server_ttft_there_is_no_gap() -> None:
    records = [_rec(0, 2.0)]
    c = cross_checks(records, _server(None, tokens=1.0))
    assert c.client_ttft_mean_ms == pytest.approx(2000.0)
    assert (c.server_ttft_mean_ms, c.ttft_gap_ms) == (None, None)
    assert c.warnings == []
    none = cross_checks(records, None)
    assert (none.server_ttft_mean_ms, none.ttft_gap_ms, none.server_generation_tokens) == (
        None, None, None
    )
    assert none.warnings == []
    # an empty window: the histogram is there but saw nothing
    empty = ServerMetrics(generation_tokens=1.0, latency_ms={"ttft": HistogramStats(count=0)})
    assert cross_checks(records, empty).ttft_gap_ms is None


def test_a_saturated_client_is_a_warning() -> None:
    records = [_rec(i, 0.1) for i in range(3)]
    busy = client_checks([], [80.0] * 20, 1.4)
    c = cross_checks(records, _server(100.0), busy)
    assert c.warnings == [
        "the client, not the server, limited this run (event-loop lag P90 80 ms > 20 ms "
        "(P99 80 ms, max 80 ms over 20 probes); client CPU 1.40 cores > 0.9 (one Python thread "
        "is the limit)): its latencies include the client's delay"
    ]
    healthy = client_checks([], [1.0] * 20, 0.3)
    assert cross_checks(records, _server(100.0), healthy).warnings == []
    # sporadic stalls are a note of the client's checks, not a cross-check warning
    stalled = client_checks([], [1.0] * 95 + [200.0] * 5, 0.3)
    assert not stalled.saturated and len(stalled.notes) == 1
    assert cross_checks(records, _server(100.0), stalled).warnings == []


def test_warnings_come_in_order() -> None:
    records = [_rec(i, 0.5) for i in range(3)]
    busy = client_checks([], [], 2.0)
    c = cross_checks(records, _server(100.0, tokens=5.0), busy)
    assert c.warnings == [
        "client received 3 output tokens, the server counted 5 (Δvllm:generation_tokens_total)",
        _ttft_warning(500, 400, 100),
        "the client, not the server, limited this run (client CPU 2.00 cores > 0.9 (one Python "
        "thread is the limit)): its latencies include the client's delay",
    ]

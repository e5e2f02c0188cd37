"""benchmarks/client_ceiling.py's TTFT split: a client's TTFT minus the server's is its send lag
plus its first read lag, measured against a stream server that logs when each request reached it
and when it wrote each event (one ``perf_counter`` clock on Linux for every process)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from bench_scripts import load_script

# uvloop's timers count whole milliseconds (see test_wire): a sleep may end up to 1 ms early
TIMER_RESOLUTION_MS = 1.0


@pytest.fixture(scope="module")
def script():
    with load_script("client_ceiling") as module:
        yield module


def test_ttft_parts_split_the_client_bias_into_send_and_read_lags(script):
    sent = np.array([10.000, 10.001, 10.002])
    arrived = np.array([10.004, 10.020, 10.050])        # the last request reached it 48 ms late
    wrote = arrived + 0.200                             # the server's TTFT: 200 ms for each
    read = wrote + np.array([0.001, 0.001, 0.300])      # the last first event read 300 ms late
    parts = script.ttft_parts(sent, arrived, wrote, read)
    np.testing.assert_allclose(parts.server_ttft_ms, [200, 200, 200], atol=1e-6)
    np.testing.assert_allclose(parts.send_lag_ms, [4, 19, 48], atol=1e-6)
    np.testing.assert_allclose(parts.read_lag_ms, [1, 1, 300], atol=1e-6)
    np.testing.assert_allclose(parts.client_ttft_ms, [205, 220, 548], atol=1e-6)
    np.testing.assert_allclose(parts.bias_ms, parts.send_lag_ms + parts.read_lag_ms, atol=1e-6)
    summary = parts.summary()
    assert summary["bias_mean_ms"] == pytest.approx((5 + 20 + 348) / 3)
    assert summary["sends_spread_ms"] == pytest.approx(2)
    assert summary["arrivals_spread_ms"] == pytest.approx(46)


def test_a_level_with_a_slow_first_event_reports_it_as_the_servers_ttft(script):
    """A real level, small: our client against the stream server, whose first event comes
    80 ms after each request's arrival. Only what causality guarantees is asserted: the
    server's TTFT is at least its sleep, nothing is read before it is written nor reaches the
    server before it is sent, and the bias is exactly the two lags."""
    row = asyncio.run(script.measure(streams=4, events=3, interval_ms=5, client="ours",
                                     first_ms=80))
    assert row["failed"] == 0 and row["first_ms"] == 80
    # the server held each first event 80 ms (without --first-ms it would be one 5 ms interval)
    assert row["server_ttft_mean_ms"] >= 80 - TIMER_RESOLUTION_MS
    assert row["send_lag_mean_ms"] >= 0 and row["read_lag_mean_ms"] >= 0
    assert row["bias_mean_ms"] == pytest.approx(row["client_ttft_mean_ms"]
                                                - row["server_ttft_mean_ms"])
    assert "client TTFT ms" in script.report([row])

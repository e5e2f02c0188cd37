"""``vllm_course.loadgen.selfcheck``: event-loop lag, client CPU, send lag vs slot wait, verdict."""

from __future__ import annotations

import asyncio
import time

import pytest

from vllm_course.loadgen import selfcheck
from vllm_course.loadgen.selfcheck import (
    CLIENT_BUSY_CORES,
    CLIENT_CPU_CORES,
    LAG_PROBE_S,
    LOOP_LAG_P90_MS,
    SEND_LAG_P50_MS,
    SEND_LAG_TTFT_SHARE,
    STALL_NOTE_MS,
    STALL_RECORD_MS,
    ClientChecks,
    LoopLagMonitor,
    client_checks,
    held_by_stall,
    judge,
)
from vllm_course.metrics import Dist
from vllm_course.records import RequestRecord

# -- LoopLagMonitor -------------------------------------------------------------------------


def _monitor(body, probe_s: float = LAG_PROBE_S) -> LoopLagMonitor:
    async def go() -> LoopLagMonitor:
        async with LoopLagMonitor(probe_s) as lag:
            await body()
        return lag

    return asyncio.run(go())


def test_a_blocked_loop_shows_as_lag() -> None:
    blocked = []

    async def body() -> None:
        await asyncio.sleep(0.05)   # let the probe start
        t = time.perf_counter()
        time.sleep(0.2)             # block the loop on purpose
        blocked.append((t, time.perf_counter()))
        await asyncio.sleep(0.05)

    lag = _monitor(body)
    assert len(lag.lags_ms) >= 3
    assert max(lag.lags_ms) >= 150.0   # one probe woke ~190 ms late
    assert all(v >= 0.0 for v in lag.lags_ms)
    # the stall is kept with its times: it began at most one probe interval after the block
    # did (the probe then asleep was due) and ended when the loop ran again
    (start, end), = blocked
    assert any(a <= start + LAG_PROBE_S and b >= end for a, b in lag.stalls), (blocked, lag.stalls)
    assert all(b - a >= STALL_RECORD_MS / 1000 for a, b in lag.stalls)
    # sleeping blocks the loop but burns no CPU
    assert lag.cpu_cores is not None and lag.cpu_cores < 0.5


def test_an_idle_loop_has_little_lag() -> None:
    async def body() -> None:
        await asyncio.sleep(0.2)

    lag = _monitor(body)
    # one probe per ~10 ms (a little less: each probe is late by a bit); the probes, one after
    # another, cover the 0.2 s but the last, unfinished one, however long the VM paused this
    # process in between (0.1-1 s now and then: then there are fewer, later probes)
    assert 1 <= len(lag.lags_ms) <= 21
    assert sum(LAG_PROBE_S * 1000 + v for v in lag.lags_ms) >= 200 - 2 * LAG_PROBE_S * 1000
    assert sorted(lag.lags_ms)[len(lag.lags_ms) // 2] < 5.0 or lag.stalls
    assert lag.cpu_cores is not None and lag.cpu_cores < 0.5


def test_probe_interval() -> None:
    async def body() -> None:
        await asyncio.sleep(0.2)

    assert 2 <= len(_monitor(body, probe_s=0.05).lags_ms) <= 4


def test_busy_waiting_shows_as_client_cpu() -> None:
    async def body() -> None:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)

    lag = _monitor(body)
    assert lag.cpu_cores is not None
    assert 0.5 <= lag.cpu_cores <= 1.2   # one core busy (less if the machine is loaded)


def test_monitor_before_it_runs() -> None:
    lag = LoopLagMonitor()
    assert lag.lags_ms == [] and lag.cpu_cores is None and lag.probe_s == LAG_PROBE_S


# -- client_checks --------------------------------------------------------------------------


def _rec(i: int, scheduled: float, dispatched: float | None, sent: float | None,
         warmup: bool = False) -> RequestRecord:
    return RequestRecord(index=i, scheduled_s=scheduled, dispatched_s=dispatched, sent_s=sent,
                         warmup=warmup)


def test_thresholds() -> None:
    assert (
        LOOP_LAG_P90_MS, SEND_LAG_P50_MS, SEND_LAG_TTFT_SHARE, CLIENT_BUSY_CORES, STALL_NOTE_MS,
        CLIENT_CPU_CORES,
    ) == (20.0, 20.0, 0.10, 0.5, 50.0, 0.9)


def _stall_note(p99: float, mx: float) -> str:
    return (
        f"sporadic stalls: event-loop lag P99 {p99:.0f} ms, max {mx:.0f} ms (the OS paused this "
        "process now and then; requests in flight then were timed late)"
    )


def _starved_note(cores: str, *late: str) -> str:
    return (
        f"the client ran late while using little CPU ({cores}): the OS gave its time to other "
        "processes (the server included), so requests in flight then were timed late: "
        + "; ".join(late)
    )


def test_slot_wait_is_not_send_lag() -> None:
    records = [
        _rec(0, 0.0, 0.001, 0.001),   # released at once, a slot free
        _rec(1, 0.1, 0.102, 0.302),   # released 2 ms late, then 200 ms for a slot
        _rec(2, 0.2, 0.203, 0.503),   # 3 ms late, 300 ms for a slot
        _rec(3, 0.3, 0.304, None),    # released, never sent (interrupted): no slot wait
        _rec(4, 0.0, 5.0, 5.0, warmup=True),   # warmups are ignored
        _rec(5, 0.0, None, 9.0),      # saved before dispatched_s existed: ignored
    ]
    c = client_checks(records, [0.1, 0.5, 1.0], 0.2)
    assert c.send_lag_ms.n == 4
    assert c.send_lag_ms.mean == pytest.approx(2.5)
    assert c.send_lag_ms.max == pytest.approx(4.0)
    assert c.slot_wait_ms.n == 3
    assert c.slot_wait_ms.mean == pytest.approx(500 / 3)
    assert c.slot_wait_ms.max == pytest.approx(300.0)
    assert c.loop_lag_ms == Dist.of([0.1, 0.5, 1.0])
    assert c.cpu_cores == 0.2
    # 300 ms in the client's queue is the concurrency cap working, not a slow client
    assert not c.saturated and c.reasons == []


def test_negative_lag_counts_as_zero() -> None:
    # a timer that fires a hair early
    c = client_checks([_rec(0, 0.5, 0.4995, 0.4995)], [], None)
    assert c.send_lag_ms.max == 0.0 and c.slot_wait_ms.max == 0.0


def test_nothing_measured() -> None:
    c = client_checks([], [], None)
    assert c == ClientChecks(
        loop_lag_ms=Dist(n=0), send_lag_ms=Dist(n=0), slot_wait_ms=Dist(n=0), cpu_cores=None
    )
    assert not c.saturated and c.reasons == [] and c.notes == []


# -- event-loop lag: P90 decides, a high P99 alone is a note --------------------------------

MOSTLY_LATE = [1.0] * 5 + [100.0] * 95   # the loop was late most of the time: P90 = P99 = 100
LOOP_REASON = "event-loop lag P90 100 ms > 20 ms (P99 100 ms, max 100 ms over 100 probes)"


def test_a_few_big_lags_are_a_note_not_saturation() -> None:
    # 5 probes of 100 woke 200 ms late (the OS paused the process): P90 1 ms, P99 200 ms
    lags = [1.0] * 95 + [200.0] * 5
    for cores in (0.3, 0.7):   # busy or not: a high P99 alone never saturates
        c = client_checks([], lags, cores)
        assert c.loop_lag_ms.p90 == pytest.approx(1.0)
        assert c.loop_lag_ms.p99 == pytest.approx(200.0)
        assert not c.saturated
        assert c.reasons == []
        assert c.notes == [_stall_note(200, 200)]


def test_lags_mostly_high_saturate_a_busy_client() -> None:
    c = client_checks([], MOSTLY_LATE, 0.6)
    assert c.loop_lag_ms.p90 == pytest.approx(100.0)
    assert c.saturated
    assert c.reasons == [LOOP_REASON, "client CPU 0.60 cores >= 0.5"]
    # saturated by lag: the high P99 is part of the reason, not a separate note
    assert c.notes == []


def test_lags_mostly_high_in_an_idle_client_are_a_note() -> None:
    # late but nearly idle: other processes had the CPU, the client itself was not the limit
    c = client_checks([], MOSTLY_LATE, 0.3)
    assert not c.saturated and c.reasons == []
    assert c.notes == [_starved_note("0.30 cores", LOOP_REASON)]


def test_lags_mostly_high_without_a_cpu_measurement_saturate() -> None:
    # CPU not measured: the client counts as busy, lateness alone decides (no CPU reason)
    c = client_checks([], MOSTLY_LATE, None)
    assert c.saturated
    assert c.reasons == [LOOP_REASON]
    assert c.notes == []


def test_busy_means_at_least_half_a_core() -> None:
    at = client_checks([], MOSTLY_LATE, CLIENT_BUSY_CORES)
    assert at.saturated
    assert at.reasons == [LOOP_REASON, "client CPU 0.50 cores >= 0.5"]
    under = client_checks([], MOSTLY_LATE, 0.49)
    assert not under.saturated
    assert under.notes == [_starved_note("0.49 cores", LOOP_REASON)]


def test_loop_lag_p90_just_over_the_threshold() -> None:
    lags = [1.0] * 80 + [30.0] * 20   # P90 (linear, rank 89.1) = 30, P99 = 30
    c = client_checks([], lags, 0.8)
    assert c.loop_lag_ms.p90 == pytest.approx(30.0)
    assert c.saturated
    assert c.reasons == [
        "event-loop lag P90 30 ms > 20 ms (P99 30 ms, max 30 ms over 100 probes)",
        "client CPU 0.80 cores >= 0.5",
    ]
    assert c.notes == []


def test_loop_lag_at_the_thresholds_is_fine() -> None:
    c = client_checks([], [20.0] * 10, 0.8)   # P90 == 20 ms: not over
    assert c.loop_lag_ms.p90 == 20.0
    assert not c.saturated and c.reasons == [] and c.notes == []
    # P99 exactly 50 ms (rank 98.01 of 100 lands on a 50): no note; 51 ms: a note
    at = client_checks([], [1.0] * 90 + [50.0] * 10, 0.8)
    assert at.loop_lag_ms.p90 == pytest.approx(5.9)     # 1 + 0.1 * 49
    assert at.loop_lag_ms.p99 == pytest.approx(STALL_NOTE_MS)
    assert not at.saturated and at.notes == []
    over = client_checks([], [1.0] * 90 + [51.0] * 10, 0.8)
    assert not over.saturated
    assert over.notes == [_stall_note(51, 51)]


def test_a_cpu_bound_client_with_sporadic_stalls_gets_no_stall_note() -> None:
    # CPU alone saturates; the loop was on time apart from a few stalls: the stall note is only
    # for a client that did not limit the run
    c = client_checks([], [1.0] * 95 + [300.0] * 5, 0.95)
    assert c.loop_lag_ms.p99 == pytest.approx(300.0)
    assert c.saturated
    assert c.reasons == ["client CPU 0.95 cores > 0.9 (one Python thread is the limit)"]
    assert c.notes == []


# -- send lag: P50 decides ------------------------------------------------------------------

SEND_REASON = "requests left late: send lag P50 35 ms > 20 ms (P90 47 ms over 4 requests)"


def _mostly_late_records() -> list[RequestRecord]:
    # sends 10, 30, 40 and 50 ms late: P50 35 ms
    return [_rec(i, 0.0, d, d) for i, d in enumerate([0.01, 0.03, 0.04, 0.05])]


def test_a_minority_of_late_requests_is_not_saturation() -> None:
    # 2 of 5 requests left 100 and 200 ms late; the typical one left on time
    lags_s = [0.0, 0.0, 0.0, 0.1, 0.2]
    records = [_rec(i, 1.0, 1.0 + d, 1.0 + d) for i, d in enumerate(lags_s)]
    c = client_checks(records, [], 0.8)
    assert c.send_lag_ms.p50 == pytest.approx(0.0)
    assert c.send_lag_ms.p90 == pytest.approx(160.0)   # 100 + 0.6 * 100
    assert not c.saturated and c.reasons == [] and c.notes == []


def test_most_requests_late_saturate_a_busy_client() -> None:
    c = client_checks(_mostly_late_records(), [], 0.7)
    assert c.send_lag_ms.p50 == pytest.approx(35.0)   # between 30 and 40
    assert c.send_lag_ms.p90 == pytest.approx(47.0)   # 40 + 0.7 * 10
    assert c.saturated
    assert c.reasons == [SEND_REASON, "client CPU 0.70 cores >= 0.5"]
    assert c.notes == []


def test_most_requests_late_from_an_idle_client_are_a_note() -> None:
    c = client_checks(_mostly_late_records(), [], 0.1)
    assert not c.saturated and c.reasons == []
    assert c.notes == [_starved_note("0.10 cores", SEND_REASON)]


def test_send_lag_p50_at_the_threshold_is_fine() -> None:
    records = [_rec(i, 0.0, 0.02, 0.02) for i in range(3)] + [_rec(3, 0.0, 0.5, 0.5)]
    c = client_checks(records, [], 0.8)
    assert c.send_lag_ms.p50 == pytest.approx(SEND_LAG_P50_MS)
    assert c.send_lag_ms.max == pytest.approx(500.0)
    assert not c.saturated and c.reasons == [] and c.notes == []


def test_client_cpu_over_the_threshold() -> None:
    assert not client_checks([], [], 0.9).saturated
    c = client_checks([], [], 0.95)
    assert c.saturated
    assert c.reasons == ["client CPU 0.95 cores > 0.9 (one Python thread is the limit)"]
    assert c.notes == []


def test_every_reason_at_once() -> None:
    records = [_rec(i, 0.0, 0.1, 0.1) for i in range(5)]   # all 100 ms late
    c = client_checks(records, [80.0] * 20, 1.4)
    assert c.saturated
    # over 0.9 cores: the CPU reason replaces the "busy" one
    assert c.reasons == [
        "event-loop lag P90 80 ms > 20 ms (P99 80 ms, max 80 ms over 20 probes)",
        "requests left late: send lag P50 100 ms > 20 ms (P90 100 ms over 5 requests)",
        "client CPU 1.40 cores > 0.9 (one Python thread is the limit)",
    ]
    assert c.notes == []
    assert ClientChecks.model_validate_json(c.model_dump_json()) == c


def test_both_kinds_of_lateness_in_one_note() -> None:
    records = [_rec(i, 0.0, 0.1, 0.1) for i in range(5)]
    c = client_checks(records, [80.0] * 20, 0.2)
    assert not c.saturated
    assert c.notes == [_starved_note(
        "0.20 cores",
        "event-loop lag P90 80 ms > 20 ms (P99 80 ms, max 80 ms over 20 probes)",
        "requests left late: send lag P50 100 ms > 20 ms (P90 100 ms over 5 requests)",
    )]


def test_notes_survive_json_and_old_checks_load_without_them() -> None:
    c = client_checks([], [1.0] * 95 + [200.0] * 5, None)
    assert ClientChecks.model_validate_json(c.model_dump_json()) == c
    old = c.model_dump()
    del old["notes"]   # a summary.json saved before notes existed
    assert ClientChecks.model_validate(old).notes == []


# -- client_checks hands the run's mean TTFT to the verdict ---------------------------------


def _ttft_rec(i: int, ttft_s: float, warmup: bool = False) -> RequestRecord:
    """Released and sent 30 ms late, first token ``ttft_s`` after sending."""
    return RequestRecord(index=i, scheduled_s=0.0, dispatched_s=0.03, sent_s=0.03,
                         chunk_s=[0.03 + ttft_s], warmup=warmup)


def test_client_checks_sets_the_send_threshold_from_the_mean_ttft() -> None:
    # first tokens 500 ms after sending: 10 % of that is 50 ms, 30 ms late sends are fine
    slow = client_checks([_ttft_rec(i, 0.5) for i in range(4)], [], 0.6)
    assert slow.send_lag_ms.p50 == pytest.approx(30.0)
    assert not slow.saturated and slow.reasons == [] and slow.notes == []
    # first tokens 100 ms after sending: the 20 ms floor; a warmup's 100 s TTFT does not count
    fast = client_checks([_ttft_rec(i, 0.1) for i in range(4)] + [_ttft_rec(4, 100.0, True)],
                         [], 0.6)
    assert fast.saturated
    assert fast.reasons == [
        "requests left late: send lag P50 30 ms > 20 ms (P90 30 ms over 4 requests)",
        "client CPU 0.60 cores >= 0.5",
    ]
    assert fast.notes == []


# -- judge: the verdict from the statistics alone -------------------------------------------

ON_TIME = Dist.of([1.0] * 100)
NO_SENDS = Dist(n=0)
CPU_REASON_095 = "client CPU 0.95 cores > 0.9 (one Python thread is the limit)"


def test_judge_with_nothing_measured() -> None:
    assert judge(Dist(n=0), Dist(n=0), None, None) == ([], [])
    assert judge(Dist(n=0), Dist(n=0), 0.2, 1000.0) == ([], [])
    assert judge(ON_TIME, Dist.of([0.0] * 8), 0.8, 125.0) == ([], [])


def test_judge_loop_lag() -> None:
    late = Dist.of(MOSTLY_LATE)
    assert judge(late, NO_SENDS, 0.6, None) == ([LOOP_REASON, "client CPU 0.60 cores >= 0.5"], [])
    # the mean TTFT plays no part in the loop-lag rule
    assert judge(late, NO_SENDS, 0.6, 1e9) == judge(late, NO_SENDS, 0.6, None)
    assert judge(late, NO_SENDS, 0.3, None) == ([], [_starved_note("0.30 cores", LOOP_REASON)])
    # P90 at the threshold is not late
    assert judge(Dist.of([LOOP_LAG_P90_MS] * 10), NO_SENDS, 0.8, None) == ([], [])


def test_judge_busy_means_at_least_half_a_core() -> None:
    late = Dist.of(MOSTLY_LATE)
    assert judge(late, NO_SENDS, 0.5, None) == (
        [LOOP_REASON, "client CPU 0.50 cores >= 0.5"], []
    )
    assert judge(late, NO_SENDS, 0.49, None) == ([], [_starved_note("0.49 cores", LOOP_REASON)])


def test_judge_without_a_cpu_measurement_lateness_alone_decides() -> None:
    late_sends = Dist.of([100.0] * 5)
    send_reason = "requests left late: send lag P50 100 ms > 20 ms (P90 100 ms over 5 requests)"
    assert judge(Dist.of(MOSTLY_LATE), late_sends, None, None) == (
        [LOOP_REASON, send_reason], []   # no CPU reason: nothing to quote
    )
    assert judge(ON_TIME, late_sends, None, None) == ([send_reason], [])
    assert judge(ON_TIME, NO_SENDS, None, None) == ([], [])


def test_judge_send_lag_against_the_mean_ttft() -> None:
    # the H200 burst: 2,000 requests at once, send lag P50 721 ms
    burst = Dist.of([600.0] * 1000 + [842.0] * 1000)
    assert (burst.n, burst.p50, burst.p90) == (2000, pytest.approx(721.0), pytest.approx(842.0))
    # ... then they queued for a mean TTFT of 38.7 s: the threshold is 3,869 ms, not late
    assert judge(ON_TIME, burst, 0.6, 38_690.0) == ([], [])
    assert judge(ON_TIME, burst, None, 38_690.0) == ([], [])
    # the same sends against a mean TTFT of 1 s: the threshold is 100 ms, late
    reason = "requests left late: send lag P50 721 ms > 100 ms (P90 842 ms over 2000 requests)"
    assert judge(ON_TIME, burst, 0.6, 1000.0) == ([reason, "client CPU 0.60 cores >= 0.5"], [])
    assert judge(ON_TIME, burst, None, 1000.0) == ([reason], [])
    # an idle client: a note quoting the same threshold
    assert judge(ON_TIME, burst, 0.2, 1000.0) == ([], [_starved_note("0.20 cores", reason)])
    # P50 exactly 10 % of the mean TTFT is not over it; 1 ms more is
    assert judge(ON_TIME, burst, 0.6, 7210.0) == ([], [])
    assert judge(ON_TIME, burst, 0.6, 7200.0)[0] == [
        "requests left late: send lag P50 721 ms > 720 ms (P90 842 ms over 2000 requests)",
        "client CPU 0.60 cores >= 0.5",
    ]


@pytest.mark.parametrize(
    ("mean_ttft_ms", "late"),
    [
        (None, True),     # TTFT unknown: the 20 ms floor
        (0.0, True),
        (200.0, True),    # 10 % of 200 ms = 20 ms, the floor
        (240.0, True),    # 24 ms < 25 ms
        (250.0, False),   # 25 ms: P50 at the threshold is not over it
        (1000.0, False),
    ],
)
def test_judge_send_threshold_has_a_floor(mean_ttft_ms: float | None, late: bool) -> None:
    sends = Dist.of([25.0] * 4)
    limit = max(SEND_LAG_P50_MS, SEND_LAG_TTFT_SHARE * (mean_ttft_ms or 0.0))
    reasons, notes = judge(ON_TIME, sends, None, mean_ttft_ms)
    assert reasons == (
        [f"requests left late: send lag P50 25 ms > {limit:.0f} ms (P90 25 ms over 4 requests)"]
        if late else []
    )
    assert notes == []


def test_judge_send_lag_at_the_floor_is_fine() -> None:
    assert judge(ON_TIME, Dist.of([SEND_LAG_P50_MS] * 4), 0.8, None) == ([], [])


def test_judge_client_cpu() -> None:
    assert judge(ON_TIME, NO_SENDS, CLIENT_CPU_CORES, None) == ([], [])   # at it: not over
    assert judge(ON_TIME, NO_SENDS, 0.95, None) == ([CPU_REASON_095], [])
    # over 0.9 cores and late: the CPU reason replaces the "busy" one
    assert judge(Dist.of(MOSTLY_LATE), NO_SENDS, 1.4, None) == (
        [LOOP_REASON, "client CPU 1.40 cores > 0.9 (one Python thread is the limit)"], []
    )


def test_judge_stall_note_only_without_reasons() -> None:
    stalls = Dist.of([1.0] * 95 + [200.0] * 5)   # P90 1 ms, P99 200 ms
    note = _stall_note(200, 200)
    assert judge(stalls, NO_SENDS, 0.3, None) == ([], [note])
    assert judge(stalls, NO_SENDS, 0.8, None) == ([], [note])
    assert judge(stalls, NO_SENDS, None, None) == ([], [note])
    # a client that limited the run (CPU, or late sends while busy) gets no stall note
    assert judge(stalls, NO_SENDS, 0.95, None) == ([CPU_REASON_095], [])
    late_sends = Dist.of([100.0] * 5)
    send_reason = "requests left late: send lag P50 100 ms > 20 ms (P90 100 ms over 5 requests)"
    assert judge(stalls, late_sends, 0.6, None) == (
        [send_reason, "client CPU 0.60 cores >= 0.5"], []
    )
    assert judge(stalls, late_sends, None, None) == ([send_reason], [])
    # late while idle: the starved note replaces the stall note, naming the longest stall
    # (the P90 within bounds hides it)
    assert judge(stalls, late_sends, 0.3, None) == (
        [], [_starved_note("0.30 cores; its event loop stalled for up to 0.2 s", send_reason)]
    )


def test_a_delay_is_held_by_a_stall_only_where_one_covered_it() -> None:
    slack = 0.05
    assert held_by_stall(1.0, 1.04, [], slack)                      # under the slack
    assert not held_by_stall(1.0, 1.5, [], slack)                   # late, no stall
    assert held_by_stall(1.0, 1.5, [(0.98, 1.46)], slack)           # covered within the slack
    assert not held_by_stall(1.0, 1.5, [(1.2, 1.5)], slack)         # stall began too late
    # two stalls with the loop free for 30 ms between them count as one...
    assert held_by_stall(1.0, 1.5, [(1.0, 1.2), (1.23, 1.5)], slack)
    # ...but not with 100 ms of free loop between them
    assert not held_by_stall(1.0, 1.5, [(1.0, 1.2), (1.3, 1.5)], slack)


# -- bunching and CPU per token ---------------------------------------------------------------


def _streamed(times: list[float], index: int = 0) -> RequestRecord:
    return RequestRecord(index=index, scheduled_s=0.0, dispatched_s=0.0, sent_s=0.0,
                         chunk_s=times, chunk_tokens=[1] * len(times), end_s=times[-1])


def test_bunched_share_counts_tokens_read_with_the_one_before():
    # two streams: 3 of their 6 gaps are 0 (the token came in the same read)
    records = [_streamed([0.1, 0.1, 0.2, 0.3]), _streamed([0.1, 0.15, 0.15, 0.15], 1)]
    assert selfcheck.bunched_share(records) == 0.5
    assert selfcheck.bunched_share([_streamed([0.1])]) is None        # no gap at all
    warm = _streamed([0.1, 0.1, 0.1])
    warm.warmup = True
    assert selfcheck.bunched_share([warm, _streamed([0.1, 0.2])]) == 0.0


def test_a_busy_client_that_bunches_is_saturated_and_an_idle_one_is_not():
    bunched = [_streamed([0.1, 0.1, 0.1, 0.2], i) for i in range(3)]    # 6 of 9 gaps
    busy = selfcheck.client_checks(bunched, [1.0] * 50, 0.6, cpu_s=0.012)
    assert busy.bunched_share == pytest.approx(2 / 3)
    assert busy.saturated
    assert busy.reasons[0].startswith("67% of inter-token gaps were 0")
    assert busy.cpu_us_per_token == pytest.approx(0.012 / 12 * 1e6)     # 12 tokens
    idle = selfcheck.client_checks(bunched, [1.0] * 50, 0.2)
    assert not idle.saturated and idle.cpu_us_per_token is None
    assert idle.notes and "the OS gave its time to other processes" in idle.notes[0]
    spaced = selfcheck.client_checks([_streamed([0.1, 0.2, 0.3])], [1.0] * 50, 0.6)
    assert spaced.bunched_share == 0.0 and not spaced.saturated

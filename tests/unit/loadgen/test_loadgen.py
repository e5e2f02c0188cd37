"""``vllm_course.loadgen.run_load`` against the fake SSE server on a local socket."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from fake_sse import Delay, Drop, FakeSSE, Script, completion_stream, http_error

from vllm_course.config import LoadSpec
from vllm_course.loadgen import LoadHooks, LoadResult, client, drive, run_load, warm_up
from vllm_course.loadgen import runner as loadgen
from vllm_course.loadgen.arrivals import schedule
from vllm_course.loadgen.selfcheck import LoopLagMonitor, held_by_stall
from vllm_course.records import RequestRecord
from vllm_course.workload import Request


def _requests(n: int, output_len: int = 2) -> list[Request]:
    return [Request(f"req-{i}", output_len, 4) for i in range(n)]


def _index(body: dict) -> int:
    """Which workload request a body belongs to (prompts are ``req-<i>`` / ``warm-<i>``)."""
    return int(body["prompt"].split("-")[1])


@contextlib.asynccontextmanager
async def _socket(fake: FakeSSE, monkeypatch: pytest.MonkeyPatch):
    """``fake`` on a local socket; the timeouts of every session run_load opens are noted."""
    real = drive.open_session
    made: list[float] = []

    def spy(timeout_s: float):
        made.append(timeout_s)
        return real(timeout_s)

    monkeypatch.setattr(drive, "open_session", spy)      # the measured run's client
    monkeypatch.setattr(loadgen, "open_session", spy)    # the warm-ups' client
    async with fake.serve() as url:
        yield url, made


def _run(
    fake: FakeSSE,
    monkeypatch: pytest.MonkeyPatch,
    requests: list[Request],
    load: LoadSpec,
    **kwargs,
) -> tuple[LoadResult, list[dict]]:
    async def go():
        async with _socket(fake, monkeypatch) as (url, made):
            result = await _warm_and_run(url, requests, load, **kwargs)
        return result, made

    return asyncio.run(go())


async def _warm_and_run(url: str, requests: list[Request], load: LoadSpec, *,
                        warmups: list[Request] = (), offsets_s=None, **hooks) -> LoadResult:
    """What the experiment runner does: :func:`warm_up`, then :func:`run_load` with ``hooks``."""
    if warmups:
        await warm_up(url, warmups, load, "tiny-mistral")
    return await run_load(url, "tiny-mistral", requests, load, offsets_s=offsets_s,
                          hooks=LoadHooks(**hooks))


def _run_timed(
    fake: FakeSSE,
    monkeypatch: pytest.MonkeyPatch,
    requests: list[Request],
    load: LoadSpec,
    **kwargs,
) -> tuple[LoadResult, list[tuple[float, float]]]:
    """``_run`` under a :class:`LoopLagMonitor`: the result and the event loop's stalls (start,
    end) on the records' clock. This VM pauses the whole process for 0.1-1 s now and then; a
    timing claim of a few ms holds only where no stall held the loop."""

    async def go():
        async with _socket(fake, monkeypatch) as (url, _):
            async with LoopLagMonitor() as lag:
                result = await _warm_and_run(url, requests, load, **kwargs)
        return result, [(a - result.t0, b - result.t0) for a, b in lag.stalls]

    return asyncio.run(go())


def _on_time(start: float, end: float, stalls: list[tuple[float, float]]) -> bool:
    """True if ``end - start < 20 ms``, or measured stalls held the loop over that time: a delay
    the client's code did not add."""
    return held_by_stall(start, end, stalls, 0.02)


def _tokens_by_index(index: int, path: str, body: dict) -> Script:
    """Request ``req-i`` streams i+1 one-token chunks."""
    i = _index(body)
    return Script(events=completion_stream(["t"] * (i + 1)))


def test_records_in_workload_order_with_scheduled_times(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 6
    load = LoadSpec(rate_rps=40.0, burstiness=1.0, seed=11)
    fake = FakeSSE(_tokens_by_index)
    wall0 = time.time()
    result, made = _run(fake, monkeypatch, _requests(n), load)
    expected = schedule(n, 40.0, 1.0, 11)
    assert [r.index for r in result.records] == list(range(n))
    assert [r.scheduled_s for r in result.records] == [float(t) for t in expected]
    assert all(type(r.scheduled_s) is float for r in result.records)
    for i, r in enumerate(result.records):
        assert r.error is None, r.error
        assert r.success
        assert not r.warmup
        # each record got its own request's answer (req-i streams i+1 tokens)
        assert r.chunk_tokens == [1] * (i + 1)
        assert r.output_tokens == i + 1
        assert r.prompt_len == 4 and r.max_tokens == 2
        # sent no earlier than scheduled (1 ms for timer granularity)
        assert r.sent_s >= r.scheduled_s - 1e-3
    # sends follow the schedule: the fake saw requests in workload order
    assert [_index(c.body) for c in fake.calls] == list(range(n))
    assert result.duration_s == max(r.end_s for r in result.records)
    assert result.duration_s >= float(expected[-1])
    assert wall0 <= result.started_at <= time.time()
    assert result.stopped_early is None
    # one client for the run, its read timeout from the LoadSpec
    assert made == [600.0]


def test_max_concurrency_caps_requests_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # every request takes ~0.1 s; all are scheduled at t=0
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=0.05)))
    load = LoadSpec(rate_rps=math.inf, max_concurrency=2)
    result, _ = _run(fake, monkeypatch, _requests(6), load)
    recs = result.records
    assert len(fake.calls) == 6
    assert fake.max_in_flight == 2
    assert fake.in_flight == 0
    assert all(r.success for r in recs), [r.error for r in recs]
    assert [r.scheduled_s for r in recs] == [0.0] * 6
    queue = [r.sent_s - r.scheduled_s for r in recs]
    assert max(queue[:2]) < min(queue[2:])  # the first two got a slot at once
    assert min(queue[2:4]) > 0.07  # then waited for one request (~0.1 s)
    assert min(queue[4:]) > 0.17  # and the last two for two (~0.2 s)
    assert result.duration_s >= 0.27
    # never more than two requests in flight by the records' own times either (sweep line;
    # an end and a start at the same instant do not overlap)
    events = sorted([(r.sent_s, 1) for r in recs] + [(r.end_s, -1) for r in recs])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak == 2


def test_without_cap_everything_is_in_flight_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=0.05)))
    result, _ = _run(fake, monkeypatch, _requests(5), LoadSpec(rate_rps=math.inf))
    assert fake.max_in_flight == 5
    assert all(r.success for r in result.records)
    # all were sent before the first one finished
    assert max(r.sent_s for r in result.records) < min(r.end_s for r in result.records)


def test_the_client_has_no_connection_cap_and_reads_with_the_load_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    _, made = _run(fake, monkeypatch, _requests(2), LoadSpec(max_concurrency=3, timeout_s=7.5))
    assert made == [7.5]

    async def settings():
        async with client.open_session(7.5) as session:
            return session.read_timeout_s, session.keepalive_s, session.connect_timeout_s

    # no cap on connections (the next test), reads wait at most the load's timeout
    assert asyncio.run(settings()) == (7.5, client.KEEPALIVE_EXPIRY_S, 30.0)


def test_hundreds_of_streams_are_in_flight_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # more than 100 connections (aiohttp's default cap): none waits for another to finish
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=0.3)))
    result, _ = _run(fake, monkeypatch, _requests(150), LoadSpec(rate_rps=math.inf))
    assert all(r.success for r in result.records), {r.error for r in result.records}
    assert fake.max_in_flight == 150


def test_idle_connections_leave_the_pool_before_the_server_closes_them() -> None:
    # vLLM's API server closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE seconds; a
    # pooled connection must expire first, or a request sent on it as it closes gets ReadError
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    envs = (Path(spec.origin).parent / "envs.py").read_text()
    default = re.search(r'"VLLM_HTTP_TIMEOUT_KEEP_ALIVE",\s*"(\d+)"', envs)
    assert default is not None, "vllm/envs.py no longer defines VLLM_HTTP_TIMEOUT_KEEP_ALIVE"
    assert client.KEEPALIVE_EXPIRY_S < int(default.group(1)) - 1


def test_should_stop_marks_unsent_requests_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    n, k = 7, 3
    polls: list[int] = []

    def should_stop() -> str | None:
        polls.append(1)
        return "the vLLM server died" if len(polls) > k else None

    sunk: list[RequestRecord] = []
    progress: list[tuple[int, int]] = []
    fake = FakeSSE(Script(events=completion_stream(["a", "b"])))
    result, _ = _run(
        fake,
        monkeypatch,
        _requests(n),
        LoadSpec(rate_rps=200.0, seed=1),
        should_stop=should_stop,
        sink=sunk.append,
        progress=lambda done, total: progress.append((done, total)),
    )
    recs = result.records
    assert len(recs) == n  # never dropped
    assert result.stopped_early == "the vLLM server died"
    assert len(fake.calls) == k
    assert [_index(c.body) for c in fake.calls] == list(range(k))
    assert all(r.success for r in recs[:k])
    for r in recs[k:]:
        assert r.error == "not sent: the vLLM server died"
        assert r.sent_s is None and r.end_s is None
        assert r.chunk_s == [] and not r.success
    # scheduled times are kept for unsent requests too
    assert [r.scheduled_s for r in recs] == [float(t) for t in schedule(n, 200.0, 1.0, 1)]
    # the sink saw every record exactly once (sent ones when they finished, unsent at the stop)
    assert sorted(r.index for r in sunk) == list(range(n))
    assert all(s is recs[s.index] for s in sunk)
    # progress counts finished measured requests only
    assert progress == [(i, n) for i in range(1, k + 1)]
    assert result.duration_s == max(r.end_s for r in recs[:k])


def test_should_stop_before_the_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    sunk: list[RequestRecord] = []
    result, _ = _run(
        fake,
        monkeypatch,
        _requests(3),
        LoadSpec(),
        should_stop=lambda: "stop now",
        sink=sunk.append,
    )
    assert fake.calls == []
    assert result.stopped_early == "stop now"
    assert [r.error for r in result.records] == ["not sent: stop now"] * 3
    assert len(sunk) == 3
    assert 0 <= result.duration_s < 1.0


def test_sink_and_progress_once_per_measured_record(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 5
    sunk: list[RequestRecord] = []
    progress: list[tuple[int, int]] = []
    fake = FakeSSE(_tokens_by_index)

    def sink(r: RequestRecord) -> None:
        assert r.end_s is not None  # finished when handed over
        sunk.append(r)

    result, _ = _run(
        fake,
        monkeypatch,
        _requests(n),
        LoadSpec(max_concurrency=2),
        sink=sink,
        progress=lambda d, t: progress.append((d, t)),
        warmups=[Request("warm-0", 1), Request("warm-1", 1)],
    )
    assert len(sunk) == n
    assert {id(r) for r in sunk} == {id(r) for r in result.records}
    assert progress == [(i, n) for i in range(1, n + 1)]
    # warmups are neither sunk nor counted
    assert all(not r.warmup for r in sunk)


def test_warmups_run_first_and_are_excluded(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    warm = [Request(f"warm-{i}", 1, 4) for i in range(3)]

    async def go():
        async with _socket(fake, monkeypatch) as (url, made):
            warmed = await warm_up(url, warm, LoadSpec(), "tiny-mistral")
            return warmed, await run_load(url, "tiny-mistral", _requests(2), LoadSpec()), made

    warm_records, result, made = asyncio.run(go())
    assert len(warm_records) == 3
    assert all(r.warmup and r.success for r in warm_records)
    assert [r.index for r in warm_records] == [0, 1, 2]
    assert len(made) == 2   # the warm-ups' client, then the measured run's own
    assert len(result.records) == 2
    assert all(not r.warmup for r in result.records)
    prompts = [c.body["prompt"] for c in fake.calls]
    assert sorted(prompts[:3]) == ["warm-0", "warm-1", "warm-2"]
    assert sorted(prompts[3:]) == ["req-0", "req-1"]   # sent at once: either may come first
    # warmup bodies are real requests (max_tokens from the warmup request)
    assert all(c.body["max_tokens"] == 1 for c in fake.calls[:3])


def test_failed_requests_stay_in_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def script(index: int, path: str, body: dict) -> Script:
        i = _index(body)
        if i == 1:
            return http_error(400, "bad request")
        if i == 2:
            return Script(events=completion_stream(["a", "b", "c"])[:1] + [Drop()])
        return Script(events=completion_stream(["a", "b", "c"]))

    fake = FakeSSE(script)
    result, _ = _run(fake, monkeypatch, _requests(4), LoadSpec(max_concurrency=1))
    errors = [r.error for r in result.records]
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("HTTP 400: ") and "bad request" in errors[1]
    assert errors[2].startswith("StreamCut: "), errors[2]
    assert result.records[2].chunk_tokens == [1]
    assert [r.success for r in result.records] == [True, False, False, True]


def test_real_socket_drop_and_http_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def script(index: int, path: str, body: dict) -> Script:
        i = _index(body)
        if i == 0:
            return Script(events=completion_stream(["a", "b", "c"])[:2] + [Drop()])
        if i == 1:
            return http_error(400, "max_tokens is too large")
        return Script(events=completion_stream(["a", "b", "c"], tokens=[1, 3, 2]))

    fake = FakeSSE(script)
    result, _ = _run(fake, monkeypatch, _requests(3, output_len=6), LoadSpec())
    r0, r1, r2 = result.records
    assert r0.error is not None and r0.error.startswith("StreamCut: ")
    assert r0.chunk_tokens == [1, 1]
    assert r1.error is not None and r1.error.startswith("HTTP 400: ")
    assert "max_tokens is too large" in r1.error
    assert r2.error is None and r2.chunk_tokens == [1, 3, 2] and r2.output_tokens == 6
    assert r2.prompt_tokens == 4 and r2.finish_reason == "length"
    assert fake.in_flight == 0
    assert [c.path for c in fake.calls] == ["/v1/completions"] * 3


def test_real_socket_read_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    events = completion_stream(["a", "b"])
    events = events[:1] + [Delay(3.0)] + events[1:]
    fake = FakeSSE(Script(events=events))
    t = time.perf_counter()
    result, _ = _run(fake, monkeypatch, _requests(1), LoadSpec(timeout_s=0.1))
    assert time.perf_counter() - t < 2.5  # gave up long before the 3 s pause ended
    (r,) = result.records
    # the client's read timeout or our per-request deadline, whichever fires first (both 0.1 s)
    assert r.error is not None and r.error.startswith(
        ("ReadTimeout: no response bytes", "timeout: no complete")), r.error
    assert r.chunk_tokens == [1]


def test_schedule_is_followed_at_a_finite_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # constant rate 20/s: sends 50 ms apart
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    result, _ = _run(fake, monkeypatch, _requests(4), LoadSpec(rate_rps=20.0, burstiness=math.inf))
    sent = np.array([r.sent_s for r in result.records])
    scheduled = np.array([r.scheduled_s for r in result.records])
    assert scheduled.tolist() == pytest.approx([0.0, 0.05, 0.1, 0.15])
    # never sent before its time (1 ms for timer granularity); the last one waited ~0.15 s
    assert np.all(sent >= scheduled - 1e-3)
    assert sent[-1] >= 0.149


def test_explicit_offsets_replace_the_arrival_process(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    offsets = [0.0, 0.0, 0.04, 0.1]
    # rate/burstiness/seed of the LoadSpec are ignored when offsets_s is given
    result, _ = _run(
        fake, monkeypatch, _requests(4), LoadSpec(rate_rps=1.0, seed=5), offsets_s=offsets
    )
    assert [r.scheduled_s for r in result.records] == offsets
    assert all(type(r.scheduled_s) is float for r in result.records)
    assert all(r.success for r in result.records)
    assert all(r.sent_s >= r.scheduled_s - 1e-3 for r in result.records)
    assert result.records[3].sent_s >= 0.099


@pytest.mark.parametrize("offsets", [[0.0, 0.1], [0.0, 0.2, 0.1], [0.0, 0.1, 0.2, 0.3]])
def test_bad_explicit_offsets(monkeypatch: pytest.MonkeyPatch, offsets: list[float]) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    with pytest.raises(ValueError, match="offsets_s needs one non-decreasing send time"):
        _run(fake, monkeypatch, _requests(3), LoadSpec(), offsets_s=offsets)
    assert fake.calls == []


def test_interrupted_run_marks_requests_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a", "b", "c"], delay_s=0.1)))
    seen: list[RequestRecord] = []
    real_send = drive.send

    async def spy(session, url, request, record, **kwargs):
        seen.append(record)
        return await real_send(session, url, request, record, **kwargs)

    monkeypatch.setattr(drive, "send", spy)

    async def go() -> None:
        async with _socket(fake, monkeypatch) as (url, _):
            with pytest.raises(asyncio.TimeoutError):
                # chunks arrive at ~0.1, 0.2, 0.3 s: interrupt after the second
                await asyncio.wait_for(
                    run_load(url, "m", _requests(3), LoadSpec(max_concurrency=2)), timeout=0.25
                )

    asyncio.run(go())
    assert len(seen) == 2  # the cap let two start
    assert all(r.error == "cancelled: the run was interrupted" for r in seen)
    assert not any(r.success for r in seen)


def test_timeout_bounds_the_whole_request_not_each_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 chunks 50 ms apart (1 s in all): no single read waits longer than the timeout of 0.3 s,
    # but the request as a whole does, so it must fail as timed out with its chunks kept
    events = completion_stream([f"t{i}" for i in range(20)], delay_s=0.05)
    fake = FakeSSE(Script(events=events))
    result, stalls = _run_timed(fake, monkeypatch, _requests(1, output_len=20),
                                LoadSpec(timeout_s=0.3))
    (r,) = result.records
    # the request's own span ends well before the stream's 1 s, plus whatever pauses of the
    # process were measured in it. Not the wall clock around the whole run: that also holds the
    # fake server's set-up and teardown, which the stall monitor does not watch (a pause there
    # once made it 1.02 s in the full unit suite, 2 of 5 runs on 2026-12-03)
    assert r.end_s - r.sent_s < 0.9 + sum(b - a for a, b in stalls)
    assert r.error == "timeout: no complete response within 0.3 s"
    assert 0 < len(r.chunk_s) < 20
    assert not r.success


def test_interrupted_run_hands_every_record_to_the_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a", "b", "c"], delay_s=0.1)))
    sunk: list[RequestRecord] = []

    async def go() -> None:
        async with _socket(fake, monkeypatch) as (url, _):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(
                    run_load(url, "m", _requests(5), LoadSpec(max_concurrency=2),
                             hooks=LoadHooks(sink=sunk.append)),
                    timeout=0.25,
                )

    asyncio.run(go())
    assert sorted(r.index for r in sunk) == [0, 1, 2, 3, 4]   # in flight and never sent, too
    assert all(r.error == "cancelled: the run was interrupted" for r in sunk)


# -- dispatched_s and on_chunk --------------------------------------------------------------


def test_dispatched_s_separates_send_lag_from_slot_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_course.loadgen.selfcheck import client_checks

    # one slot, four requests due at t=0, each ~0.05 s long
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=0.025)))
    result, stalls = _run_timed(fake, monkeypatch, _requests(4), LoadSpec(max_concurrency=1))
    recs = result.records
    assert all(r.success for r in recs), [r.error for r in recs]
    # every request was released on schedule (unless a stall of the process held it)...
    assert all(r.dispatched_s >= r.scheduled_s for r in recs)
    assert all(_on_time(r.scheduled_s, r.dispatched_s, stalls) for r in recs), stalls
    # ...then waited for the slot, each one request longer than the one before
    waits = [r.sent_s - r.dispatched_s for r in recs]
    assert _on_time(recs[0].dispatched_s, recs[0].sent_s, stalls), stalls
    for k in range(1, 4):
        assert waits[k] >= 0.045 * k                 # a stall only adds
        assert recs[k].sent_s >= recs[k - 1].end_s   # a slot frees when a request ends
    checks = client_checks(recs, [], None)
    assert checks.slot_wait_ms.max >= 135.0
    if not stalls:   # no pause of the process: send lag is the generator's alone
        assert checks.send_lag_ms.max < 20.0
        assert not checks.saturated


def test_dispatched_s_follows_the_schedule_without_a_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    result, stalls = _run_timed(fake, monkeypatch, _requests(4), LoadSpec(),
                                offsets_s=[0, 0.03, 0.06, 0.09])
    for r, due in zip(result.records, [0, 0.03, 0.06, 0.09], strict=True):
        assert r.scheduled_s == due
        assert r.dispatched_s >= due and _on_time(due, r.dispatched_s, stalls), stalls
        # no slot to wait for
        assert r.sent_s >= r.dispatched_s and _on_time(r.dispatched_s, r.sent_s, stalls)


def test_dispatched_s_stays_none_for_unsent_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSSE(Script(events=completion_stream(["a"])))
    result, _ = _run(fake, monkeypatch, _requests(2), LoadSpec(), should_stop=lambda: "stop")
    assert [r.dispatched_s for r in result.records] == [None, None]


def test_on_chunk_sees_measured_requests_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, bool]] = []
    fake = FakeSSE(_tokens_by_index)   # req-i streams i+1 one-token chunks
    result, _ = _run(
        fake, monkeypatch, _requests(3), LoadSpec(max_concurrency=1),
        warmups=[Request("warm-0", 1, 4), Request("warm-1", 1, 4)],
        on_chunk=lambda r: seen.append((r.index, len(r.chunk_s), r.warmup)),
    )
    assert all(r.success for r in result.records)
    assert len(fake.calls) == 5   # the warmups were sent, but not watched
    # one slot: the requests stream one after another
    assert seen == [(0, 1, False), (1, 1, False), (1, 2, False),
                    (2, 1, False), (2, 2, False), (2, 3, False)]


def test_several_base_urls_share_the_requests_round_robin() -> None:
    """Request i goes to server i % k, under one cap."""
    fakes = [FakeSSE(Script(events=completion_stream(["a", "b"]))) for _ in range(3)]

    async def go():
        async with fakes[0].serve() as u0, fakes[1].serve() as u1, fakes[2].serve() as u2:
            return await run_load([u0, u1, u2], "m", _requests(7), LoadSpec(max_concurrency=2))

    result = asyncio.run(go())
    assert all(r.success and r.output_tokens == 2 for r in result.records)
    assert [sorted(c.body["prompt"] for c in f.calls) for f in fakes] == [
        ["req-0", "req-3", "req-6"], ["req-1", "req-4"], ["req-2", "req-5"]]
    with pytest.raises(ValueError, match="at least one base URL"):
        asyncio.run(run_load([], "m", _requests(1), LoadSpec()))

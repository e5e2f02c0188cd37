"""``run_load`` spread over worker processes (``LoadSpec.workers``), against the fake SSE server.

The fake serves from this process's event loop while the workers (fresh interpreters) send to
it over real sockets; starting a worker takes a second or two here.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import signal

import pytest
from fake_sse import FakeSSE, Script, completion_stream

from vllm_course.config import LoadSpec
from vllm_course.loadgen import LoadHooks, LoadResult, run_load, workers
from vllm_course.loadgen.arrivals import schedule
from vllm_course.records import RequestRecord
from vllm_course.workload import Request


def _requests(n: int, output_len: int = 2) -> list[Request]:
    return [Request(f"req-{i}", output_len, 4) for i in range(n)]


def _index(body: dict) -> int:
    return int(body["prompt"].split("-")[1])


def _tokens_by_index(index: int, path: str, body: dict) -> Script:
    """Request ``req-i`` streams i % 4 + 1 one-token chunks, 10 ms apart."""
    return Script(events=completion_stream(["t"] * (_index(body) % 4 + 1), delay_s=0.01))


def _run(fake: FakeSSE, requests, load: LoadSpec, **hooks):
    async def go():
        async with fake.serve() as url:
            return await run_load(url, "m", requests, load, hooks=LoadHooks(**hooks))

    return asyncio.run(go())


def test_a_run_in_three_workers_sends_the_single_process_schedule():
    n = 12
    load = LoadSpec(rate_rps=60.0, seed=3, workers=3)
    sunk: list[RequestRecord] = []
    progress: list[tuple[int, int]] = []
    fake = FakeSSE(_tokens_by_index)
    result = _run(fake, _requests(n, 4), load, sink=sunk.append,
                  progress=lambda d, t: progress.append((d, t)))
    recs = result.records
    # the schedule is built once and dealt out: the same times a single process would use
    assert [r.scheduled_s for r in recs] == [float(t) for t in schedule(n, 60.0, 1.0, 3)]
    assert [r.index for r in recs] == list(range(n))
    for i, r in enumerate(recs):
        assert r.success, r.error
        assert r.chunk_tokens == [1] * (i % 4 + 1)          # its own request's answer
        # one clock for all processes, and never sent before its time
        assert r.sent_s >= r.dispatched_s >= r.scheduled_s - 1e-9
    assert sorted(_index(c.body) for c in fake.calls) == list(range(n))
    # every worker sent its share on connections of its own
    assert [w.requests for w in result.workers] == [4, 4, 4]
    assert all(w.cpu_cores is not None and w.lags_ms for w in result.workers)
    assert fake.connections >= 3
    # the parent handed every finished record to the sink once, and counted them
    assert sorted(r.index for r in sunk) == list(range(n))
    assert all(s is recs[s.index] for s in sunk)
    assert progress == [(i, n) for i in range(1, n + 1)]
    assert result.duration_s == max(r.end_s for r in recs)
    assert result.stopped_early is None


def test_the_concurrency_cap_is_split_between_the_workers():
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=0.05)))
    result = _run(fake, _requests(10), LoadSpec(max_concurrency=3, workers=2))
    assert all(r.success for r in result.records)
    assert fake.max_in_flight <= 3
    # caps of 2 and 1: worker 0 (even indices) runs two at once, worker 1 one
    shares = workers._shares(["u"], "m", _requests(10), LoadSpec(max_concurrency=3), [0.0] * 10,
                             2)
    assert [s.load["max_concurrency"] for s in shares] == [2, 1]
    assert [s.indices for s in shares] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_should_stop_reaches_every_worker():
    polls: list[int] = []

    def should_stop() -> str | None:
        polls.append(1)
        return "the vLLM server died" if len(polls) > 3 else None

    fake = FakeSSE(Script(events=completion_stream(["a"])))
    # 40 requests over ~4 s; the parent polls every 50 ms: the stop comes after ~0.15 s
    result = _run(fake, _requests(40), LoadSpec(rate_rps=10.0, burstiness=math.inf, workers=2),
                  should_stop=should_stop)
    assert result.stopped_early == "the vLLM server died"
    unsent = [r for r in result.records if r.error == "not sent: the vLLM server died"]
    assert 20 <= len(unsent) < 40 and all(r.sent_s is None for r in unsent)
    assert len(fake.calls) == 40 - len(unsent)
    assert all(r.success for r in result.records if r not in unsent)


def test_an_interrupted_run_marks_every_record_and_stops_its_workers():
    fake = FakeSSE(Script(events=completion_stream(["a", "b", "c"], delay_s=1.0)))
    sunk: list[RequestRecord] = []

    async def go():
        async with fake.serve() as url:
            run = asyncio.create_task(run_load(url, "m", _requests(6), LoadSpec(workers=2),
                                               hooks=LoadHooks(sink=sunk.append)))
            while len(fake.calls) < 6:       # every request in flight (the workers started)
                assert not run.done(), run.exception()    # a run that failed never gets there
                await asyncio.sleep(0.05)
            run.cancel()                     # as Ctrl-C or a notebook's interrupt does
            with pytest.raises(asyncio.CancelledError):
                await run

    asyncio.run(go())
    assert sorted(r.index for r in sunk) == list(range(6))
    assert all(r.error == "cancelled: the run was interrupted" for r in sunk), \
        [r.error for r in sunk]
    assert all(r.sent_s is not None for r in sunk)
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_fails_the_run_with_its_records_marked():
    fake = FakeSSE(Script(events=completion_stream(["a", "b"], delay_s=1.0)))
    sunk: list[RequestRecord] = []

    async def kill_a_worker():
        while not (kids := multiprocessing.active_children()):
            await asyncio.sleep(0.05)
        while not fake.calls:      # once the requests are out
            await asyncio.sleep(0.05)
        os.kill(kids[0].pid, signal.SIGKILL)

    async def go():
        async with fake.serve() as url:
            killer = asyncio.create_task(kill_a_worker())
            with pytest.raises(workers.WorkerError, match="died"):
                try:
                    await run_load(url, "m", _requests(4), LoadSpec(workers=2),
                                   hooks=LoadHooks(sink=sunk.append))
                finally:
                    if not killer.done():    # the run ended before any worker was killed
                        killer.cancel()
            await killer

    asyncio.run(go())
    assert sorted(r.index for r in sunk) == [0, 1, 2, 3]
    died = [r for r in sunk if (r.error or "").startswith("client worker failed")]
    assert died, [r.error for r in sunk]


def test_workers_are_chosen_from_the_cores_and_the_load():
    many = LoadSpec()
    assert workers.auto_workers(5000, many, cores=4) == 1           # a laptop or CI
    assert workers.auto_workers(300, many, cores=16) == 1
    assert workers.auto_workers(1000, many, cores=16) == 3          # 1000 / 384 -> 3
    assert workers.auto_workers(5000, many, cores=12) == 6          # half the cores
    assert workers.auto_workers(5000, LoadSpec(max_concurrency=512), cores=64) == 2
    assert workers.auto_workers(10**5, many, cores=128) == workers.MAX_AUTO_WORKERS
    # at a finite rate, the events the arrivals offer bound it: 900 requests of 256 tokens at 15
    # requests/s are 3,840 events/s, one worker's share, though 900 could be in flight
    reqs = [Request(prompt="x", output_len=256)] * 900
    offered = workers.offered_events_per_s(reqs, [i / 15 for i in range(900)])
    assert offered == pytest.approx(15 * 256)
    assert workers.auto_workers(900, many, cores=16, events_per_s=offered) == 1
    assert workers.auto_workers(900, many, cores=16) == 3
    fast = workers.offered_events_per_s(reqs, [i / 200 for i in range(900)])   # 51,200 events/s
    assert workers.auto_workers(900, many, cores=16, events_per_s=fast) == 3  # streams bound it
    assert workers.auto_workers(5000, many, cores=32, events_per_s=fast) == 6
    assert workers.offered_events_per_s(reqs, [0.0] * 900) == math.inf     # all at once
    assert workers.auto_workers(1000, many, cores=16, events_per_s=math.inf) == 3
    # asked for: as many as asked, never more than the requests or the cap
    assert workers.resolve_workers(3, LoadSpec(workers=8), LoadHooks()) == 3
    assert workers.resolve_workers(100, LoadSpec(workers=8, max_concurrency=2), LoadHooks()) == 2
    hook = LoadHooks(on_chunk=lambda r: None)
    assert workers.resolve_workers(1000, LoadSpec(), hook) == 1
    with pytest.raises(ValueError, match="on_chunk hook runs in this process"):
        workers.resolve_workers(1000, LoadSpec(workers=2), hook)


def test_a_run_in_workers_is_judged_by_its_busiest_worker():
    from vllm_course.loadgen.drive import WorkerStats
    from vllm_course.loadgen.selfcheck import LoopLagMonitor, run_checks

    recs = [RequestRecord(index=i, dispatched_s=0.0, sent_s=0.0, chunk_s=[0.1, 0.2],
                          chunk_tokens=[1, 1], end_s=0.2) for i in range(4)]
    result = LoadResult(records=recs, t0=100.0, workers=[
        WorkerStats(requests=2, lags_ms=[1.0] * 10, stalls=[(100.5, 100.6)], cpu_cores=0.3,
                    cpu_s=0.3),
        WorkerStats(requests=2, lags_ms=[2.0] * 10, stalls=[], cpu_cores=0.95, cpu_s=0.95)])
    # the parent only waited: its own (idle) event loop is not the client's
    c = run_checks(result, LoopLagMonitor())
    assert (c.workers, c.cpu_cores) == (2, 0.95)
    assert c.saturated and "client CPU 0.95 cores > 0.9" in c.reasons[0]
    assert c.loop_lag_ms.n == 20
    assert c.stalls_s == [(0.5, 0.6)]                       # on the records' clock
    assert c.cpu_us_per_token == pytest.approx(1.25 / 8 * 1e6)


def test_a_watched_pipe_carries_more_than_its_buffer_under_uvloop():
    """A worker sends its finished records over a pipe its uvloop also watches for the
    parent's messages. uvloop's add_reader made that descriptor non-blocking, so records sent
    faster than the parent read them raised BlockingIOError once the socket buffer (about
    100 kB here) was full: a 3-worker run of 1,000 streams failed with "client worker 2:
    BlockingIOError: [Errno 11]". Watched through ``workers.watch``, the sends wait instead."""
    uvloop = pytest.importorskip("uvloop", reason="the workers use uvloop where it is installed")
    import threading
    import time

    sender, receiver = multiprocessing.Pipe(duplex=True)
    messages = [("record", i, "x" * 2000) for i in range(300)]      # about 600 kB
    got: list = []

    def slow_reader():
        for _ in messages:
            got.append(receiver.recv())
            time.sleep(0.0005)

    async def send_all():
        loop = asyncio.get_running_loop()
        workers.watch(loop, sender, lambda: None)
        assert os.get_blocking(sender.fileno())
        try:
            for m in messages:
                sender.send(m)
        finally:
            loop.remove_reader(sender.fileno())

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    try:
        uvloop.run(send_all())
    finally:
        reader.join(timeout=30)
    assert got == messages

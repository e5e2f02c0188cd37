"""One run spread over several worker processes (``LoadSpec.workers``), for loads one Python
process cannot time without falling behind.

A Python client reads a few tens of thousands of streamed events per second per core; vLLM on
a large GPU can stream more than that. Past that point one process reads events late and in
bunches, and the inter-token latencies it reports are its own (``benchmarks/client_ceiling.py``
measures where that happens on a machine). Here the run is dealt out:

* the arrival schedule is built once, in the parent, for the whole run; request ``i`` goes to
  worker ``i % W`` with its scheduled time unchanged, so the arrivals are exactly the ones a
  single process would send, and a concurrency cap is split between the workers;
* every worker opens its own connections, waits at a start barrier, and sends at the same
  ``t0`` on ``time.perf_counter()``, which on Linux is the system-wide ``CLOCK_MONOTONIC``: all
  processes' times are on one clock;
* a worker records each request's scheduled and actual send time as a single process does (no
  coordinated omission), and sends each finished record to the parent, which hands it to the
  sink and the progress callback; per-token data never crosses processes while the run lasts;
* each worker watches its own event loop (lag, stalls, CPU) and reports it at the end
  (:class:`~vllm_course.loadgen.drive.WorkerStats`).

Workers are started with ``spawn`` (a fresh interpreter: safe beside a notebook's running event
loop and threads) and use uvloop's event loop when it is installed. One process stays the
default on small machines (:func:`auto_workers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from vllm_course.config import LoadSpec
from vllm_course.loadgen.drive import LoadHooks, LoadResult, WorkerStats, _Drive
from vllm_course.loadgen.selfcheck import LoopLagMonitor
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

STREAMS_PER_WORKER = 384
"""Streams one worker is given when the count is chosen automatically. On the H200 host's
cores (2026-12-03, ``benchmarks/client_ceiling.py``, streams of 100 events/s each) one process
read 300 streams (26k events/s) at 85 % of a core without bunching, and 1,000 (65k events/s
offered) only at a full core with 78 % of the gaps bunched; two, four and six processes read the
1,000 with 0.3-0.4 % bunched. vLLM streams far fewer events per stream (one per engine step, 10-80
ms apart): 1,000 streams at 20 ms per step are 50k events/s, which three workers read at about
two thirds of a core each. Each worker costs a start (a fresh interpreter: about a second of
CPU), so fewer is better as long as none is busy."""
EVENTS_PER_WORKER = 10_000
"""Streamed events per second one worker is given when a run's offered rate is finite. With the
course's reader (``loadgen/wire.py``) one process on the H200 host read 36.7k events/s at 10.5 µs
per event with a timestamp error P99 of 0.56 ms (``benchmarks/client_ceiling.py``, 2026-12-03);
a quarter of that leaves room for bursts of arrivals four times the mean rate. At 15 requests/s
of 256 output tokens (3,840 events/s) one process is enough, however many requests the run
holds."""
MAX_AUTO_WORKERS = 8
"""The most workers chosen automatically (``load.workers`` may ask for more)."""
START_DELAY_S = 0.2
"""Seconds between the start barrier and ``t0``, so that every worker is waiting for ``t0``
(none is still being told to go) when the first request is due."""
READY_TIMEOUT_S = 120.0
"""Seconds a worker may take to start (a fresh interpreter importing the course's client)."""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def auto_workers(num_requests: int, load: LoadSpec, cores: int | None = None,
                 events_per_s: float | None = None) -> int:
    """How many worker processes a run gets when ``load.workers`` is not set.

    One on a machine with fewer than 8 cores (a laptop, CI: the server needs the cores more).
    Otherwise one per :data:`STREAMS_PER_WORKER` streams that can be in flight at once (all the
    requests, or ``max_concurrency``), and, when the arrivals have a finite mean rate, no more
    than one per :data:`EVENTS_PER_WORKER` of the events per second they offer
    (``events_per_s``: requests/s x mean output tokens, one streamed event per token): a run at a
    fixed rate has only rate x E2EL requests in flight, however many it holds. At most half the
    cores (the rest stay with vLLM's own processes) and at most :data:`MAX_AUTO_WORKERS`.
    """
    cores = _cores() if cores is None else cores
    if cores < 8:
        return 1
    streams = min(num_requests, load.max_concurrency or num_requests)
    wanted = math.ceil(streams / STREAMS_PER_WORKER)
    if events_per_s is not None and math.isfinite(events_per_s):
        wanted = min(wanted, math.ceil(events_per_s / EVENTS_PER_WORKER))
    return max(1, min(wanted, cores // 2, MAX_AUTO_WORKERS))


def offered_events_per_s(requests: Sequence[Request], offsets_s: Sequence[float]) -> float:
    """Mean streamed events per second the arrivals offer: requests per second over the span of
    the send times, times the mean output tokens (one event per token). ``inf`` when every
    request is due at once (the server's speed, not the arrivals, sets the event rate then)."""
    span = float(max(offsets_s) - min(offsets_s)) if len(offsets_s) else 0.0
    if span <= 0 or not requests:
        return math.inf
    mean_out = sum(r.output_len for r in requests) / len(requests)
    return (len(requests) - 1) / span * mean_out


def resolve_workers(num_requests: int, load: LoadSpec, hooks: LoadHooks,
                    events_per_s: float | None = None) -> int:
    """The worker count of a run: ``load.workers``, else :func:`auto_workers`; never more than
    the requests (or the concurrency cap), and one for a run with an ``on_chunk`` hook.
    ``events_per_s``: what :func:`offered_events_per_s` says of the run's arrivals.

    Raises:
        ValueError: ``load.workers`` > 1 with an ``on_chunk`` hook (the hook must run where the
            chunks arrive, in this process).
    """
    if hooks.on_chunk is not None:
        if (load.workers or 1) > 1:
            raise ValueError("an on_chunk hook runs in this process: it needs load.workers = 1 "
                             f"(got {load.workers})")
        return 1
    wanted = load.workers or auto_workers(num_requests, load, events_per_s=events_per_s)
    return max(1, min(wanted, num_requests, load.max_concurrency or num_requests))


@dataclass
class _Share:
    """What one worker is given: its requests (by workload index), their scheduled times, and
    how to reach the servers."""

    worker: int
    base_urls: list[str]
    model: str
    load: dict[str, Any]
    indices: list[int]
    requests: list[Request]
    offsets: list[float]


def _shares(base_urls: list[str], model: str, requests: Sequence[Request], load: LoadSpec,
            offsets: Sequence[float], workers: int) -> list[_Share]:
    """Deal request ``i`` to worker ``i % workers``; split the concurrency cap (the first
    ``cap % workers`` workers get one slot more)."""
    cap = load.max_concurrency
    shares = []
    for w in range(workers):
        indices = list(range(w, len(requests), workers))
        share_cap = None if cap is None else cap // workers + (1 if w < cap % workers else 0)
        shares.append(_Share(
            worker=w, base_urls=list(base_urls), model=model,
            load=load.model_copy(update={"max_concurrency": share_cap, "workers": 1}).model_dump(),
            indices=indices, requests=[requests[i] for i in indices],
            offsets=[float(offsets[i]) for i in indices]))
    return shares


def watch(loop: asyncio.AbstractEventLoop, conn: Connection, callback, *args: Any) -> None:
    """Call ``callback(*args)`` whenever ``conn`` has something to read, and keep ``conn``
    blocking.

    uvloop's ``add_reader`` sets the descriptor non-blocking (libuv's ``uv_poll_init`` does),
    and the same descriptor carries both directions of the pipe: a ``conn.send`` of records
    into a full socket buffer (the other side busy for a moment) would then raise
    ``BlockingIOError`` (EAGAIN) after writing part of a message, and a ``recv`` of a message
    not yet all there would too. Blocking again, a send waits for the reader to catch up
    instead. The callback reads only what ``conn.poll()`` says is there, so it never waits for
    long."""
    loop.add_reader(conn.fileno(), callback, *args)
    os.set_blocking(conn.fileno(), True)


# ---- in the worker process ----------------------------------------------------------------

def _worker_main(conn: Connection, share: _Share) -> None:
    """A worker process's entry point: run its share on uvloop (if installed) and report."""
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        run(_worker(conn, share))
    except BaseException as exc:   # the parent reads this instead of a bare exit code
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


async def _worker(conn: Connection, share: _Share) -> None:
    load = LoadSpec.model_validate(share.load)
    records = [RequestRecord(index=i, scheduled_s=t)
               for i, t in zip(share.indices, share.offsets, strict=True)]
    stop: list[str] = []
    drive = _Drive(share.model, share.requests, load, records,
                   LoadHooks(sink=lambda r: conn.send(("record", r)),
                             should_stop=lambda: stop[0] if stop else None))
    conn.send(("ready", share.worker))
    _, t0 = conn.recv()                       # ("go", t0): the start barrier
    loop = asyncio.get_running_loop()
    task = None

    def control() -> None:                    # the parent's "stop" or "cancel", any time
        while conn.poll():
            kind, *rest = conn.recv()
            if kind == "stop" and not stop:
                stop.append(rest[0])
            elif kind == "cancel" and task is not None:
                task.cancel()

    watch(loop, conn, control)
    gc.collect()
    gc.freeze()
    gc.disable()
    stopped = None
    try:
        async with LoopLagMonitor() as lag:
            task = asyncio.create_task(drive.run(share.base_urls, share.offsets, t0=t0))
            try:
                stopped = (await task).stopped_early
            except asyncio.CancelledError:
                stopped = "cancelled"
    finally:
        loop.remove_reader(conn.fileno())
    conn.send(("done", stopped, WorkerStats(requests=len(records), lags_ms=lag.lags_ms,
                                            stalls=lag.stalls, cpu_cores=lag.cpu_cores,
                                            cpu_s=lag.cpu_s)))


# ---- in the parent ------------------------------------------------------------------------

class WorkerError(RuntimeError):
    """A worker process failed to start or died during the run (the message says which and
    how)."""


async def run_in_workers(base_urls: list[str], model: str, requests: Sequence[Request],
                         load: LoadSpec, offsets: Sequence[float],
                         records: list[RequestRecord], hooks: LoadHooks,
                         workers: int) -> LoadResult:
    """:func:`~vllm_course.loadgen.run_load` over ``workers`` processes (see the module
    docstring); ``records`` are the parent's placeholders, replaced by each worker's record as
    it finishes.

    Raises:
        WorkerError: a worker did not start within :data:`READY_TIMEOUT_S` or died (the
            records it had not reported are marked failed first, and handed to the sink).
    """
    ctx = multiprocessing.get_context("spawn")
    procs, conns = [], []
    for share in _shares(base_urls, model, requests, load, offsets, workers):
        parent_end, child_end = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker_main, args=(child_end, share),
                           name=f"vllm-course-worker-{share.worker}", daemon=True)
        proc.start()
        child_end.close()
        procs.append(proc)
        conns.append(parent_end)
    run = _Parent(records, hooks, conns, procs)
    try:
        return await run.go(load)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in conns:
            conn.close()


class _Parent:
    """The parent's side of one run in workers: the barrier, the records as they come, stop
    and cancel."""

    def __init__(self, records: list[RequestRecord], hooks: LoadHooks,
                 conns: list[Connection], procs: list):
        self.records, self.hooks, self.conns, self.procs = records, hooks, conns, procs
        self.reported: set[int] = set()
        self.sent_done = 0          # finished requests that were sent (what progress counts)
        self.stats: list[WorkerStats | None] = [None] * len(conns)
        self.stopped: str | None = None
        self.failed: str | None = None
        self.finished: asyncio.Future | None = None

    async def go(self, load: LoadSpec) -> LoadResult:
        loop = asyncio.get_running_loop()
        await self._ready(loop)
        t0 = time.perf_counter() + START_DELAY_S
        result = LoadResult(records=self.records, t0=t0, started_at=time.time() + START_DELAY_S)
        self.finished = loop.create_future()
        for i, conn in enumerate(self.conns):
            watch(loop, conn, self._receive, i)
        for conn in self.conns:
            conn.send(("go", t0))
        try:
            await self._wait(result)
        except BaseException:
            self._tell("cancel")
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.finished), 10.0)
            self._settle("cancelled: the run was interrupted")
            raise
        finally:
            for conn in self.conns:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(conn.fileno())
        if self.failed:
            self._settle(f"client worker failed: {self.failed}")
            raise WorkerError(self.failed)
        ends = [r.end_s for r in self.records if r.end_s is not None]
        result.duration_s = max(ends) if ends else time.perf_counter() - t0
        result.stopped_early = self.stopped
        result.workers = [s for s in self.stats if s is not None]
        return result

    async def _ready(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until every worker has started and opened its client."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        for i, conn in enumerate(self.conns):
            while not conn.poll():
                if not self.procs[i].is_alive():
                    raise WorkerError(f"client worker {i} exited with code "
                                      f"{self.procs[i].exitcode} before it started")
                if time.monotonic() > deadline:
                    raise WorkerError(f"client worker {i} did not start within "
                                      f"{READY_TIMEOUT_S:g} s")
                await asyncio.sleep(0.02)
            kind, *rest = conn.recv()
            if kind != "ready":
                raise WorkerError(f"client worker {i} failed to start: {rest[0] if rest else kind}")

    async def _wait(self, result: LoadResult) -> None:
        """Until every worker is done; polls ``should_stop`` and watches the processes."""
        while not self.finished.done():
            if self.hooks.should_stop is not None and self.stopped is None:
                reason = self.hooks.should_stop()
                if reason:
                    self.stopped = reason
                    self._tell("stop", reason)
            for i, proc in enumerate(self.procs):
                if self.stats[i] is None and not proc.is_alive() and not self.conns[i].poll():
                    self.failed = self.failed or (f"client worker {i} died (exit code "
                                                  f"{proc.exitcode})")
                    self._finish_if_done(force=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.finished), 0.05)

    def _receive(self, i: int) -> None:
        conn = self.conns[i]
        try:
            while conn.poll():
                kind, *rest = conn.recv()
                if kind == "record":
                    self._take(rest[0])
                elif kind == "done":
                    stopped, stats = rest
                    self.stats[i] = stats
                    if stopped and stopped != "cancelled":
                        self.stopped = self.stopped or stopped
                elif kind == "failed":
                    self.failed = self.failed or f"client worker {i}: {rest[0]}"
        except (EOFError, OSError):     # the worker is gone
            asyncio.get_running_loop().remove_reader(conn.fileno())
            if self.stats[i] is None:
                self.procs[i].join(timeout=1.0)
                self.failed = self.failed or (f"client worker {i} died (exit code "
                                              f"{self.procs[i].exitcode})")
        self._finish_if_done()

    def _take(self, record: RequestRecord) -> None:
        if record.index in self.reported:
            return
        self.reported.add(record.index)
        self.records[record.index] = record
        if self.hooks.sink is not None:
            self.hooks.sink(record)
        if record.sent_s is not None:
            self.sent_done += 1
            if self.hooks.progress is not None:
                self.hooks.progress(self.sent_done, len(self.records))

    def _finish_if_done(self, force: bool = False) -> None:
        if self.finished is not None and not self.finished.done() and (
                force or all(s is not None for s in self.stats) or self.failed):
            self.finished.set_result(None)

    def _tell(self, *message: Any) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(message)

    def _settle(self, reason: str) -> None:
        """Records no worker reported end with ``reason``, and go to the sink."""
        for r in self.records:
            if r.index not in self.reported:
                r.error = r.error or reason
                self._take(r)

"""Sending one set of requests on schedule in one event loop (:class:`_Drive`), and what a run
returns (:class:`LoadResult`) and calls (:class:`LoadHooks`): the part of
:func:`~vllm_course.loadgen.run_load` that a worker process
(:mod:`vllm_course.loadgen.workers`) runs too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vllm_course.config import LoadSpec
from vllm_course.loadgen.client import ChunkHook, open_session, send
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

ProgressFn = Callable[[int, int], None]

RecordSink = Callable[[RequestRecord], None]


@dataclass
class LoadResult:
    """What one measured run produced.

    Attributes:
        records: one per measured request, in workload order.
        duration_s: from the first scheduled send (t=0) to the end of the last request, in s.
        started_at: wall-clock start (``time.time()``), for aligning with server metrics.
        t0: the same start on the ``time.perf_counter()`` clock: record times are relative to it.
        stopped_early: why the run stopped before sending everything, or ``None``.
        workers: each worker process's own view of itself (:class:`WorkerStats`), for a run
            spread over several (``load.workers``); empty for a run in this process, whose
            caller watches its own event loop.
    """

    records: list[RequestRecord]
    duration_s: float = 0.0
    started_at: float = 0.0
    t0: float = 0.0
    stopped_early: str | None = None
    workers: list[WorkerStats] = field(default_factory=list)


@dataclass
class WorkerStats:
    """What one worker process measured of itself during a run.

    Attributes:
        requests: measured requests it sent.
        lags_ms: its event loop's lag probes (ms; :class:`~vllm_course.loadgen.selfcheck.
            LoopLagMonitor`).
        stalls: ``(start, end)`` of its loop's stalls, on the ``perf_counter`` clock (s).
        cpu_cores: its CPU time per second of the run (1.0 = one core busy).
        cpu_s: its CPU time over the run (s).
    """

    requests: int
    lags_ms: list[float]
    stalls: list[tuple[float, float]]
    cpu_cores: float | None
    cpu_s: float | None


@dataclass(frozen=True)
class LoadHooks:
    """What :func:`run_load` calls while it runs; every hook is optional.

    Attributes:
        progress: called as ``progress(finished, total)`` after each request.
        sink: called with each finished record (e.g. to append it to a file), exactly once.
        should_stop: polled while dispatching; a non-``None`` string stops sending new requests
            (the reason ends up in ``LoadResult.stopped_early``); requests not sent are recorded
            as failed with that reason, never dropped.
        on_chunk: called with a request's record after each token-carrying chunk, on the event
            loop that times the requests (keep it cheap; see :func:`client.send`).
    """

    progress: ProgressFn | None = None
    sink: RecordSink | None = None
    should_stop: Callable[[], str | None] | None = None
    on_chunk: ChunkHook | None = None


class _Drive:
    """One :func:`run_load` call once its arguments are checked: sends each request at its time
    over pooled connections (one client for all servers, request ``i`` to server ``i % k``),
    holds the concurrency cap, and hands every record to the sink exactly once, also when the
    run stops early or is cancelled."""

    def __init__(self, model: str, requests: Sequence[Request], load: LoadSpec,
                 records: list[RequestRecord], hooks: LoadHooks):
        self.model, self.requests, self.load = model, requests, load
        self.records, self.hooks = records, hooks
        cap = load.max_concurrency
        self.semaphore = asyncio.Semaphore(cap) if cap else None
        self.tasks: list[asyncio.Task] = []
        self.done = 0
        self.sunk: set[int] = set()   # indices already handed to the sink
        self.session = None
        self.urls: list[str] = []

    async def run(self, base_urls: list[str], offsets: list[float],
                  t0: float | None = None) -> LoadResult:
        """Send every request at ``t0`` (``perf_counter``; default now) + its offset."""
        self.urls = base_urls
        async with open_session(self.load.timeout_s) as self.session:
            now = time.perf_counter()
            result = LoadResult(records=self.records, t0=now if t0 is None else t0)
            result.started_at = time.time() - (now - result.t0)
            try:
                await self._dispatch(offsets, result)
                await asyncio.gather(*self.tasks)
            except BaseException:
                await self._cancel()
                raise
            finally:
                ends = [r.end_s for r in self.records if r.end_s is not None]
                result.duration_s = max(ends) if ends else time.perf_counter() - result.t0
        return result

    async def _dispatch(self, offsets: list[float], result: LoadResult) -> None:
        """Start each request at its offset from ``result.t0``; when ``should_stop`` gives a
        reason, record every request not yet sent as failed with it and stop."""
        t0, should_stop = result.t0, self.hooks.should_stop
        for i, offset in enumerate(offsets):
            reason = should_stop() if should_stop is not None else None
            if reason:
                result.stopped_early = reason
                for r in self.records[i:]:
                    r.error = f"not sent: {reason}"
                    self._hand_over(r)
                return
            # a loop's timers may fire early (uvloop's by up to ~2 ms: libuv counts whole ms
            # from a cached clock): sleep again until the send is due, never send early
            while (delay := t0 + offset - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            self.tasks.append(asyncio.create_task(self._one(i, t0)))

    async def _one(self, i: int, t0: float) -> None:
        self.records[i].dispatched_s = time.perf_counter() - t0
        if self.semaphore is None:
            await self._timed_send(i, t0)
        else:
            async with self.semaphore:
                await self._timed_send(i, t0)
        self.done += 1
        self._hand_over(self.records[i])
        if self.hooks.progress is not None:
            self.hooks.progress(self.done, len(self.requests))

    async def _timed_send(self, i: int, t0: float) -> None:
        url = self.urls[self.records[i].index % len(self.urls)]   # the workload's index
        coro = send(self.session, url, self.requests[i],
                    self.records[i], model=self.model,
                    endpoint=self.load.endpoint, t0=t0, on_chunk=self.hooks.on_chunk)
        try:
            await asyncio.wait_for(coro, self.load.timeout_s)
        except asyncio.TimeoutError:
            self.records[i].error = (f"timeout: no complete response within "
                                     f"{self.load.timeout_s:g} s")

    async def _cancel(self) -> None:
        """Cancel the requests in flight; every record not finished says the run was
        interrupted, and none is silently dropped."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for r in self.records:
            if (r.end_s is None and r.error is None) or r.error == "cancelled":
                r.error = "cancelled: the run was interrupted"
            self._hand_over(r)

    def _hand_over(self, record: RequestRecord) -> None:
        if self.hooks.sink is not None and record.index not in self.sunk:
            self.sunk.add(record.index)
            self.hooks.sink(record)

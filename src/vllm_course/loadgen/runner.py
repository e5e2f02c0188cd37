"""The async load generator: an arrival schedule and an optional concurrency cap
(:func:`run_load`), and the one warm-up path (:func:`warm_up`, sent before a measured run on
connections of its own).

``await run_load(...)`` works in a notebook cell as well as under ``asyncio.run``. It prints
nothing: progress goes to an optional callback, finished records to an optional sink (so a caller
can save partial results as they arrive).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from vllm_course.config import LoadSpec
from vllm_course.loadgen.arrivals import schedule
from vllm_course.loadgen.client import ChunkHook, send
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

ProgressFn = Callable[[int, int], None]

KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle connection stays in the client's pool, shorter than the server's keep-alive
(vLLM's API server closes an idle connection after ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` = 5 s,
vllm/envs.py). httpx's own default is also 5 s, so a request can be sent on a pooled connection
just as the server closes it, and fail with ``ReadError``. (A CI run had one ``ReadError`` among
300 requests at 44 req/s on an overloaded server, but that request was sent 3 ms after another
finished, so it most likely reused a fresh connection: its cause is still unknown.)"""
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
    """

    records: list[RequestRecord]
    duration_s: float = 0.0
    started_at: float = 0.0
    t0: float = 0.0
    stopped_early: str | None = None


async def warm_up(
    base_url: str, warmups: Sequence[Request], load: LoadSpec, model: str
) -> list[RequestRecord]:
    """Send ``warmups`` all at once and wait for them: the one warm-up path (the experiment
    runner and the client benchmark both use it).

    They go on a client of their own, closed before the measured run starts, so the measured
    run opens all its connections after its t=0 and no warm-up chunk reaches its records,
    progress or sink. Never raises for a failed request (see :func:`client.send`).

    Returns:
        The warm-ups' records (``warmup=True``), in ``warmups`` order.
    """
    records = [RequestRecord(index=i, warmup=True) for i in range(len(warmups))]
    timeout = httpx.Timeout(load.timeout_s, connect=30.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as client:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                send(client, w, r, model=model, endpoint=load.endpoint, t0=t0)
                for w, r in zip(warmups, records, strict=True)
            )
        )
    return records


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


async def run_load(
    base_url: str | Sequence[str],
    model: str,
    requests: Sequence[Request],
    load: LoadSpec,
    *,
    offsets_s: Sequence[float] | None = None,
    hooks: LoadHooks | None = None,
) -> LoadResult:
    """Drive ``requests`` through a server following ``load`` (warm-ups are :func:`warm_up`'s).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``; or several servers serving the
            same model (replicas), which a client-side round robin shares: request ``i`` goes to
            ``base_url[i % k]``, each server over a client of its own, under one arrival
            schedule and one concurrency cap.
        model: the served model name.
        requests: the measured requests, sent in order.
        load: endpoint, arrival process, concurrency cap, timeout (``num_warmups`` is read by
            the caller that sends them, not here).
        offsets_s: explicit send times in seconds from the run start, one per request
            (non-decreasing), replacing ``load``'s arrival process (rate, burstiness, seed), e.g.
            to replay a trace or another tool's exact schedule.
        hooks: progress, sink, stop and per-chunk callbacks (:class:`LoadHooks`).

    Returns:
        A :class:`LoadResult`; failed requests stay in it with ``error`` set.

    Raises:
        ValueError: if ``offsets_s`` is not one non-decreasing time per request, or
            ``base_url`` is an empty list.
    """
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls:
        raise ValueError("run_load needs at least one base URL")
    if offsets_s is None:
        offsets = schedule(len(requests), load.rate_rps, load.burstiness, load.seed)
    else:
        offsets = [float(t) for t in offsets_s]
        steps = zip(offsets, offsets[1:], strict=False)
        if len(offsets) != len(requests) or any(b < a for a, b in steps):
            raise ValueError("offsets_s needs one non-decreasing send time per request")
    records = [RequestRecord(index=i, scheduled_s=float(t)) for i, t in enumerate(offsets)]
    drive = _Drive(model, requests, load, records, hooks or LoadHooks())
    # As vllm bench serve does (freeze_gc_heap): move everything alive now out of the collector's
    # reach, so a full collection over a large heap cannot stall the event loop mid-run and
    # make requests leave late.
    gc.collect()
    gc.freeze()
    try:
        return await drive.run(urls, offsets)
    finally:
        gc.unfreeze()


class _Drive:
    """One :func:`run_load` call once its arguments are checked: sends each request at its time
    over pooled connections (one client per server, request ``i`` to server ``i % k``), holds the
    concurrency cap, and hands every record to the sink exactly once, also when the run stops
    early or is cancelled."""

    def __init__(self, model: str, requests: Sequence[Request], load: LoadSpec,
                 records: list[RequestRecord], hooks: LoadHooks):
        self.model, self.requests, self.load = model, requests, load
        self.records, self.hooks = records, hooks
        cap = load.max_concurrency
        self.semaphore = asyncio.Semaphore(cap) if cap else None
        self.limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap,
                                   keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self.timeout = httpx.Timeout(load.timeout_s, connect=30.0)
        self.tasks: list[asyncio.Task] = []
        self.done = 0
        self.sunk: set[int] = set()   # indices already handed to the sink
        self.clients: list[httpx.AsyncClient] = []

    async def run(self, base_urls: list[str], offsets: list[float]) -> LoadResult:
        async with contextlib.AsyncExitStack() as stack:
            self.clients = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=url, limits=self.limits, timeout=self.timeout))
                for url in base_urls
            ]
            result = LoadResult(records=self.records, started_at=time.time())
            result.t0 = time.perf_counter()
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
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
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
        client = self.clients[i % len(self.clients)]
        coro = send(client, self.requests[i], self.records[i], model=self.model,
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

"""The async load generator: warmup, an arrival schedule, an optional concurrency cap.

``await run_load(...)`` works in a notebook cell as well as under ``asyncio.run``. It prints
nothing: progress goes to an optional callback, finished records to an optional sink (so a caller
can save partial results as they arrive).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
        records: one per measured request, in workload order (warmups excluded).
        warmup_records: the warmup requests' records.
        duration_s: from the first scheduled send (t=0) to the end of the last request, in s.
        started_at: wall-clock start (``time.time()``), for aligning with server metrics.
        t0: the same start on the ``time.perf_counter()`` clock: record times are relative to it.
        stopped_early: why the run stopped before sending everything, or ``None``.
    """

    records: list[RequestRecord]
    warmup_records: list[RequestRecord] = field(default_factory=list)
    duration_s: float = 0.0
    started_at: float = 0.0
    t0: float = 0.0
    stopped_early: str | None = None


async def warm_up(
    client: httpx.AsyncClient, warmups: Sequence[Request], load: LoadSpec, model: str
) -> list[RequestRecord]:
    """Send ``warmups`` all at once on ``client`` and wait for them; their records (``warmup=True``)."""
    t0 = time.perf_counter()
    records = [RequestRecord(index=i, warmup=True) for i in range(len(warmups))]
    await asyncio.gather(
        *(
            send(client, w, r, model=model, endpoint=load.endpoint, t0=t0)
            for w, r in zip(warmups, records)
        )
    )
    return records


async def run_load(
    base_url: str,
    model: str,
    requests: Sequence[Request],
    load: LoadSpec,
    *,
    warmups: Sequence[Request] = (),
    progress: ProgressFn | None = None,
    sink: RecordSink | None = None,
    should_stop: Callable[[], str | None] | None = None,
    offsets_s: Sequence[float] | None = None,
    on_chunk: ChunkHook | None = None,
) -> LoadResult:
    """Drive ``requests`` through a server following ``load``.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        model: the served model name.
        requests: the measured requests, sent in order.
        load: endpoint, arrival process, concurrency cap, timeout.
        warmups: requests sent (all at once) and awaited before the measured run; excluded.
        progress: called as ``progress(finished, total)`` after each measured request.
        sink: called with each finished measured record (e.g. to append it to a file).
        should_stop: polled while dispatching; a non-``None`` string stops sending new requests
            (the reason ends up in ``LoadResult.stopped_early``); requests not sent are recorded
            as failed with that reason, never dropped.
        offsets_s: explicit send times in seconds from the run start, one per request
            (non-decreasing), replacing ``load``'s arrival process (rate, burstiness, seed), e.g.
            to replay a trace or another tool's exact schedule.
        on_chunk: called with a measured request's record after each token-carrying chunk, on
            the event loop that times the requests (keep it cheap; see :func:`client.send`).

    Returns:
        A :class:`LoadResult`; failed requests stay in it with ``error`` set.
    """
    cap = load.max_concurrency
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap,
                          keepalive_expiry=KEEPALIVE_EXPIRY_S)
    timeout = httpx.Timeout(load.timeout_s, connect=30.0)
    if offsets_s is None:
        offsets = schedule(len(requests), load.rate_rps, load.burstiness, load.seed)
    else:
        offsets = [float(t) for t in offsets_s]
        if len(offsets) != len(requests) or any(b < a for a, b in zip(offsets, offsets[1:])):
            raise ValueError("offsets_s needs one non-decreasing send time per request")
    records = [RequestRecord(index=i, scheduled_s=float(t)) for i, t in enumerate(offsets)]
    # As vllm bench serve does (freeze_gc_heap): move everything alive now out of the collector's
    # reach, so a full collection over a large heap cannot stall the event loop mid-run and
    # make requests leave late.
    gc.collect()
    gc.freeze()
    try:
        return await _drive(base_url, model, requests, load, records, offsets, limits, timeout,
                            warmups, progress, sink, should_stop, on_chunk)
    finally:
        gc.unfreeze()


async def _drive(base_url, model, requests, load, records, offsets, limits, timeout, warmups,
                 progress, sink, should_stop, on_chunk=None) -> LoadResult:  # noqa: PLR0913
    """The body of :func:`run_load` (see there)."""
    cap = load.max_concurrency
    semaphore = asyncio.Semaphore(cap) if cap else None
    done = 0
    sunk: set[int] = set()   # indices already handed to the sink

    async def timed_send(i: int, t0: float) -> None:
        coro = send(client, requests[i], records[i], model=model, endpoint=load.endpoint, t0=t0,
                    on_chunk=on_chunk)
        try:
            await asyncio.wait_for(coro, load.timeout_s)
        except asyncio.TimeoutError:
            records[i].error = f"timeout: no complete response within {load.timeout_s:g} s"

    async def one(i: int, t0: float) -> None:
        nonlocal done
        records[i].dispatched_s = time.perf_counter() - t0
        if semaphore is None:
            await timed_send(i, t0)
        else:
            async with semaphore:
                await timed_send(i, t0)
        done += 1
        if sink is not None:
            sunk.add(i)
            sink(records[i])
        if progress is not None:
            progress(done, len(requests))

    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:
        warm = await warm_up(client, warmups, load, model) if warmups else []
        result = LoadResult(records=records, warmup_records=warm, started_at=time.time())
        t0 = result.t0 = time.perf_counter()
        tasks: list[asyncio.Task] = []
        try:
            for i, offset in enumerate(offsets):
                reason = should_stop() if should_stop is not None else None
                if reason:
                    result.stopped_early = reason
                    for r in records[i:]:
                        r.error = f"not sent: {reason}"
                        if sink is not None:
                            sunk.add(r.index)
                            sink(r)
                    break
                delay = t0 + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i, t0)))
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for r in records:
                if (r.end_s is None and r.error is None) or r.error == "cancelled":
                    r.error = "cancelled: the run was interrupted"
                if sink is not None and r.index not in sunk:   # nothing is silently dropped
                    sunk.add(r.index)
                    sink(r)
            raise
        finally:
            ends = [r.end_s for r in records if r.end_s is not None]
            result.duration_s = max(ends) if ends else time.perf_counter() - t0
    return result

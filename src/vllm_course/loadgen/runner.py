"""The async load generator: an arrival schedule and an optional concurrency cap
(:func:`run_load`), and the one warm-up path (:func:`warm_up`, sent before a measured run on
connections of its own).

``await run_load(...)`` works in a notebook cell as well as under ``asyncio.run``. It prints
nothing: progress goes to an optional callback, finished records to an optional sink (so a caller
can save partial results as they arrive).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Sequence

from vllm_course.config import LoadSpec
from vllm_course.loadgen import workers
from vllm_course.loadgen.arrivals import schedule
from vllm_course.loadgen.client import open_session, send
from vllm_course.loadgen.drive import (
    LoadHooks,
    LoadResult,
    ProgressFn,
    RecordSink,
    WorkerStats,
    _Drive,
)
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

__all__ = ["LoadHooks", "LoadResult", "ProgressFn", "RecordSink", "WorkerStats", "run_load",
           "warm_up"]

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
    async with open_session(load.timeout_s) as session:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                send(session, base_url, w, r, model=model, endpoint=load.endpoint, t0=t0)
                for w, r in zip(warmups, records, strict=True)
            )
        )
    return records


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
        load: endpoint, arrival process, concurrency cap, timeout, worker processes
            (``workers``: :mod:`vllm_course.loadgen.workers`; default: one on a machine with
            fewer than 8 cores) (``num_warmups`` is read by the caller that sends them, not
            here).
        offsets_s: explicit send times in seconds from the run start, one per request
            (non-decreasing), replacing ``load``'s arrival process (rate, burstiness, seed), e.g.
            to replay a trace or another tool's exact schedule.
        hooks: progress, sink, stop and per-chunk callbacks (:class:`LoadHooks`).

    Returns:
        A :class:`LoadResult`; failed requests stay in it with ``error`` set.

    Raises:
        ValueError: if ``offsets_s`` is not one non-decreasing time per request, ``base_url``
            is an empty list, or ``load.workers`` > 1 comes with an ``on_chunk`` hook.
        WorkerError: a worker process failed (its records are marked failed and sunk first).
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
    hooks = hooks or LoadHooks()
    count = workers.resolve_workers(len(requests), load, hooks,
                                    workers.offered_events_per_s(requests, offsets))
    if count > 1:
        return await workers.run_in_workers(urls, model, requests, load, offsets, records,
                                            hooks, count)
    drive = _Drive(model, requests, load, records, hooks)
    # As vllm bench serve does (freeze_gc_heap): move everything alive now out of the collector's
    # reach, so a full collection over a large heap cannot stall the event loop mid-run and
    # make requests leave late; and no cyclic collection at all while the run lasts (reference
    # counting still frees what a request leaves behind), as AIPerf's workers do.
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return await drive.run(urls, offsets)
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()

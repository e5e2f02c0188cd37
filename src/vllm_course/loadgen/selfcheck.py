"""Client self-checks: is the load generator itself keeping up?

A Python client on a busy machine can become the bottleneck: its event loop wakes up late, so
requests leave after their scheduled time and chunks are read late (TTFT and ITL then include
the client's delay). Four measurements say whether that happened:

* **event-loop lag**: a task asks to sleep :data:`LAG_PROBE_S` and records how late it wakes up
  (ms);
* **send lag**: ``dispatched_s - scheduled_s`` of each request, how late the load generator
  released it compared with the arrival schedule (ms); waiting for a ``max_concurrency`` slot is
  not lag and is reported apart as ``slot_wait_ms``;
* **client CPU**: CPU time of this process per second of the run (1.0 = one core busy), and
  per streamed token (µs);
* **bunching**: the share of inter-token gaps that are exactly 0: the token arrived in the same
  read of the socket as the one before it. vLLM sends one event per stream per engine step, so
  two in one read waited for the client (the client reads each stream as its bytes arrive and
  stamps the read, :mod:`vllm_course.loadgen.client`).

The client is flagged as limiting the run (:attr:`ClientChecks.saturated`) when its CPU use is
above :data:`CLIENT_CPU_CORES`, or when its loop or its sends were late or its reads bunched
(P90 loop lag above :data:`LOOP_LAG_P90_MS`, P50 send lag above :data:`SEND_LAG_P50_MS` and
above :data:`SEND_LAG_TTFT_SHARE` of the mean TTFT, bunched share above :data:`BUNCHED_SHARE`)
while it was busy (CPU at least :data:`CLIENT_BUSY_CORES`). A run spread over worker processes
(``load.workers``) is judged by its busiest worker: each is one Python thread. The thresholds
look at the typical probe and request, not the worst: on a small shared machine the OS now and
then stalls every process for a few hundred ms, server included, and that is not the client
limiting the run (on the 2-vCPU CI machine, 2026-12-05, a separate process doing nothing but
this probe for 5 minutes beside the CI's vLLM servers woke up to 1.6 s late, P99 1.8 ms, with
no CPU time used and no steal time in ``/proc/stat`` during the stalls: the OS did not run
it. The servers' scheduling groups then had the client's priority; since they run at nice 5
as a group too (:mod:`vllm_course.server.process`), the same probe beside a whole CI run, 25
minutes on 2026-12-07, woke at most 69 ms late, 20 ms or more 4 times in 147,507 probes, P99
1.1 ms). A late but idle client was starved by other processes; both cases are reported
in :attr:`ClientChecks.notes` instead. Set from runs on the 2-core CI machine against the tiny
CPU model: a healthy client at 4 req/s had P90 loop lag <= 1.3 ms and P50 send lag <= 1 ms (P99
loop lag up to 141 ms from OS stalls); a client doing 5 ms of work per chunk at 10 req/s had P90
loop lag 784 ms and P50 send lag 320 ms.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from vllm_course.loadgen.drive import LoadResult
from vllm_course.metrics import Dist, ttft_s
from vllm_course.records import RequestRecord

LAG_PROBE_S = 0.01
"""The loop-lag probe's sleep (s)."""
LOOP_LAG_P90_MS = 20.0
"""P90 event-loop lag above this (ms): the loop was late for chunks and sends much of the time."""
SEND_LAG_P50_MS = 20.0
"""P50 send lag above this (ms): most requests left measurably later than scheduled."""
SEND_LAG_TTFT_SHARE = 0.10
"""...and above this share of the mean TTFT: a burst of thousands of requests takes the client
a second to launch, which does not matter when they then queue for tens of seconds (measured on
the H200: 2,000 requests at once, send lag P50 721 ms, mean TTFT 38.7 s)."""
CLIENT_BUSY_CORES = 0.5
"""A late loop or late sends count as the client's own limit only if it used at least this much
CPU (cores); a late client that was mostly idle was starved by other processes (a note)."""
STALL_RECORD_MS = 20.0
"""A loop-lag probe this late (ms) or later is kept as a stall interval
(:attr:`ClientChecks.stalls_s`), so that a late send can be matched with the stall that held it."""
STALL_NOTE_MS = 50.0
"""A P99 loop lag above this (ms) without saturation is noted as sporadic stalls."""
CLIENT_CPU_CORES = 0.9
"""Client CPU above this (cores) means the single-threaded client is near its limit."""
BUNCHED_SHARE = 0.05
"""A busy client whose share of bunched inter-token gaps is above this was reading behind the
streams. On the H200 host's cores (``benchmarks/client_ceiling.py``, 2026-12-03) one client
process bunched 0-0.2 % of the gaps while it kept up (up to 77 % of a core) and 23-74 % once
it was at a full core."""
WORKERS_HINT = "spread the client over more processes: load.workers"


def _cores(v: float | None) -> str:
    return "CPU not measured" if v is None else f"{v:.2f} cores"


class LoopLagMonitor:
    """Measures the event loop's lag and this process's CPU use while a run goes on.

    Use as ``async with LoopLagMonitor() as lag: ...``; afterwards ``lag.lags_ms`` holds one
    sample per probe (ms late), ``lag.stalls`` the ``(start, end)`` times
    (``time.perf_counter()``, s) of every probe at least :data:`STALL_RECORD_MS` late: the loop
    could run no timer from when the probe was due until it woke, ``lag.cpu_cores`` the
    process's CPU use (cores) and ``lag.cpu_s`` its CPU time (s).
    """

    def __init__(self, probe_s: float = LAG_PROBE_S):
        self.probe_s = probe_s
        self.lags_ms: list[float] = []
        self.stalls: list[tuple[float, float]] = []
        self.cpu_cores: float | None = None
        self.cpu_s: float | None = None
        self._task: asyncio.Task | None = None
        self._start: tuple[float, float] = (0.0, 0.0)

    async def _probe(self) -> None:
        while True:
            due = time.perf_counter() + self.probe_s
            await asyncio.sleep(self.probe_s)
            woke = time.perf_counter()
            late_ms = max(0.0, (woke - due) * 1000.0)
            self.lags_ms.append(late_ms)
            if late_ms >= STALL_RECORD_MS:
                self.stalls.append((due, woke))

    async def __aenter__(self) -> LoopLagMonitor:
        self._start = (time.perf_counter(), time.process_time())
        self._task = asyncio.create_task(self._probe())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        wall = time.perf_counter() - self._start[0]
        self.cpu_s = time.process_time() - self._start[1]
        if wall > 0:
            self.cpu_cores = self.cpu_s / wall


class ClientChecks(BaseModel):
    """The client's view of itself during a run (times in ms, CPU in cores).

    Attributes:
        loop_lag_ms: event-loop lag probes.
        send_lag_ms: ``dispatched_s - scheduled_s`` per measured request.
        slot_wait_ms: ``sent_s - dispatched_s`` per measured request: time spent waiting for a
            ``max_concurrency`` slot (0 without a cap).
        cpu_cores: the client's CPU use during the run (cores); over worker processes, the
            busiest worker's.
        workers: client processes the run was spread over.
        cpu_us_per_token: client CPU time per output token received (µs), all processes.
        bunched_share: share of inter-token gaps that were exactly 0 (the token came in the
            same read as the one before it; ``None``: no gaps).
        stalls_s: ``(start, end)`` of each event-loop stall of at least :data:`STALL_RECORD_MS`,
            in s on the records' clock (since the run's start): no send or chunk could be
            handled in between, whether the OS paused the process or the client itself was busy.
        saturated: True if a threshold was crossed: the client, not the server, limited the run.
        reasons: the crossed thresholds, with numbers, for a person.
        notes: milder observations (sporadic stalls of the whole machine), for a person.
    """

    model_config = ConfigDict(frozen=True)
    loop_lag_ms: Dist
    send_lag_ms: Dist
    slot_wait_ms: Dist
    cpu_cores: float | None = None
    workers: int = 1
    cpu_us_per_token: float | None = None
    bunched_share: float | None = None
    stalls_s: list[tuple[float, float]] = Field(default_factory=list)
    saturated: bool = False
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def limited_sentence(reasons: Sequence[str], whose: str = "this run") -> str:
    """The sentence that names the client, not the server, as what limited ``whose`` run, with
    the self-checks' ``reasons`` (:attr:`ClientChecks.reasons`, or a results file's
    ``client_limited``): its latencies include the client's own delay."""
    return (f"the client, not the server, limited {whose} ({'; '.join(reasons)}): its "
            "latencies include the client's delay")


def judge(
    loop_lag_ms: Dist, send_lag_ms: Dist, cpu_cores: float | None, mean_ttft_ms: float | None,
    bunched_share: float | None = None,
) -> tuple[list[str], list[str]]:
    """Apply the thresholds to a run's self-check statistics.

    Args:
        loop_lag_ms: event-loop lag probes (ms).
        send_lag_ms: send lag per request (ms).
        cpu_cores: the client's CPU use (cores), or ``None`` if not measured (lateness alone
            then decides).
        mean_ttft_ms: the run's mean TTFT (ms), for the send-lag threshold; ``None`` if unknown.
        bunched_share: share of bunched inter-token gaps (``None``: not measured).

    Returns:
        ``(reasons, notes)``: the client limited the run if ``reasons`` is not empty.
    """
    lag, send = loop_lag_ms, send_lag_ms
    late = []
    if lag.p90 is not None and lag.p90 > LOOP_LAG_P90_MS:
        late.append(
            f"event-loop lag P90 {lag.p90:.0f} ms > {LOOP_LAG_P90_MS:.0f} ms "
            f"(P99 {lag.p99:.0f} ms, max {lag.max:.0f} ms over {lag.n} probes)"
        )
    send_limit = max(SEND_LAG_P50_MS, SEND_LAG_TTFT_SHARE * (mean_ttft_ms or 0.0))
    if send.p50 is not None and send.p50 > send_limit:
        late.append(
            f"requests left late: send lag P50 {send.p50:.0f} ms > {send_limit:.0f} ms "
            f"(P90 {send.p90:.0f} ms over {send.n} requests)"
        )
    if bunched_share is not None and bunched_share > BUNCHED_SHARE:
        late.append(
            f"{bunched_share:.0%} of inter-token gaps were 0 (tokens read in one gulp with the "
            f"one before) > {BUNCHED_SHARE:.0%}: the client read behind the streams"
        )
    busy = cpu_cores is None or cpu_cores >= CLIENT_BUSY_CORES
    reasons = list(late) if busy else []
    if cpu_cores is not None and cpu_cores > CLIENT_CPU_CORES:
        reasons.append(
            f"client CPU {cpu_cores:.2f} cores > {CLIENT_CPU_CORES} "
            "(one Python thread is the limit)"
        )
    elif busy and late and cpu_cores is not None:
        reasons.append(f"client CPU {cpu_cores:.2f} cores >= {CLIENT_BUSY_CORES}")
    notes = []
    if late and not busy:
        # a loop-lag P90 within bounds can hide a few long stalls: they are what late sends and
        # bunched tokens come from, so name the longest
        stalled = (lag.p90 is not None and lag.p90 <= LOOP_LAG_P90_MS and lag.max is not None
                   and lag.max > STALL_NOTE_MS)
        notes.append(
            "the client ran late while using little CPU "
            f"({_cores(cpu_cores)}"
            + (f"; its event loop stalled for up to {lag.max / 1000:.1f} s" if stalled else "")
            + "): the OS gave its time to other processes (the server included), so requests "
            "in flight then were timed late: " + "; ".join(late)
        )
    elif not reasons and lag.p99 is not None and lag.p99 > STALL_NOTE_MS:
        notes.append(
            f"sporadic stalls: event-loop lag P99 {lag.p99:.0f} ms, max {lag.max:.0f} ms (the OS "
            "paused this process now and then; requests in flight then were timed late)"
        )
    return reasons, notes


def held_by_stall(start_s: float, end_s: float, stalls_s: Sequence[tuple[float, float]],
                  slack_s: float) -> bool:
    """Whether a delay from ``start_s`` to ``end_s`` (e.g. a request's scheduled and actual send
    times, s) is explained by event-loop stalls: it is shorter than ``slack_s``, or stalls (of
    :attr:`ClientChecks.stalls_s`; those less than ``slack_s`` apart count as one, the loop ran
    only a moment between them) held the loop from ``start_s + slack_s`` to ``end_s - slack_s``.
    A delay this says False to was added while the loop was free to run."""
    if end_s - start_s < slack_s:
        return True
    merged: list[list[float]] = []
    for a, b in sorted(stalls_s):
        if merged and a - merged[-1][1] <= slack_s:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return any(a <= start_s + slack_s and b >= end_s - slack_s for a, b in merged)


def bunched_share(records: Sequence[RequestRecord]) -> float | None:
    """The share of inter-token gaps (between token chunks of one measured request) that are
    exactly 0: the later chunk came in the same read as the one before (``None``: no gaps)."""
    gaps = zeros = 0
    for r in records:
        if r.warmup:
            continue
        times = r.chunk_s
        gaps += max(0, len(times) - 1)
        zeros += sum(1 for a, b in zip(times, times[1:], strict=False) if b == a)
    return zeros / gaps if gaps else None


def client_checks(
    records: Sequence[RequestRecord],
    lags_ms: Sequence[float],
    cpu_cores: float | None,
    stalls_s: Sequence[tuple[float, float]] = (),
    *,
    cpu_s: float | None = None,
    workers: int = 1,
) -> ClientChecks:
    """Summarise a run's self-checks and decide (:func:`judge`) whether the client limited it.

    Args:
        records: the run's records (warmups are ignored; records without ``dispatched_s`` are
            left out of the send-lag and slot-wait samples).
        lags_ms: event-loop lag samples (ms), e.g. ``LoopLagMonitor.lags_ms`` (of every worker).
        cpu_cores: the client's CPU use (cores; over workers, the busiest one's), or ``None``
            if not measured.
        stalls_s: event-loop stalls ``(start, end)`` in s since the run's start (the
            records' clock), e.g. ``LoopLagMonitor.stalls`` minus the run's ``t0``.
        cpu_s: the client's CPU time over the run (s, all processes), for the CPU per token.
        workers: client processes the run was spread over.
    """
    measured = [r for r in records if not r.warmup and r.dispatched_s is not None]
    send_lag = Dist.of([max(0.0, r.dispatched_s - r.scheduled_s) * 1000.0 for r in measured])
    slot = Dist.of([
        max(0.0, r.sent_s - r.dispatched_s) * 1000.0 for r in measured if r.sent_s is not None
    ])
    lag = Dist.of(list(lags_ms))
    ttfts = [t for r in records if not r.warmup and (t := ttft_s(r)) is not None]
    mean_ttft_ms = 1000.0 * sum(ttfts) / len(ttfts) if ttfts else None
    bunched = bunched_share(records)
    tokens = sum(sum(r.chunk_tokens) for r in records if not r.warmup)
    reasons, notes = judge(lag, send_lag, cpu_cores, mean_ttft_ms, bunched)
    return ClientChecks(
        loop_lag_ms=lag,
        send_lag_ms=send_lag,
        slot_wait_ms=slot,
        cpu_cores=cpu_cores,
        workers=workers,
        cpu_us_per_token=cpu_s / tokens * 1e6 if cpu_s is not None and tokens else None,
        bunched_share=bunched,
        stalls_s=[(round(a, 4), round(b, 4)) for a, b in stalls_s],
        saturated=bool(reasons),
        reasons=reasons,
        notes=notes,
    )


def run_checks(result: LoadResult, lag: LoopLagMonitor) -> ClientChecks:
    """The self-checks of one :func:`~vllm_course.loadgen.run_load` result: judged on this
    process's event loop (``lag``, the monitor that watched the run), or, for a run spread over
    worker processes (``result.workers``), on theirs: the parent only waited for them."""
    if not result.workers:
        return client_checks(result.records, lag.lags_ms, lag.cpu_cores,
                             [(a - result.t0, b - result.t0) for a, b in lag.stalls],
                             cpu_s=lag.cpu_s)
    ws = result.workers
    cores = [w.cpu_cores for w in ws if w.cpu_cores is not None]
    cpu = [w.cpu_s for w in ws if w.cpu_s is not None]
    return client_checks(result.records, [x for w in ws for x in w.lags_ms],
                         max(cores) if cores else None,
                         sorted((a - result.t0, b - result.t0) for w in ws for a, b in w.stalls),
                         cpu_s=sum(cpu) if cpu else None, workers=len(ws))

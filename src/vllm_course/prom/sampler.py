"""The background scraper: :class:`Sampler` reads ``/metrics`` every interval during a run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from vllm_course.prom.snapshot import Snapshot, scrape
from vllm_course.prom.timeseries import TimeSeries, time_series
from vllm_course.prom.window import ServerMetrics, summarize_window

Telemetry = Callable[[], dict[str, float]]


class Sampler:
    """Scrapes ``/metrics`` every ``interval_s`` seconds in the background while a run goes on.

    Use as ``async with Sampler(base_url) as sampler: ...``; ``sampler.before``,
    ``sampler.after`` and ``sampler.samples`` hold the snapshots. A failed scrape during the run
    is skipped (the server may be busy or gone; the run itself reports that). Set
    ``expect_generation_tokens`` before leaving the block to make the final scrape wait (up to
    ``settle_s`` seconds) until the server has counted that many generated tokens. ``telemetry``, if
    given, is called at every scrape and its values stored in ``Snapshot.telemetry`` (e.g.
    :class:`vllm_course.env.telemetry.Telemetry`: GPU or server CPU use).
    """

    def __init__(self, base_url: str, interval_s: float = 1.0, telemetry: Telemetry | None = None):
        self.base_url = base_url
        self.interval_s = interval_s
        self.telemetry = telemetry
        self.before: Snapshot | None = None
        self.after: Snapshot | None = None
        self.samples: list[Snapshot] = []
        self._client = httpx.AsyncClient(base_url=base_url, timeout=10.0)
        self._task: asyncio.Task | None = None
        self.expect_generation_tokens: float | None = None
        self.settle_s = 5.0

    async def _scrape(self) -> Snapshot:
        snap = await scrape(self._client)
        if self.telemetry is not None:
            snap.telemetry = await asyncio.to_thread(self.telemetry)
        return snap

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.samples.append(await self._scrape())
            except httpx.HTTPError:
                continue

    async def __aenter__(self) -> Sampler:
        self.before = await self._scrape()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            self.after = await self._final_scrape()
        except httpx.HTTPError:
            self.after = None
        await self._client.aclose()

    async def _final_scrape(self) -> Snapshot:
        """The last scrape; with :attr:`expect_generation_tokens` set, scrape again (every 0.2 s,
        up to :attr:`settle_s`) until ``vllm:generation_tokens_total`` has counted them: vLLM's
        API server updates its counters after it has streamed a step's tokens, and on a busy
        machine that can lag the client by a second or more."""
        snap = await self._scrape()
        expected = self.expect_generation_tokens
        if expected is None or self.before is None:
            return snap
        start = self.before.get("vllm:generation_tokens_total")
        deadline = time.monotonic() + self.settle_s
        while (
            start is not None
            and (now := snap.get("vllm:generation_tokens_total")) is not None
            and now - start < expected
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.2)
            snap = await self._scrape()
        return snap

    def summary(
        self, window: tuple[float, float] | None = None, duration_s: float | None = None
    ) -> ServerMetrics | None:
        """The window's :class:`ServerMetrics`, or ``None`` if the final scrape failed.

        Args:
            window: (start, end) wall-clock times (``time.time()``, s) of the run: only scrapes
                that arrived inside it count as in-run samples. A scrape that arrived after the
                last request ended (a starved client may read one late) saw a drained server.
            duration_s: the run's length (s), for the time-averaged running and waiting
                requests (:attr:`ServerMetrics.running_time_avg`).
        """
        if self.before is None or self.after is None:
            return None
        during = self.samples
        if window is not None:
            start, end = window
            during = [s for s in during if start <= s.t <= end]
        return summarize_window(self.before, self.after, during, self.interval_s, duration_s)

    def series(self, start_t: float) -> TimeSeries:
        """Every scrape as a :class:`TimeSeries` with times relative to ``start_t``
        (``time.time()`` of the run start)."""
        snaps = [s for s in (self.before, *self.samples, self.after) if s is not None]
        return time_series(snaps, start_t, self.interval_s)

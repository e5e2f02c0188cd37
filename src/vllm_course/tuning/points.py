"""What sweeps, SLO searches and compares share about their points: the plan and time
estimates, the pool they own, the flag check before any start, and a point's data-frame row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from vllm_course import plots
from vllm_course.config import RunConfig, ServerConfig, SyntheticWorkload
from vllm_course.env import machine
from vllm_course.results import RunResult
from vllm_course.server import ServerPool
from vllm_course.tuning.cache import ResultCache, effective_args
from vllm_course.tuning.progress import format_duration

POINT_OVERHEAD_S = 3.0
"""Seconds a point costs beyond its requests (warmup, metric scrapes, plots), for estimates."""


def estimate_point_s(config: RunConfig, device: str = "cpu") -> float:
    """A rough duration of one point in seconds, for the plan and the first ETA.

    Requests over the rate for a finite rate; otherwise output tokens over a guessed
    throughput (CPU: 200 tok/s per request in flight up to 1,000 tok/s; GPU: 100 up to
    5,000), plus :data:`POINT_OVERHEAD_S`. The ETA shown while running is rescaled by
    measured point times (:class:`~vllm_course.tuning.progress.Eta`).
    """
    wl = config.workload
    n = getattr(wl, "num_requests", None) or getattr(wl, "limit", None) or 100
    out_len = wl.output_len if isinstance(wl, SyntheticWorkload) else 64
    load = config.load
    if math.isfinite(load.rate_rps):
        return n / load.rate_rps + POINT_OVERHEAD_S
    per_stream, ceiling = (200.0, 1000.0) if device == "cpu" else (100.0, 5000.0)
    in_flight = min(n, load.max_concurrency or n)
    return n * out_len / min(per_stream * in_flight, ceiling) + POINT_OVERHEAD_S


def estimate_start_s(device: str = "cpu", eager: bool = False) -> float:
    """A server start in seconds: measured ~49 s on the course's 2-core CPU machine (~32 s with
    ``--enforce-eager``, benchmarks/server_start.py), ~120 s on the H200 (reference/h200/demo)."""
    if device == "cpu":
        return 32.0 if eager else 49.0
    return 60.0 if eager else 120.0


def point_seconds(elapsed_s: float, result: RunResult, started_server: bool) -> float:
    """Seconds a point's own run took, for the ETA: ``elapsed_s`` less its server's start
    (``result.startup.ready_s``, s) when this point started that server. The ETA rescales
    the point estimates by measured point times, so a 30-50 s start counted in a ~3 s point
    would inflate every later estimate ~10x."""
    if started_server:
        elapsed_s -= result.startup.ready_s or 0.0
    return max(elapsed_s, 0.0)


@dataclass(frozen=True)
class Plan:
    """What a sweep (or compare) will do, known before anything starts.

    Attributes:
        server_starts: servers to start (settings with at least one missing point).
        points: points in all.
        cached: points already in the cache (read, not run).
        estimate_s: rough time of the work left in seconds.
        starts: labels of the settings that need a server.
    """

    server_starts: int
    points: int
    cached: int
    estimate_s: float
    starts: tuple[str, ...] = ()

    def __str__(self) -> str:
        run = self.points - self.cached
        return (f"{self.server_starts} server start(s), {self.points} point(s): {run} to run, "
                f"{self.cached} from the cache; ~{format_duration(self.estimate_s)}")


_P = TypeVar("_P", bound=BaseModel)


def save_json(result: BaseModel, folder: str | Path, filename: str) -> Path:
    """Write ``result`` as indented JSON to ``folder/filename`` (``sweep.json``, ``slo.json``,
    ``compare.json``); returns the path."""
    path = Path(folder) / filename
    path.write_text(result.model_dump_json(indent=2) + "\n")
    return path


def save_figure(draw, path: str | Path, size: tuple[float, float] = (6.0, 3.8)) -> None:
    """Draw with ``draw(ax)`` on a new figure (no pyplot state) and save it as a PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, constrained_layout=True)
    draw(fig.subplots())
    fig.savefig(path, dpi=110)


def with_runs(points: Sequence[_P]) -> list[_P]:
    """``points`` (sweep or SLO-search points, each with ``path`` and an excluded ``result``)
    with every ``result`` read back from its run folder, where that folder has a
    ``summary.json``; the others unchanged."""
    return [p.model_copy(update={"result": RunResult.load(p.path)})
            if p.path and (Path(p.path) / "summary.json").is_file() else p
            for p in points]


def point_row(result: RunResult | None, **fields: Any) -> dict[str, Any]:
    """The numbers of one run for a data frame row, after ``fields`` (e.g. setting, level)."""
    s = result.summary if result is not None else None
    m = result.server_metrics if result is not None else None
    row = dict(fields)
    row.update(
        completed=s.completed if s else None,
        failed=s.failed if s else None,
        duration_s=s.duration_s if s else None,
    )
    for name in ("request_throughput_rps", "output_throughput_tok_s", "total_throughput_tok_s",
                 "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p99_itl_ms",
                 "p50_e2el_ms", "p99_e2el_ms", "goodput_rps"):
        row[name] = plots.metric_value(s, name)
    row["preemptions"] = m.preemptions if m else None
    row["kv_cache_usage_peak"] = m.kv_cache_usage_peak if m else None
    return row


def own_pool(max_live: int = 1) -> ServerPool:
    """A pool for one sweep, SLO search or compare, with the profile's flags, keeping at most
    ``max_live`` servers (capped at the profile's limit); the caller closes it."""
    profile = machine.current_profile()
    return ServerPool(max_live=max(1, min(max_live, profile.max_live_servers)),
                      profile_args=profile.server_args)


def device() -> str:
    """``cpu`` or ``gpu``, for the time estimates."""
    return "cpu" if machine.current_profile().device == "cpu" else "gpu"


def make_plan(configs: Sequence[tuple[str, RunConfig]], cached: Sequence[bool],
              profile_args: dict, live: set[str], cache: ResultCache | None) -> Plan:
    """The :class:`Plan` of ``(label, config)`` points of which ``cached`` ones need no run.

    A server needs a start if one of its points is missing and no server with its exact
    settings is ``live`` (keys of :func:`live_keys`); labels with identical settings share one.
    A start is estimated from a cached point's measured ``ready_s`` where there is one
    (:func:`estimate_start_s` otherwise).
    """
    dev = device()
    starts: dict[str, tuple[str, float]] = {}   # server key -> (first label, seconds)
    estimate = 0.0
    for (label, config), hit in zip(configs, cached, strict=True):
        if hit:
            continue
        estimate += estimate_point_s(config, dev)
        key = config.server.key()
        if key not in live and key not in starts:
            eager = bool(effective_args(config.server, profile_args).get("enforce-eager"))
            starts[key] = (label, _measured_start(configs, label, profile_args, cache)
                           or estimate_start_s(dev, eager))
    return Plan(len(starts), len(configs), sum(cached),
                estimate + sum(s for _, s in starts.values()),
                tuple(label for label, _ in starts.values()))


def _measured_start(configs, label, profile_args, cache) -> float | None:
    if cache is None:
        return None
    for other_label, config in configs:
        if other_label == label:
            hit = cache.get(config, profile_args)
            if hit is not None and hit.startup.ready_s:
                return float(hit.startup.ready_s)
    return None


def check_server_flags(configs: Sequence[ServerConfig], pool: ServerPool) -> None:
    """Check every server's flags, names and values, against the installed vLLM before anything
    starts (:func:`vllm_course.server.check_config`, with ``pool``'s profile flags).

    Raises:
        UnknownFlagError: naming the bad flag and the closest real ones (nothing launched).
        ServerError: ``cause="bad_value"``, naming a bad value and what it must be.
    """
    from vllm_course import server as servers

    for config in configs:
        servers.check_config(config, pool.profile_args)


def live_keys(pool: ServerPool | None) -> set[str]:
    """Settings keys (:meth:`ServerConfig.key`) of the servers live in ``pool``."""
    return {s.config.key() for s in pool.servers} if pool is not None else set()

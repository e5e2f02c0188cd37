"""Sweeps: a grid of server settings x load levels, one server start per setting, cached points.

``await sweep(spec)`` runs every load level of every server setting (request rates or
concurrency caps) with the same workload. Finished points come from the result cache
(:mod:`vllm_course.tuning.cache`): a rerun costs seconds and starts no server, an interrupted sweep
resumes where it stopped, and a server is started only if one of its points is missing.
Graded lab runs pass ``cache=None``.

Results go to ``results/<name>-<time>/``: ``sweep.json`` (the spec and every point's folder)
and ``latency_throughput.png``; each point is a normal run folder (in the cache, or under the
sweep folder without a cache).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_course import plots
from vllm_course.config import RunConfig, SyntheticWorkload
from vllm_course.env import machine
from vllm_course.results import RunResult
from vllm_course.server import ServerError, ServerPool, UnknownFlagError
from vllm_course.tuning.cache import (
    ResultCache,
    client_warning,
    open_cache,
    prefix_warning,
    run_cached,
)
from vllm_course.tuning.points import (
    Plan,
    check_server_flags,
    device,
    estimate_point_s,
    estimate_start_s,
    live_keys,
    make_plan,
    own_pool,
    point_row,
    point_seconds,
    save_json,
    with_runs,
)
from vllm_course.tuning.progress import Eta, Step, StepFn, print_steps
from vllm_course.tuning.spec import SettingsSpec
from vllm_course.workload import WorkloadError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

LevelKind = Literal["rate_rps", "max_concurrency"]

class SweepSpec(SettingsSpec):
    """A grid of server settings x load levels on one workload.

    Attributes:
        servers: ``{label: ServerConfig}`` (a list is accepted; labels are then made from the
            flags, e.g. ``max-num-seqs=8``).
        rate_rps: request rates (req/s; ``.inf`` sends everything at once), or
        max_concurrency: concurrency caps (closed loop; the base load's rate, default inf).
            Exactly one of the two is given.
        duration_s: bound each rate point by time instead of by the workload's request count:
            ``ceil(rate x duration_s)`` requests (synthetic workloads and finite rates only).

    Every point sends the workload's prompts to a server whose prefix cache was just emptied
    (``load.reset_prefix_cache``, on by default).
    """

    name: str = "sweep"
    rate_rps: list[float] | None = None
    max_concurrency: list[int] | None = None
    duration_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_kind_of_level(self) -> SweepSpec:
        given = [k for k in ("rate_rps", "max_concurrency") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one non-empty list of load levels: rate_rps "
                             "(req/s) or max_concurrency (requests in flight)")
        levels = self.levels
        if any(not v > 0 for v in levels) or len(set(levels)) != len(levels):
            raise ValueError(f"load levels must be distinct and > 0, got {levels}")
        if self.duration_s is not None and (
            given[0] != "rate_rps" or not isinstance(self.workload, SyntheticWorkload)
            or not all(math.isfinite(r) for r in levels)
        ):
            raise ValueError("duration_s bounds rate points of a synthetic workload: give "
                             "finite rate_rps levels, or leave duration_s out and bound each "
                             "point by workload.num_requests")
        return self

    @property
    def level_kind(self) -> LevelKind:
        """``rate_rps`` or ``max_concurrency``: which load field the levels set."""
        return "rate_rps" if self.rate_rps else "max_concurrency"

    @property
    def levels(self) -> list[int | float]:
        """The load levels, in the order given."""
        return list(self.rate_rps or self.max_concurrency or [])

    def point_config(self, label: str, level: float) -> RunConfig:
        """The run of one point: server ``label`` at load ``level``."""
        tag = ("r" if self.level_kind == "rate_rps" else "c") + f"{level:g}"
        config = self.run_config(f"{self.name}-{label}-{tag}", self.servers[label],
                                 **{self.level_kind: level})
        if self.duration_s is not None:
            n = max(1, math.ceil(level * self.duration_s))
            config = config.model_copy(
                update={"workload": config.workload.model_copy(update={"num_requests": n})})
        return config


class SweepPoint(BaseModel):
    """One point of a sweep.

    Attributes:
        label: the server setting's label.
        level: the load level (req/s or requests in flight, as the sweep's ``level_kind``).
        cached: True if the result came from the cache.
        error: why the point has no result (its server failed), or ``None``.
        path: the run folder.
        result: the run (not written to ``sweep.json``; read back from ``path``).
    """

    model_config = ConfigDict(frozen=True)
    label: str
    level: int | float
    cached: bool = False
    error: str | None = None
    path: str | None = None
    result: RunResult | None = Field(None, exclude=True)


class SweepResult(BaseModel):
    """A sweep's points, in spec order (settings, then levels)."""

    model_config = ConfigDict(frozen=True)
    spec: SweepSpec
    points: list[SweepPoint]
    plan: str = ""
    server_starts: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    created_at: str = ""
    complete: bool = True
    path: str | None = None

    @property
    def errors(self) -> list[str]:
        """One sentence per point without a result."""
        return [f"{p.label} at {p.level:g}: {p.error}" for p in self.points if p.error]

    def runs(self, label: str | None = None) -> list[RunResult]:
        """The runs of one setting (or all), in level order."""
        return [p.result for p in self.points
                if p.result is not None and (label is None or p.label == label)]

    def by_setting(self) -> dict[str, list[RunResult]]:
        """``{label: runs}`` for :func:`~vllm_course.plots.plot_latency_throughput`."""
        return {label: self.runs(label) for label in self.spec.servers}

    def to_dataframe(self) -> pd.DataFrame:
        """One row per point: setting, level, throughputs (req/s, tok/s), latency percentiles
        (ms), goodput (req/s), server counters, whether it was cached, and its folder."""
        import pandas as pd

        return pd.DataFrame([point_row(p.result, setting=p.label,
                                       **{self.spec.level_kind: p.level}, cached=p.cached,
                                       error=p.error, path=p.path) for p in self.points])

    def plot(self, latency: str = "ttft", stat: str = "p99", ax: Axes | None = None,
             x: str = "output_throughput_tok_s") -> Axes:
        """Latency against throughput, one curve per setting, each point labelled with its load
        level (:func:`~vllm_course.plots.plot_latency_throughput`); the SLO as a dashed line."""
        slo_ms = getattr(self.spec.slo, f"{latency}_ms", None) if self.spec.slo else None
        return plots.plot_latency_throughput(self.by_setting(), latency, stat, ax=ax, x=x,
                                             slo_ms=slo_ms)

    def plot_levels(self, metric: str = "output_throughput_tok_s", ax: Axes | None = None
                    ) -> Axes:
        """``metric`` (any name of :func:`~vllm_course.plots.metric_names`) against the load
        level, one line per setting."""
        ax = _new_ax(ax)
        for label in self.spec.servers:
            pts = [(p.level, plots.metric_value(p.result.summary, metric)) for p in self.points
                   if p.label == label and p.result is not None]
            pts = sorted((x, y) for x, y in pts if y is not None and math.isfinite(x))
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
        ax.set_xlabel("request rate (req/s)" if self.spec.level_kind == "rate_rps"
                      else "max concurrency (requests in flight)")
        ax.set_ylabel(plots.metric_label(metric))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return ax

    def save(self, folder: str | Path) -> Path:
        """Write ``sweep.json`` into ``folder``; returns its path."""
        return save_json(self, folder, "sweep.json")

    @classmethod
    def load(cls, folder: str | Path) -> SweepResult:
        """Read a sweep folder (``sweep.json`` and every point's run folder).

        Raises:
            FileNotFoundError: if the folder has no ``sweep.json``.
        """
        result = cls.model_validate_json((Path(folder) / "sweep.json").read_text())
        return result.model_copy(update={"points": with_runs(result.points),
                                         "path": str(folder)})

    def _repr_html_(self) -> str:
        head = f"<b>Sweep {self.spec.name}</b> <small>{self.path or ''}</small><br>{self.plan}"
        cols = ["setting", self.spec.level_kind, "output_throughput_tok_s", "p99_ttft_ms",
                "p99_tpot_ms", "goodput_rps", "cached"]
        return head + self.to_dataframe()[cols].to_html(index=False, float_format="{:,.1f}".format)


def _new_ax(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(5, 3.5), constrained_layout=True)[1]


def _order(labels: list[str], spec: SweepSpec, pool: ServerPool) -> list[str]:
    """Settings whose server is already live in ``pool`` first (no start, no eviction)."""
    live = {s.config.key() for s in pool.servers}
    return sorted(labels, key=lambda lb: spec.servers[lb].key() not in live)


def plan(
    spec: SweepSpec,
    *,
    pool: ServerPool | None = None,
    cache: ResultCache | str | Path | bool | None = True,
    results_root: str | Path = "results",
) -> Plan:
    """What :func:`sweep` would do now: server starts, points, cached points, a rough time.
    Reads the cache only (never imports vLLM, starts nothing)."""
    store = open_cache(cache, results_root)
    profile_args = pool.profile_args if pool is not None else machine.current_profile().server_args
    configs = [(label, spec.point_config(label, level))
               for label in spec.servers for level in spec.levels]
    cached = [store.has(c, profile_args) if store else False for _, c in configs]
    return make_plan(configs, cached, profile_args, live_keys(pool), store)


async def sweep(
    spec: SweepSpec,
    *,
    pool: ServerPool | None = None,
    cache: ResultCache | str | Path | bool | None = True,
    results_root: str | Path = "results",
    progress: StepFn | None = None,
) -> SweepResult:
    """Run a sweep: every load level of every server setting, one server start per setting.

    Args:
        spec: the grid (see :class:`SweepSpec`).
        pool: servers to use; default a pool of this sweep (one server at a time), stopped when
            it returns or fails. A pool you pass is yours to close.
        cache: ``True`` (default) is ``results_root/cache``; a path or :class:`ResultCache`;
            ``None``/``False`` runs every point and stores nothing (graded labs pass ``None``).
        results_root: where ``<name>-<time>/`` goes.
        progress: called with a :class:`~vllm_course.tuning.progress.Step` for the plan
            (server starts, points, estimated time), each server start and each point (with an
            ETA); default :func:`~vllm_course.tuning.progress.print_steps` (those steps as
            lines on stdout).

    Returns:
        A :class:`SweepResult`. A setting whose server fails to start or dies, or whose
        server cannot take the workload (requests longer than its ``max-model-len``), has its
        remaining points marked with the error (``result.errors``); the other settings run.

    Raises:
        UnknownFlagError: a flag vLLM does not know (checked before any server starts).
        KeyboardInterrupt, asyncio.CancelledError: passed on after ``sweep.json`` is written;
            finished points are in the cache, so running the sweep again resumes.
    """
    store = open_cache(cache, results_root)
    own = pool is None
    pool = pool or own_pool()
    folder = _new_folder(results_root, spec.name)
    emit = progress or print_steps
    run = _Runner(spec, pool, store, folder, emit)
    plan, configs = run.plan, run.configs
    complete = False
    try:
        emit(Step("plan", f"sweep {spec.name}: {plan}", run.done, len(configs), plan.estimate_s))
        if run.missing:
            check_server_flags([spec.servers[lb] for lb in run.missing], pool)
        for label in run.order:
            await run.setting(label)
        complete = True
    finally:
        result = run.result(complete)
        result.save(folder)
        if complete and any(p.result is not None for p in result.points):
            _save_plot(result, folder)
        if own:
            pool.close()
    emit(Step("done", f"sweep {spec.name}: {len(configs)} point(s) in {folder}"
              + (f"; {len(result.errors)} without a result" if result.errors else "")
              + "".join(f"\nwarning: {w}" for w in result.warnings),
              len(configs), len(configs), 0.0))
    return result


class _Runner:
    """The running part of :func:`sweep`: points of one setting after another."""

    def __init__(self, spec: SweepSpec, pool: ServerPool, store: ResultCache | None,
                 folder: Path, emit: StepFn):
        """Read the cache and plan: ``configs`` (one ``(label, RunConfig)`` per point, settings
        in spec order), ``points`` (the cached ones filled in), ``plan``, and ``order`` (the
        settings with points to run, those live in ``pool`` first)."""
        self.spec, self.pool, self.store, self.folder, self.emit = spec, pool, store, folder, emit
        self.configs = [(label, spec.point_config(label, level))
                        for label in spec.servers for level in spec.levels]
        hits = [store.get(c, pool.profile_args) if store else None for _, c in self.configs]
        self.plan = make_plan(self.configs, [h is not None for h in hits], pool.profile_args,
                              live_keys(pool), store)
        where = [(lb, lv) for lb in spec.servers for lv in spec.levels]
        self.points: list[SweepPoint | None] = [
            None if h is None else SweepPoint(label=lb, level=lv, cached=True, path=h.path,
                                              result=h)
            for h, (lb, lv) in zip(hits, where, strict=True)
        ]
        todo = [(lab, c) for (lab, c), p in zip(self.configs, self.points, strict=True)
                if p is None]
        self.missing = list(dict.fromkeys(lab for lab, _ in todo))   # settings, in spec order
        self.order = _order(self.missing, spec, pool)
        todo.sort(key=lambda lc: self.order.index(lc[0]))   # in the order they will run
        self.eta = Eta([estimate_point_s(c, device()) for _, c in todo])
        self.started: list[str] = []
        self.warnings: list[str] = []
        self.starts_left = dict.fromkeys(self.plan.starts, estimate_start_s(device()))

    @property
    def done(self) -> int:
        return sum(p is not None for p in self.points)

    def _eta(self) -> float:
        return self.eta.remaining_s() + sum(self.starts_left.values())

    async def setting(self, label: str) -> None:
        live = {s.config.key() for s in self.pool.servers}
        starting = self.spec.servers[label].key() not in live   # the first run starts it
        if starting:
            self.emit(Step("server", f"starting a vLLM server for {label}", self.done,
                           len(self.configs), self._eta()))
            self.started.append(label)
        self.starts_left.pop(label, None)
        for i, (lab, config) in enumerate(self.configs):
            if lab != label or self.points[i] is not None:
                continue
            level = self.spec.levels[i % len(self.spec.levels)]
            t0 = time.monotonic()
            try:
                result, cached = await run_cached(
                    config, pool=self.pool, cache=self.store,
                    results_root=self.folder / "points",
                    progress=lambda d, n: self.emit(Step("requests", done=d, total=n)))
            except UnknownFlagError:
                raise
            except (ServerError, WorkloadError) as exc:   # e.g. too long for its max-model-len
                self._fail(label, str(exc).splitlines()[0])
                return
            self.eta.finish(point_seconds(time.monotonic() - t0, result, starting and not cached))
            starting = starting and cached
            self.points[i] = SweepPoint(label=label, level=level, cached=cached,
                                        path=result.path, result=result)
            what = f"{label} at {level:g}"
            self.warnings += [w for w in (prefix_warning(what, result),
                                          client_warning(what, result)) if w]
            self.emit(Step("point", _point_line(label, level, self.spec, result), self.done,
                           len(self.configs), self._eta()))

    def _fail(self, label: str, message: str) -> None:
        for i, (lab, _) in enumerate(self.configs):
            if lab == label and self.points[i] is None:
                level = self.spec.levels[i % len(self.spec.levels)]
                self.points[i] = SweepPoint(label=label, level=level, error=message)
                self.eta.skip()
        self.emit(Step("note", f"{label}: {message}; its remaining points are skipped",
                       self.done, len(self.configs), self._eta()))

    def result(self, complete: bool) -> SweepResult:
        return SweepResult(
            spec=self.spec, points=[p for p in self.points if p is not None], plan=str(self.plan),
            server_starts=self.started, warnings=self.warnings, complete=complete,
            path=str(self.folder),
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        )


def _point_line(label: str, level: float, spec: SweepSpec, result: RunResult) -> str:
    s = result.summary
    unit = "req/s" if spec.level_kind == "rate_rps" else "in flight"
    if s is None:
        return f"{label} at {level:g} {unit}: no summary ({result.stopped_early})"
    return (f"{label} at {level:g} {unit}: {s.output_throughput_tok_s:,.0f} output tok/s, "
            f"P99 TTFT {s.ttft_ms.p99 or 0:,.0f} ms, P99 TPOT {s.tpot_ms.p99 or 0:,.1f} ms")


def _new_folder(results_root: str | Path, name: str) -> Path:
    from vllm_course.experiment import new_run_dir

    return new_run_dir(results_root, name)


def _save_plot(result: SweepResult, folder: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8), constrained_layout=True)
    ax1, ax2 = fig.subplots(1, 2)
    result.plot("ttft", "p99", ax=ax1)
    result.plot("tpot", "p99", ax=ax2)
    fig.suptitle(f"sweep {result.spec.name}")
    fig.savefig(folder / "latency_throughput.png", dpi=110)

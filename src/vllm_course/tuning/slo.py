"""SLO search: the highest load (request rate or concurrency) at which the SLOs still hold.

``await slo_search(spec)`` measures one server setting at a load level, then brackets: it
multiplies the level by ``factor`` while the SLOs hold (divides it while they do not) until one
level passes and one fails, then bisects between the highest passing and the lowest failing
level until they are within ``tolerance`` of each other (relative). The answer is the highest
level that passed. Every point reports its goodput (requests/s that met the per-request SLO).

A level passes when every request succeeded and, for each objective in ``spec.slo``, that
latency's ``percentile`` (default P99) is at most the objective: e.g. ``slo: {ttft_ms: 1000,
tpot_ms: 100}`` asks for P99 TTFT <= 1000 ms and P99 TPOT <= 100 ms (as ``vllm bench serve``
computes them; see docs/metrics.md).

How many requests per point: at least :data:`MIN_REQUESTS` (300). With n latencies, the largest
one is above the true P99 with probability 1 - 0.99^n, which first reaches 95 % at n = 299; with
fewer, a point's P99 is an interpolation between its two or three slowest requests, and the
pass/fail verdict flips from run to run.

The search assumes that latency grows with load. Its own points cannot contradict that (it
only measures beyond the bracket found so far), so it checks with confirmation runs
(``confirm``, e.g. ``[0.9, 1.5]`` x the answer, each with fresh prompts and arrival times): a
level that passed above one that failed, among all points measured, is reported as a warning
(the curve was not monotonic: noise, or too few requests per point), and so is a confirmation
whose verdict is not the expected one (a pass below the answer, a failure above it).

Going down, the search stops at ``min_level`` (default ``start / factor**3``): if even that
fails, the answer is "no level met the SLO" (each point at rate r takes 300 / r seconds, so an
unbounded search down would take hours).
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_course import plots
from vllm_course.config import RunConfig, ServerConfig, SyntheticWorkload
from vllm_course.results import RunResult
from vllm_course.server import ServerPool
from vllm_course.tuning.cache import ResultCache, open_cache, run_cached
from vllm_course.tuning.points import (
    check_server_flags,
    device,
    estimate_point_s,
    estimate_start_s,
    own_pool,
    save_figure,
    save_json,
    with_runs,
)
from vllm_course.tuning.progress import Step, StepFn, format_duration, print_steps
from vllm_course.tuning.spec import ExperimentSpec

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

MIN_REQUESTS = 300
"""Fewest requests per point (see the module docstring: 1 - 0.99^n >= 0.95 from n = 299)."""
CONFIRM_SEED_OFFSET = 1000


class SLOSearchSpec(ExperimentSpec):
    """An SLO search on one server setting.

    Attributes:
        server: the server setting.
        slo: the objectives in ms (``ttft_ms``, ``tpot_ms``, ``e2el_ms``; at least one),
            checked at ``percentile`` for the search and per request for goodput.
        percentile: 50, 90, 95 or 99.
        level_kind: ``rate_rps`` (request rate, req/s) or ``max_concurrency`` (requests in
            flight).
        start: the first level measured.
        factor: bracketing step (> 1): the level is multiplied or divided by it until one
            level passes and one fails.
        tolerance: stop when (lowest failing - highest passing) / highest passing <= this.
        max_points: stop after this many points (the answer is then the bracket so far).
        min_level: the lowest level tried (default ``start / factor**3``; 1 for concurrency).
        confirm: after the search, measure these multiples of the answer again (fresh prompts
            and arrival times; concurrencies rounded away from the answer); below 1 should
            pass, above 1 fail. 1 itself is not a confirmation.
    """

    name: str = "slo"
    server: ServerConfig = Field(default_factory=ServerConfig)
    percentile: Literal[50, 90, 95, 99] = 99
    level_kind: Literal["rate_rps", "max_concurrency"] = "rate_rps"
    start: float = Field(gt=0)
    factor: float = Field(2.0, gt=1)
    tolerance: float = Field(0.1, gt=0)
    max_points: int = Field(12, ge=2)
    min_level: float | None = Field(None, gt=0)
    confirm: list[float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _checks(self) -> SLOSearchSpec:
        if self.slo is None or not self.objectives:
            raise ValueError("an SLO search needs at least one objective: slo: {ttft_ms: ..., "
                             "tpot_ms: ..., e2el_ms: ...}")
        n = _requests(self.workload)
        if n is not None and n < MIN_REQUESTS:
            raise ValueError(
                f"the workload has {n} requests per point; an SLO search needs at least "
                f"{MIN_REQUESTS}: with n requests the slowest is above the true P99 with "
                f"probability 1 - 0.99^n, which reaches 95 % only at n = 299")
        if self.level_kind == "max_concurrency" and self.start != int(self.start):
            raise ValueError(f"start={self.start}: a concurrency is a whole number")
        if any(f <= 0 or f == 1 for f in self.confirm):
            raise ValueError(f"confirm factors must be > 0 and not 1 (the answer itself), got "
                             f"{self.confirm}")
        if self.min_level is not None and self.min_level > self.start:
            raise ValueError(f"min_level {self.min_level:g} is above start {self.start:g}")
        return self

    @property
    def floor(self) -> float:
        """The lowest level the search tries (``min_level``, else ``start / factor**3``; at
        least 1 for concurrency)."""
        floor = self.min_level or self.start / self.factor**3
        return max(1, math.ceil(floor)) if self.level_kind == "max_concurrency" else floor

    def confirm_level(self, best: float, factor: float) -> float:
        """The level of confirmation ``factor`` x ``best``: a concurrency is rounded away from
        ``best`` (up above it, down below it, never below 1)."""
        x = best * factor
        if self.level_kind == "rate_rps":
            return x
        return math.ceil(x) if factor > 1 else max(1, math.floor(x))

    @property
    def objectives(self) -> dict[str, float]:
        """``{metric name: limit in ms}``, e.g. ``{"p99_ttft_ms": 1000.0}``."""
        slo = self.slo.model_dump() if self.slo else {}
        return {f"p{self.percentile}_{k.removesuffix('_ms')}_ms": v
                for k, v in slo.items() if v is not None}

    def point_config(self, level: float, seed_offset: int = 0) -> RunConfig:
        """The run at ``level`` (``seed_offset`` > 0 for confirmation runs: other prompts and
        arrival times)."""
        tag = ("r" if self.level_kind == "rate_rps" else "c") + f"{level:g}"
        config = self.run_config(f"{self.name}-{tag}", self.server,
                                 **{self.level_kind: _as_level(self.level_kind, level)},
                                 seed=self.load.seed + seed_offset)
        if seed_offset and hasattr(config.workload, "seed"):
            workload = config.workload.model_copy(
                update={"seed": config.workload.seed + seed_offset})
            config = config.model_copy(update={"workload": workload})
        return config


def _check_request_count(spec: SLOSearchSpec) -> None:
    """A file or trace workload: count the requests it yields (synthetic ones were checked
    with the spec).

    Raises:
        ValueError: fewer than :data:`MIN_REQUESTS`.
        WorkloadError: the workload could not be read.
    """
    if _requests(spec.workload) is not None:
        return
    from vllm_course.workload import load_requests

    n = len(load_requests(spec.workload, spec.server.model, spec.load.endpoint))
    if n < MIN_REQUESTS:
        raise ValueError(f"the workload has {n} requests per point; an SLO search needs at "
                         f"least {MIN_REQUESTS} (see vllm_course.tuning.slo)")


def _requests(workload) -> int | None:
    """A synthetic workload's request count; ``None`` for a file or trace (read to count)."""
    return workload.num_requests if isinstance(workload, SyntheticWorkload) else None


def _as_level(kind: str, level: float) -> float | int:
    return int(level) if kind == "max_concurrency" else level


class SLOPoint(BaseModel):
    """One measured level.

    Attributes:
        level: req/s or requests in flight.
        passed: every request succeeded and every objective held.
        values: the objectives' measured values in ms (e.g. ``{"p99_ttft_ms": 812.0}``).
        goodput_rps: requests/s that met the per-request SLO.
        phase: ``search`` or ``confirm``.
        cached, path: read from the cache; the run folder.
    """

    model_config = ConfigDict(frozen=True)
    level: float
    passed: bool
    values: dict[str, float | None]
    goodput_rps: float | None = None
    output_throughput_tok_s: float | None = None
    failed: int = 0
    phase: Literal["search", "confirm"] = "search"
    cached: bool = False
    path: str | None = None
    result: RunResult | None = Field(None, exclude=True)


class SLOSearchResult(BaseModel):
    """The answer and every point measured on the way.

    Attributes:
        best: the highest level that passed (``None`` if none did).
        lowest_failing: the lowest level that failed (``None`` if none did).
        converged: the two are within ``spec.tolerance`` of each other.
    """

    model_config = ConfigDict(frozen=True)
    spec: SLOSearchSpec
    points: list[SLOPoint]
    best: float | None = None
    lowest_failing: float | None = None
    converged: bool = False
    warnings: list[str] = Field(default_factory=list)
    created_at: str = ""
    path: str | None = None

    @property
    def unit(self) -> str:
        """``req/s`` or ``in flight``."""
        return _unit(self.spec)

    def summary(self) -> str:
        """The answer in one sentence."""
        objectives = " and ".join(f"{_pretty(m)} <= {v:g} ms"
                                  for m, v in self.spec.objectives.items())
        if self.best is None:
            return (f"no level met {objectives}: even {self.lowest_failing:g} {self.unit} "
                    "failed")
        bracket = ("" if self.lowest_failing is None
                   else f" ({self.lowest_failing:g} {self.unit} failed)")
        state = "" if self.converged else "; not converged: see the warnings"
        return f"highest load meeting {objectives}: {self.best:g} {self.unit}{bracket}{state}"

    def to_dataframe(self) -> pd.DataFrame:
        """One row per point in the order measured: level, verdict, objectives (ms), goodput
        (req/s), output tok/s, failed requests, phase, cached, folder."""
        import pandas as pd

        return pd.DataFrame([{self.spec.level_kind: p.level, "passed": p.passed, **p.values,
                              "goodput_rps": p.goodput_rps,
                              "output_throughput_tok_s": p.output_throughput_tok_s,
                              "failed": p.failed, "phase": p.phase, "cached": p.cached,
                              "path": p.path} for p in self.points])

    def plot(self, ax: Axes | None = None) -> Axes:
        """Each objective's measured value against the level (filled: passed, hollow:
        failed), its limit dashed, the answer as a vertical line."""
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)[1]
        for metric, limit in self.spec.objectives.items():
            pts = sorted((p.level, p.values.get(metric), p.passed) for p in self.points
                         if p.values.get(metric) is not None)
            line = ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], alpha=0.5,
                           label=_pretty(metric))[0]
            for x, y, ok in pts:
                ax.plot(x, y, "o", color=line.get_color(), mfc=line.get_color() if ok else "none")
            ax.axhline(limit, color=line.get_color(), ls="--", lw=1)
        if self.best is not None:
            ax.axvline(self.best, color="black", lw=1, label=f"answer {self.best:g}")
        ax.set_xlabel("request rate (req/s)" if self.spec.level_kind == "rate_rps"
                      else "max concurrency (requests in flight)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return ax

    def save(self, folder: str | Path) -> Path:
        """Write ``slo.json`` into ``folder``; returns its path."""
        return save_json(self, folder, "slo.json")

    @classmethod
    def load(cls, folder: str | Path) -> SLOSearchResult:
        """Read ``slo.json`` of an SLO-search folder, with each point's run.

        Raises:
            FileNotFoundError: if the folder has no ``slo.json``.
        """
        result = cls.model_validate_json((Path(folder) / "slo.json").read_text())
        return result.model_copy(update={"points": with_runs(result.points),
                                         "path": str(folder)})

    def _repr_html_(self) -> str:
        return (f"<b>SLO search {self.spec.name}</b>: {self.summary()}"
                + self.to_dataframe().drop(columns=["path"]).to_html(
                    index=False, float_format="{:,.1f}".format))


def _pretty(metric: str) -> str:
    stat, name, _ = metric.split("_")
    return f"{stat.upper()} {name.upper()}"


def judge(spec: SLOSearchSpec, result: RunResult, level: float, phase: str = "search",
          cached: bool = False) -> SLOPoint:
    """The :class:`SLOPoint` of a run: its objectives' values and whether all held."""
    s = result.summary
    values = {m: plots.metric_value(s, m) for m in spec.objectives}
    failed = s.failed if s is not None else 0
    passed = (s is not None and failed == 0 and not result.stopped_early
              and all(v is not None and v <= spec.objectives[m] for m, v in values.items()))
    return SLOPoint(level=level, passed=passed, values=values,
                    goodput_rps=s.goodput_rps if s else None,
                    output_throughput_tok_s=s.output_throughput_tok_s if s else None,
                    failed=failed, phase=phase, cached=cached, path=result.path, result=result)


def next_level(spec: SLOSearchSpec, passed: list[float], failed: list[float]) -> float | None:
    """The next level to measure, or ``None`` when the search is done: bracketing by
    ``factor`` until a level passed and one failed (down to ``spec.floor``), then bisection
    until the two are within ``tolerance``; whole numbers for concurrency (done when they are
    1 apart)."""
    lo = max(passed) if passed else None
    hi = min(failed) if failed else None
    integer = spec.level_kind == "max_concurrency"
    if lo is None:
        if hi <= spec.floor:
            return None                   # even the lowest level tried failed
        x = max(hi / spec.factor, spec.floor)
        return max(spec.floor, math.floor(x)) if integer else x
    if hi is None:
        x = lo * spec.factor
        return math.ceil(x) if integer else x
    if (hi - lo) / lo <= spec.tolerance or (integer and hi - lo <= 1):
        return None
    return (lo + hi) // 2 if integer else (lo + hi) / 2


def monotonic_warnings(points: list[SLOPoint], unit: str) -> list[str]:
    """One sentence per level that passed above a level that failed (search and confirmation
    points alike)."""
    out = []
    failed = [p.level for p in points if not p.passed]
    for p in points:
        below = [f for f in failed if f < p.level]
        if p.passed and below:
            out.append(f"not monotonic: {p.level:g} {unit} passed but {max(below):g} {unit} "
                       "failed; latency did not grow with load here (noise, or too few "
                       "requests per point): read the answer as approximate")
    return out


async def slo_search(
    spec: SLOSearchSpec,
    *,
    pool: ServerPool | None = None,
    cache: ResultCache | str | Path | bool | None = True,
    results_root: str | Path = "results",
    progress: StepFn | None = None,
) -> SLOSearchResult:
    """Find the highest load at which ``spec.slo`` holds (see the module docstring).

    Args:
        spec: see :class:`SLOSearchSpec`.
        pool: servers to use; default a pool of this search (stopped when it returns).
        cache: as :func:`~vllm_course.tuning.grid.sweep`: a rerun reads every point back.
        results_root: where ``<name>-<time>/slo.json`` goes.
        progress: called with a :class:`~vllm_course.tuning.progress.Step` per event;
            default :func:`~vllm_course.tuning.progress.print_steps`.

    Returns:
        A :class:`SLOSearchResult`; ``result.summary()`` says the answer.

    Raises:
        UnknownFlagError: a flag vLLM does not know (before the server starts).
        ValueError: a file workload with fewer than :data:`MIN_REQUESTS` requests (before).
        ServerError, WorkloadError: as :func:`~vllm_course.experiment.run_experiment`;
            finished points are in the cache, so running the search again resumes.
    """
    from vllm_course.experiment import new_run_dir

    store = open_cache(cache, results_root)
    own = pool is None
    pool = pool or own_pool()
    emit = progress or print_steps
    points: list[SLOPoint] = []
    per_point = estimate_point_s(spec.point_config(spec.start), device())
    emit(Step("plan", f"SLO search {spec.name}: {' and '.join(spec.objectives)} from "
              f"{spec.start:g} {_unit(spec)}, {_requests(spec.workload) or 'all'} requests per "
              f"point (>= {MIN_REQUESTS} for a stable P99); about "
              f"{format_duration(per_point)} per point plus "
              f"{format_duration(estimate_start_s(device()))} to start the server",
              0, None, None))
    try:
        check_server_flags([spec.server], pool)
        _check_request_count(spec)
        level: float | None = spec.start
        while level is not None and len(points) < spec.max_points:
            points.append(await _measure(spec, level, "search", 0, pool, store, results_root))
            emit(Step("point", _line(spec, points[-1]), len(points), None, None))
            level = next_level(spec, [p.level for p in points if p.passed],
                               [p.level for p in points if not p.passed])
        search = list(points)
        passed = [p.level for p in search if p.passed]
        best = max(passed) if passed else None
        for i, f in enumerate(spec.confirm, 1):
            if best is None:
                break
            point = await _measure(spec, spec.confirm_level(best, f), "confirm",
                                   CONFIRM_SEED_OFFSET * i, pool, store, results_root)
            points.append(point)
            emit(Step("point", "confirm " + _line(spec, point), len(points), None, None))
    finally:
        if own:
            pool.close()
    result = _result(spec, search, points, best)
    folder = new_run_dir(results_root, spec.name)
    result = result.model_copy(update={"path": str(folder)})
    result.save(folder)
    if points:
        save_figure(lambda ax: result.plot(ax=ax), folder / "slo.png")
    emit(Step("done", result.summary() + "".join(f"\nwarning: {w}" for w in result.warnings),
              len(points), len(points), 0.0))
    return result


def _result(spec, search, points, best) -> SLOSearchResult:
    failing = [p.level for p in search if not p.passed and (best is None or p.level > best)]
    lowest_failing = min(failing) if failing else None
    converged = (best is not None and lowest_failing is not None
                 and next_level(spec, [best], [lowest_failing]) is None)
    unit = _unit(spec)
    warnings = monotonic_warnings(points, unit)
    floor_failed = best is None and lowest_failing is not None and lowest_failing <= spec.floor
    if not converged and not floor_failed:
        warnings.append(f"stopped after {len(search)} points without a bracket within "
                        f"{spec.tolerance:g}: raise max_points or start nearer the answer")
    for p in points[len(search):]:
        expected = p.level < best
        if p.passed != expected:
            warnings.append(f"confirmation at {p.level:g} {unit} "
                            f"{'passed' if p.passed else 'failed'}, expected "
                            f"{'a pass' if expected else 'a failure'}")
    return SLOSearchResult(
        spec=spec, points=points, best=best, lowest_failing=lowest_failing,
        converged=converged, warnings=warnings,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


async def _measure(spec, level, phase, seed_offset, pool, store, results_root) -> SLOPoint:
    level = _as_level(spec.level_kind, level)
    result, cached = await run_cached(spec.point_config(level, seed_offset), pool=pool,
                                      cache=store, results_root=Path(results_root) / "runs")
    return judge(spec, result, level, phase, cached)


def _unit(spec: SLOSearchSpec) -> str:
    return "req/s" if spec.level_kind == "rate_rps" else "in flight"


def _line(spec: SLOSearchSpec, p: SLOPoint) -> str:
    values = ", ".join(f"{_pretty(m)} {v:,.0f} ms" if v is not None else f"{_pretty(m)} -"
                       for m, v in p.values.items())
    goodput = f"goodput {p.goodput_rps:.2f} req/s" if p.goodput_rps is not None else ""
    return (f"{p.level:g} {_unit(spec)}: {'met' if p.passed else 'missed'} the SLO ({values}; "
            f"{goodput}{'; cached' if p.cached else ''})")

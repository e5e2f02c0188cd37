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
from typing import TYPE_CHECKING

from vllm_course import plots
from vllm_course.results import RunResult
from vllm_course.server import ServerPool
from vllm_course.tuning.cache import ResultCache, client_warning, open_cache, run_cached
from vllm_course.tuning.points import (
    check_server_flags,
    device,
    estimate_point_s,
    estimate_start_s,
    own_pool,
    save_figure,
)
from vllm_course.tuning.progress import Step, StepFn, format_duration, print_steps

if TYPE_CHECKING:
    pass
from vllm_course.tuning.slo_models import (  # noqa: F401 (the models' API, re-exported)
    CONFIRM_SEED_OFFSET,
    MIN_REQUESTS,
    SLOPoint,
    SLOSearchResult,
    SLOSearchSpec,
    _as_level,
    _check_request_count,
    _pretty,
    _requests,
    _unit,
)


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
        KeyboardInterrupt: passed on. Before any error goes on, the points measured so far are
            saved in a new folder as ``slo.json``, with a warning that the search stopped.
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

    async def measure(level: float, phase: str, seed_offset: int) -> SLOPoint:
        level = _as_level(spec.level_kind, level)
        result, cached = await run_cached(spec.point_config(level, seed_offset), pool=pool,
                                          cache=store, results_root=Path(results_root) / "runs")
        return judge(spec, result, level, phase, cached)

    try:
        check_server_flags([spec.server], pool)
        _check_request_count(spec)
        level: float | None = spec.start
        while level is not None and len(points) < spec.max_points:
            points.append(await measure(level, "search", 0))
            emit(Step("point", _line(spec, points[-1]), len(points), None, None))
            level = next_level(spec, [p.level for p in points if p.passed],
                               [p.level for p in points if not p.passed])
        search = list(points)
        passed = [p.level for p in search if p.passed]
        best = max(passed) if passed else None
        for i, f in enumerate(spec.confirm, 1):
            if best is None:
                break
            point = await measure(spec.confirm_level(best, f), "confirm", CONFIRM_SEED_OFFSET * i)
            points.append(point)
            emit(Step("point", "confirm " + _line(spec, point), len(points), None, None))
    except BaseException as exc:
        if points:           # what was measured, saved before the error or Ctrl-C goes on
            folder = _save_partial(spec, points, results_root, exc)
            emit(Step("note", f"stopped after {len(points)} point(s): {folder}/slo.json holds "
                      "them", len(points), None, None))
        raise
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


def _save_partial(spec: SLOSearchSpec, points: list[SLOPoint], results_root: str | Path,
                  exc: BaseException) -> Path:
    """Save the points of a search that stopped early (an error, Ctrl-C) as ``slo.json`` in a
    new ``results_root/<name>-<time>/`` folder, with a warning that it did not finish."""
    from vllm_course.experiment import new_run_dir

    search = [p for p in points if p.phase == "search"]
    passed = [p.level for p in search if p.passed]
    result = _result(spec, search, points, max(passed) if passed else None)
    why = type(exc).__name__ + ("" if isinstance(exc, KeyboardInterrupt) else f": {exc}")
    folder = new_run_dir(results_root, spec.name)
    result.model_copy(update={
        "path": str(folder), "converged": False,
        "warnings": [f"stopped after {len(points)} point(s) ({why.splitlines()[0]}): not a "
                     "finished search", *result.warnings]}).save(folder)
    return folder


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
    warnings += [w for p in points if p.result is not None
                 and (w := client_warning(f"{p.phase} at {p.level:g} {unit}", p.result))]
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


def _line(spec: SLOSearchSpec, p: SLOPoint) -> str:
    values = ", ".join(f"{_pretty(m)} {v:,.0f} ms" if v is not None else f"{_pretty(m)} -"
                       for m, v in p.values.items())
    goodput = f"goodput {p.goodput_rps:.2f} req/s" if p.goodput_rps is not None else ""
    return (f"{p.level:g} {_unit(spec)}: {'met' if p.passed else 'missed'} the SLO ({values}; "
            f"{goodput}{'; cached' if p.cached else ''})")

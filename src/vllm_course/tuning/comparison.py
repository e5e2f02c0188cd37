"""Compare server settings on one workload, with repeats and a verdict that accounts for noise.

``await compare(spec)`` runs every setting ``repeats`` times (at least 3) and reports, per
metric (output tok/s, P99 TTFT and P99 TPOT in ms by default): the mean with its confidence
interval, the ratio to the baseline with its interval, and a verdict, "within noise" when that
interval contains 1, else "significant" (better or worse). The method is named in the output
(:mod:`~vllm_course.tuning.stats`: Welch's t-test on logs by default, or the bootstrap).

The confidence is family-wise (Bonferroni): with 2 settings beside the baseline and 3 metrics,
a 95 % compare computes each of its 6 intervals at 99.17 %, so the chance that any "significant"
is noise stays at most 5 %.

Repeats run on the same server (one per distinct setting; two labels with identical settings
share one), each from an empty prefix cache (``load.reset_prefix_cache``), with its own prompts
and arrival times (workload and arrival seeds ``seed + 1000 x setting + repeat``). When every
setting's server fits the pool at once, repeats are interleaved in rounds whose order alternates
(A B, B A, A B, ...), so a slow drift of the machine falls on every setting alike; otherwise
settings run one after another, and the output says so.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vllm_course import plots
from vllm_course.config import RunConfig
from vllm_course.results import RunResult
from vllm_course.server import ServerPool
from vllm_course.tuning import stats
from vllm_course.tuning.cache import (
    ResultCache,
    client_warning,
    open_cache,
    prefix_warning,
    run_cached,
)
from vllm_course.tuning.points import (
    check_server_flags,
    device,
    estimate_point_s,
    estimate_start_s,
    live_keys,
    make_plan,
    own_pool,
    point_seconds,
    save_figure,
    save_json,
)
from vllm_course.tuning.progress import Eta, Step, StepFn, print_steps
from vllm_course.tuning.spec import SettingsSpec

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

SEED_STRIDE = 1000
WITHIN_NOISE, SIGNIFICANT, BASELINE = "within noise", "significant", "baseline"
NO_RATIO = "no ratio: a value <= 0"


class CompareSpec(SettingsSpec):
    """Two or more server settings on one workload, each run ``repeats`` times.

    Attributes:
        servers: ``{label: ServerConfig}`` (a list is accepted, labelled by its flags).
        baseline: the label ratios are relative to (default: the first).
        repeats: runs per setting, at least 3 (two give no usable spread).
        metrics: names from :func:`~vllm_course.plots.metric_names` (tok/s, req/s, or latency
            statistics in ms such as ``p99_ttft_ms``).
        method: ``welch`` or ``bootstrap`` (:mod:`~vllm_course.tuning.stats`).
        confidence: family-wise confidence over all comparisons (Bonferroni).
    """

    name: str = "compare"
    baseline: str | None = None
    repeats: int = 3
    metrics: list[str] = Field(default_factory=lambda: ["output_throughput_tok_s",
                                                        "p99_ttft_ms", "p99_tpot_ms"])
    method: stats.Method = "welch"
    confidence: float = Field(0.95, gt=0.5, lt=1)

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one metric")
        for name in v:
            plots.metric_label(name)   # raises ValueError listing the valid names
        return v

    @model_validator(mode="after")
    def _checks(self) -> CompareSpec:
        if len(self.servers) < 2:
            raise ValueError("a compare needs at least two server settings (the same one "
                             "twice measures the noise)")
        if self.baseline is not None and self.baseline not in self.servers:
            raise ValueError(f"baseline {self.baseline!r} is not one of the server labels "
                             f"{list(self.servers)}")
        if self.repeats < 3:
            raise ValueError(f"repeats={self.repeats}: give at least 3; with 2 runs per "
                             "setting the spread, and so the verdict, is a guess")
        if self.slo is None and any(m.startswith("goodput") for m in self.metrics):
            raise ValueError("goodput needs an SLO: add slo: {ttft_ms: ..., tpot_ms: ...}")
        return self

    @property
    def baseline_label(self) -> str:
        """The baseline's label."""
        return self.baseline or next(iter(self.servers))

    @property
    def comparisons(self) -> int:
        """How many intervals share the family-wise confidence: settings beside the baseline
        times metrics."""
        return (len(self.servers) - 1) * len(self.metrics)

    @property
    def interval_confidence(self) -> float:
        """The confidence of each single interval (Bonferroni)."""
        return 1 - (1 - self.confidence) / self.comparisons

    def repeat_config(self, index: int, label: str, repeat: int) -> RunConfig:
        """The run of repeat ``repeat`` (0-based) of the ``index``-th setting: workload and
        arrival seeds ``seed + 1000 x index + repeat``, so no two runs send the same prompts
        at the same times (nor share a cache key)."""
        offset = SEED_STRIDE * index + repeat
        config = self.run_config(f"{self.name}-{label}-{repeat + 1}", self.servers[label],
                                 seed=self.load.seed + offset)
        if hasattr(config.workload, "seed"):
            workload = config.workload.model_copy(update={"seed": config.workload.seed + offset})
            config = config.model_copy(update={"workload": workload})
        return config


class MetricStat(BaseModel):
    """One metric of one setting.

    Attributes:
        setting, metric: the label and the metric name (its unit is in the name).
        values: one value per repeat.
        mean, low, high: the mean and its interval (Student's t, per-interval confidence).
        ratio, ratio_low, ratio_high: against the baseline, with its interval (``None`` for
            the baseline; ratio of geometric means for ``welch``, of means for ``bootstrap``).
        verdict: ``baseline``, ``within noise``, ``significant``, or ``no ratio: a value <=
            0`` (a ratio is not defined: e.g. a goodput of 0, or a P99 TPOT of 0 ms when every
            request's tokens arrived in one read, which a starved client or API server causes;
            the compare's warnings then name the repeats whose client limited the run).
    """

    model_config = ConfigDict(frozen=True)
    setting: str
    metric: str
    values: list[float]
    mean: float
    low: float
    high: float
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    verdict: str = BASELINE

    @property
    def better(self) -> bool | None:
        """True if better than the baseline (higher throughput, lower latency), False if
        worse, ``None`` for the baseline or a verdict of within noise."""
        if self.ratio is None or self.verdict != SIGNIFICANT:
            return None
        return self.ratio < 1 if self.metric.endswith("_ms") else self.ratio > 1

    @property
    def sentence(self) -> str:
        """E.g. ``significant: 0.29x (0.27-0.30), worse``."""
        if self.ratio is None:
            return self.verdict
        text = f"{self.verdict}: {self.ratio:.2f}x ({self.ratio_low:.2f}-{self.ratio_high:.2f})"
        return text + ("" if self.better is None else (", better" if self.better else ", worse"))


def metric_stats(spec: CompareSpec, values: dict[str, dict[str, list[float]]]
                 ) -> list[MetricStat]:
    """Statistics of ``values[label][metric]`` (one value per repeat) by ``spec.method`` at
    ``spec.interval_confidence``.

    Raises:
        RuntimeError: a setting with fewer than 2 values of a metric (its runs failed: the
            run, not the input, is at fault).
    """
    level, base = spec.interval_confidence, spec.baseline_label
    out = []
    for label in spec.servers:
        for metric in spec.metrics:
            x, y = values[label][metric], values[base][metric]
            for name, sample in ((label, x), (base, y)):
                if len(sample) < 2:
                    raise RuntimeError(f"{name} has {len(sample)} repeat(s) with a value of "
                                       f"{metric}; a comparison needs at least 2 (did its runs "
                                       "fail? see their folders)")
            ci = stats.mean_interval(x, level)
            stat = MetricStat(setting=label, metric=metric, values=x, mean=ci.estimate,
                              low=ci.low, high=ci.high)
            if label != base and min(x + y) <= 0:
                stat = stat.model_copy(update={"verdict": NO_RATIO})
            elif label != base:
                r = stats.ratio_interval(x, y, level, spec.method)
                stat = stat.model_copy(update={
                    "ratio": r.estimate, "ratio_low": r.low, "ratio_high": r.high,
                    "verdict": WITHIN_NOISE if r.contains(1.0) else SIGNIFICANT})
            out.append(stat)
    return out


class CompareResult(BaseModel):
    """What a compare measured: the statistics, and every repeat's run folder."""

    model_config = ConfigDict(frozen=True)
    spec: CompareSpec
    stats: list[MetricStat]
    paths: dict[str, list[str | None]] = Field(default_factory=dict)
    runs: dict[str, list[RunResult]] = Field(default_factory=dict, exclude=True)
    method: str = ""
    order: str = ""
    warnings: list[str] = Field(default_factory=list)
    created_at: str = ""
    path: str | None = None

    def stat(self, setting: str, metric: str) -> MetricStat:
        """The statistics of one setting and metric.

        Raises:
            KeyError: if the compare has no such setting or metric.
        """
        for s in self.stats:
            if s.setting == setting and s.metric == metric:
                return s
        raise KeyError(f"no {metric!r} of {setting!r} in this compare")

    def to_dataframe(self) -> pd.DataFrame:
        """One row per setting and metric: the values, mean and interval, the ratio to the
        baseline and its interval, the verdict."""
        import pandas as pd

        return pd.DataFrame([{**s.model_dump(), "verdict": s.sentence} for s in self.stats])

    def report(self) -> str:
        """The verdicts as text, the method and the run order first."""
        lines = [f"compare {self.spec.name}: {self.method}", f"order: {self.order}"]
        for s in self.stats:
            lines.append(f"  {s.setting:<16} {s.metric:<24} mean {s.mean:>10,.2f} "
                         f"[{s.low:,.2f}, {s.high:,.2f}]  {s.sentence}")
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])

    def plot(self, metric: str | None = None, ax: Axes | None = None) -> Axes:
        """Every repeat of ``metric`` (default: the first) as a dot per setting, with the mean
        and its interval as a bar; the verdict under each setting's name."""
        metric = metric or self.spec.metrics[0]
        if ax is None:
            import matplotlib.pyplot as plt

            ax = plt.subplots(figsize=(1.6 + 1.4 * len(self.spec.servers), 3.5),
                              constrained_layout=True)[1]
        names = []
        for i, label in enumerate(self.spec.servers):
            s = self.stat(label, metric)
            ax.errorbar([i], [s.mean], yerr=[[s.mean - s.low], [s.high - s.mean]], fmt="s",
                        color="black", capsize=6)
            ax.plot([i + 0.15] * len(s.values), s.values, "o", alpha=0.6)
            names.append(f"{label}\n{s.sentence.split(':')[0]}")
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel(plots.metric_label(metric))
        ax.set_title(f"{self.spec.repeats} repeats; bars: {100 * self.spec.interval_confidence:.1f}"
                     " % interval", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        return ax

    def save(self, folder: str | Path) -> Path:
        """Write ``compare.json`` into ``folder``; returns its path."""
        return save_json(self, folder, "compare.json")

    @classmethod
    def load(cls, folder: str | Path) -> CompareResult:
        """Read ``compare.json`` of a compare folder, with each repeat's run.

        Raises:
            FileNotFoundError: if the folder has no ``compare.json``.
        """
        result = cls.model_validate_json((Path(folder) / "compare.json").read_text())
        runs = {label: [RunResult.load(p) for p in paths if p]
                for label, paths in result.paths.items()}
        return result.model_copy(update={"runs": runs, "path": str(folder)})

    def _repr_html_(self) -> str:
        cols = ["setting", "metric", "mean", "low", "high", "verdict"]
        return (f"<b>Compare {self.spec.name}</b>: {self.method}<br><small>{self.order}"
                f"</small>" + self.to_dataframe()[cols].to_html(
                    index=False, float_format="{:,.2f}".format))


def _failures(what: str, result: RunResult) -> str | None:
    """A sentence if a repeat had failed requests or stopped early (its numbers then describe
    fewer requests than the others')."""
    s = result.summary
    if result.stopped_early:
        return f"{what} stopped early ({result.stopped_early}): its numbers cover part of the run"
    if s is not None and s.failed:
        return f"{what}: {s.failed} request(s) failed ({'; '.join(list(s.errors)[:2])})"
    return None


def _schedule(spec: CompareSpec, pool: ServerPool) -> tuple[list[tuple[int, str, int]], str]:
    """The order of the runs, ``(setting index, label, repeat)``, and a sentence about it."""
    labels = list(spec.servers)
    distinct = {s.key() for s in spec.servers.values()}
    if len(distinct) <= pool.max_live:
        rounds = [labels if r % 2 == 0 else labels[::-1] for r in range(spec.repeats)]
        shown = ", ".join(" ".join(row) for row in rounds[:3]) + (", ..." if len(rounds) > 3
                                                                   else "")
        order = [(labels.index(lb), lb, r) for r, row in enumerate(rounds) for lb in row]
        return order, (f"interleaved in {spec.repeats} rounds of alternating order ({shown}) "
                       f"on {len(distinct)} server(s)")
    order = [(i, lb, r) for i, lb in enumerate(labels) for r in range(spec.repeats)]
    return order, (f"one setting after another: {len(distinct)} servers do not fit at once "
                   f"(the pool keeps {pool.max_live}), so a drift of the machine over time "
                   "falls on the settings unevenly")


async def compare(
    spec: CompareSpec,
    *,
    pool: ServerPool | None = None,
    cache: ResultCache | str | Path | bool | None = True,
    results_root: str | Path = "results",
    progress: StepFn | None = None,
) -> CompareResult:
    """Run every setting ``spec.repeats`` times and compare each with the baseline.

    Args:
        spec: see :class:`CompareSpec`.
        pool: servers to use; default a pool of this compare that keeps every setting's server
            live where the hardware profile allows (stopped when it returns or fails).
        cache: as :func:`~vllm_course.tuning.grid.sweep` (``None``: run all, store nothing).
        results_root: where ``<name>-<time>/compare.json`` goes.
        progress: called with a :class:`~vllm_course.tuning.progress.Step` per event;
            default :func:`~vllm_course.tuning.progress.print_steps`.

    Returns:
        A :class:`CompareResult` (``result.report()`` prints the verdicts).

    Raises:
        UnknownFlagError: a flag vLLM does not know (checked before any server starts).
        ServerError, WorkloadError: as :func:`~vllm_course.experiment.run_experiment` (a
            request longer than a server's ``--max-model-len``: before any server starts);
            finished repeats are in the cache, so running the compare again resumes.
        RuntimeError: a setting ended with fewer than 2 usable repeats (the message names
            every run's folder).
    """
    from vllm_course.experiment import max_model_len_from_args, preflight

    store = open_cache(cache, results_root)
    own = pool is None
    pool = pool or own_pool(max_live=len({s.key() for s in spec.servers.values()}))
    emit = progress or print_steps
    try:
        order, order_text = _schedule(spec, pool)
        configs = {(i, r): spec.repeat_config(i, lb, r) for i, lb, r in order}
        hits = {k: store.has(c, pool.profile_args) if store else False
                for k, c in configs.items()}
        keys = [(i, r) for i, _, r in order]
        plan = make_plan([(lb, configs[i, r]) for i, lb, r in order], [hits[k] for k in keys],
                         pool.profile_args, live_keys(pool), store)
        emit(Step("plan", f"compare {spec.name}: {plan}; runs {order_text}", 0, len(order),
                  plan.estimate_s))
        check_server_flags([spec.servers[lb] for i, lb, r in order if not hits[i, r]], pool)
        # the workload against each server's --max-model-len, before any starts: a compare
        # needs every setting, so one that cannot take the requests stops it now, not after
        # the others ran
        first = {configs[k].server.key(): configs[k] for k in reversed(keys) if not hits[k]}
        for config in first.values():
            if max_model_len_from_args({**pool.profile_args, **config.server.args}):
                preflight(config, pool.profile_args)
        eta = Eta([estimate_point_s(configs[i, r], device()) for i, _, r in order
                   if not hits[i, r]])
        # servers still to start, by settings key: their time is added to the ETA, not
        # counted in the point that starts them
        starts_left = dict.fromkeys({configs[k].server.key() for k in keys if not hits[k]}
                                    - live_keys(pool), estimate_start_s(device()))
        runs: dict[str, list[RunResult]] = {lb: [] for lb in spec.servers}
        warnings: list[str] = []
        for done, (i, label, r) in enumerate(order, 1):
            key = configs[i, r].server.key()
            starting = not hits[i, r] and key not in live_keys(pool)
            if starting:
                emit(Step("server", f"starting a vLLM server for {label}", done - 1, len(order),
                          eta.remaining_s() + sum(starts_left.values())))
                starts_left.pop(key, None)
            t0 = time.monotonic()
            result, cached = await run_cached(configs[i, r], pool=pool, cache=store,
                                              results_root=Path(results_root) / "runs")
            if not cached:
                eta.finish(point_seconds(time.monotonic() - t0, result, starting))
            runs[label].append(result)
            what = f"{label} repeat {r + 1}"
            warnings += [w for w in (prefix_warning(what, result), client_warning(what, result),
                                     _failures(what, result)) if w]
            tok_s = result.summary.output_throughput_tok_s if result.summary else 0.0
            emit(Step("point", f"{label} repeat {r + 1}: {tok_s:,.0f} output tok/s"
                      + (" (cached)" if cached else ""), done, len(order),
                      eta.remaining_s() + sum(starts_left.values())))
    finally:
        if own:
            pool.close()
    result = _save_result(spec, runs, warnings, order_text, results_root)
    emit(Step("done", result.report(), len(order), len(order), 0.0))
    return result


def _save_result(spec: CompareSpec, runs: dict[str, list[RunResult]], warnings: list[str],
                 order_text: str, results_root: str | Path) -> CompareResult:
    """The compare's statistics over its runs, saved with its plot in a new
    ``results_root/<name>-<time>/`` folder."""
    from vllm_course.experiment import new_run_dir

    values = {lb: {m: [v for run in rs if (v := plots.metric_value(run.summary, m)) is not None]
                   for m in spec.metrics} for lb, rs in runs.items()}
    try:
        metric_stat_list = metric_stats(spec, values)
    except RuntimeError as exc:    # name the runs, which are kept, so nothing measured is lost
        folders = "; ".join(f"{lb}: {', '.join(str(r.path) for r in rs)}"
                            for lb, rs in runs.items())
        raise RuntimeError(f"{exc}. The runs: {folders}") from None
    method = (f"{stats.describe_method(spec.method)}; {100 * spec.confidence:g} % family-wise "
              f"over {spec.comparisons} comparison(s) (Bonferroni: each interval "
              f"{100 * spec.interval_confidence:.2f} %); {spec.repeats} repeats per setting, "
              "each from an empty prefix cache")
    result = CompareResult(
        spec=spec, stats=metric_stat_list, runs=runs, method=method, order=order_text,
        paths={lb: [run.path for run in rs] for lb, rs in runs.items()}, warnings=warnings,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    folder = new_run_dir(results_root, spec.name)
    result = result.model_copy(update={"path": str(folder)})
    result.save(folder)
    save_figure(lambda ax: result.plot(ax=ax), folder / "compare.png",
                (1.6 + 1.4 * len(spec.servers), 3.5))
    return result


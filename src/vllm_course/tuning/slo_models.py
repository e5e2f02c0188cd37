"""What an SLO search is asked and what it answers: :class:`SLOSearchSpec`, :class:`SLOPoint`,
:class:`SLOSearchResult` (the method is described in :mod:`vllm_course.tuning.slo`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_course.config import RunConfig, ServerConfig, SyntheticWorkload
from vllm_course.results import RunResult
from vllm_course.tuning.points import (
    save_json,
    with_runs,
)
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
    start: float = Field(gt=0, allow_inf_nan=False)
    factor: float = Field(2.0, gt=1, allow_inf_nan=False)
    tolerance: float = Field(0.1, gt=0, allow_inf_nan=False)
    max_points: int = Field(12, ge=2)
    min_level: float | None = Field(None, gt=0, allow_inf_nan=False)
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


def _unit(spec: SLOSearchSpec) -> str:
    return "req/s" if spec.level_kind == "rate_rps" else "in flight"

"""Calibrating a performance lab on this machine (``vllm-course calibrate``).

A target is set as the labs' design says (``labs/README.md``, "How targets are set"): run the
lab's own run cell at least 3 times with a solution, take the worst run and move it by 3 standard
deviations towards leniency (``>=``: worst − 3 sd; ``<=``: worst + 3 sd). The lab is valid on a
machine only if its starting configuration (the baseline each run measures first) misses at least
one target by more than that margin: otherwise a learner who changes nothing could pass by luck.

:func:`calibrate` measures exactly that with :func:`vllm_course.grading.run`, so the numbers
come from the same code path, servers and checks as a graded run, and reports each target's
proposal beside the value the lab now uses.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vllm_course.grading.results import LabError
from vllm_course.grading.session import run, scenario, setup
from vllm_course.grading.spec import Target

MARGIN_SD = 3.0
"""The margin, in standard deviations of the solution's runs."""


@dataclass(frozen=True)
class TargetCalibration:
    """One target's measurements over the calibration runs.

    Attributes:
        id, metric, op, current: the target as the lab now grades it.
        answer: the metric in each run with the calibrated answer.
        baseline: the same metric of each run's baseline (the starting configuration); a ratio
            to the baseline is 1 there by definition.
        proposed: worst answer run moved by :data:`MARGIN_SD` standard deviations towards
            leniency: the strictest target the answer still meets with that margin.
        margin: :data:`MARGIN_SD` × the answer runs' sample standard deviation.
        current_ok: the lab's current target is at least as lenient as ``proposed``.
        baseline_misses: even the baseline's best run misses ``proposed`` by more than
            ``margin`` (what makes the lab valid).
    """

    id: str
    metric: str
    op: str
    current: float
    answer: list[float]
    baseline: list[float]
    proposed: float
    margin: float
    current_ok: bool
    baseline_misses: bool


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _baseline_value(data: dict, metric: str) -> float | None:
    if metric.endswith("_vs_baseline"):
        return 1.0
    value = (data.get("baseline") or {}).get("metrics", {}).get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def judge(target: Target, answer: list[float], baseline: list[float]) -> TargetCalibration:
    """The proposal and checks for ``target`` from the measured values (see the module
    docstring).

    Raises:
        ValueError: fewer than 2 answer runs (no standard deviation).
    """
    if len(answer) < 2:
        raise ValueError(f"{target.id}: {len(answer)} run(s) with a value; a standard deviation "
                         "needs at least 2 (calibrate with --runs 3 or more)")
    margin = MARGIN_SD * statistics.stdev(answer)
    up = target.op == ">="
    proposed = min(answer) - margin if up else max(answer) + margin
    best_base = (max(baseline) if up else min(baseline)) if baseline else None
    misses = best_base is not None and (best_base < proposed - margin if up
                                        else best_base > proposed + margin)
    return TargetCalibration(
        id=target.id, metric=target.metric, op=target.op, current=target.value,
        answer=answer, baseline=baseline, proposed=proposed, margin=margin,
        current_ok=target.value <= proposed if up else target.value >= proposed,
        baseline_misses=misses)


async def calibrate(lab: str, flags: Mapping[str, Any], runs: int = 3,
                    echo: Callable[[str], None] = print) -> dict:
    """Run ``lab``'s run cell ``runs`` times with ``flags`` on this machine's profile and judge
    each target (:func:`judge`).

    Returns:
        ``{"lab", "profile", "flags", "runs": [each run's metrics and baseline metrics],
        "targets": [TargetCalibration as dicts], "valid": bool, "current_ok": bool}``.

    Raises:
        LabError: an unknown lab, one without targets, or flags the lab refuses.
        ServerError: a server failed (its log tail included).
    """
    pin = setup(lab)
    sc = scenario(lab, pin.profile)
    if not sc.targets:
        raise LabError(f"{lab} has no performance targets to calibrate")
    measured: list[dict] = []
    with tempfile.TemporaryDirectory(prefix=f"calibrate-{lab}-") as tmp:
        for i in range(runs):
            data = await run(lab, flags, results_dir=Path(tmp))
            measured.append(data)
            values = ", ".join(f"{t.metric} {_fmt(data['metrics'].get(t.metric))}"
                               for t in sc.targets)
            echo(f"calibrate {lab}: run {i + 1}/{runs}: {values}")
    judged = [judge(t, [float(d["metrics"][t.metric]) for d in measured
                        if isinstance(d["metrics"].get(t.metric), (int, float))],
                    [v for d in measured if (v := _baseline_value(d, t.metric)) is not None])
              for t in sc.targets]
    return {
        "lab": lab, "profile": pin.profile, "flags": dict(flags),
        "runs": [{"metrics": d["metrics"], "baseline": (d.get("baseline") or {}).get("metrics"),
                  "hardware": d.get("hardware"), "vllm_version": d.get("vllm_version"),
                  "created_at": d.get("created_at")} for d in measured],
        "targets": [asdict(j) for j in judged],
        "valid": any(j.baseline_misses for j in judged),
        "current_ok": all(j.current_ok for j in judged),
    }


def report(result: dict) -> str:
    """``result`` of :func:`calibrate` as lines a person reads."""
    lines = [f"{result['lab']} on {result['profile']}, answer {json.dumps(result['flags'])}, "
             f"{len(result['runs'])} runs:"]
    for t in result["targets"]:
        answer = ", ".join(f"{v:.4g}" for v in t["answer"])
        base = ", ".join(f"{v:.4g}" for v in t["baseline"]) or "-"
        now = "ok" if t["current_ok"] else "STRICTER than the runs allow"
        miss = "misses" if t["baseline_misses"] else "does NOT miss"
        lines.append(
            f"  {t['id']}: {t['metric']} answer [{answer}], baseline [{base}]; proposed "
            f"{t['op']} {t['proposed']:.4g} (margin {t['margin']:.3g}); now {t['op']} "
            f"{t['current']:g}: {now}; the baseline {miss} it by more than the margin")
    lines.append("valid: " + ("yes, the baseline misses at least one target by more than the "
                              "margin" if result["valid"] else
                              "NO: the baseline misses no target by more than the margin"))
    return "\n".join(lines)

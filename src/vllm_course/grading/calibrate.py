"""Calibrating a performance lab on this machine (``vllm-course calibrate``).

:func:`calibrate` runs the lab's own run cell (:func:`vllm_course.grading.run`) at least 3 times
with an answer, so the numbers come from the same code path, servers and checks as a graded run,
and judges each target by the labs' rule (:func:`vllm_course.grading.targets.judge`): the
proposal, the margin, the value grading on this machine would use and whether the starting
configuration misses it. Its result, written as JSON, is what
:func:`vllm_course.grading.targets.local_calibration` reads back on a profile the lab brings no
measured targets for.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vllm_course.grading.perf import measured_value
from vllm_course.grading.results import LabError
from vllm_course.grading.session import calibrating, run, scenario, setup
from vllm_course.grading.spec import SCENARIOS, ProfileJob, ProfileLoad
from vllm_course.grading.targets import TargetCalibration, judge

__all__ = ["TargetCalibration", "calibrate", "judge", "report"]


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _baseline_value(data: dict, metric: str) -> float | None:
    if metric.endswith("_vs_baseline"):
        return 1.0
    return measured_value(data.get("baseline") or {}, metric)


def _run_record(data: dict) -> dict:
    """One run of the lab's run cell (its results file's dict) as a calibration keeps it."""
    return {"metrics": data["metrics"], "baseline": (data.get("baseline") or {}).get("metrics"),
            "load": data.get("load"), "hardware": data.get("hardware"),
            "vllm_version": data.get("vllm_version"), "created_at": data.get("created_at")}


def _from_record(record: dict) -> dict:
    """A kept run (:func:`_run_record`) back in a results file's shape, as the judging reads."""
    return {"metrics": record["metrics"], "load": record.get("load"),
            "baseline": None if record.get("baseline") is None
            else {"metrics": record["baseline"]}}


async def calibrate(lab: str, flags: Mapping[str, Any], runs: int = 3,
                    echo: Callable[[str], None] = print,
                    load: ProfileLoad | None = None, job: ProfileJob | None = None,
                    resume: Sequence[dict] = (),
                    on_run: Callable[[list[dict]], None] | None = None) -> dict:
    """Run ``lab``'s run cell ``runs`` times with ``flags`` on this machine's profile and judge
    each target against the lab's own (never against an earlier calibration file).

    Args:
        load: for a lab graded at a Poisson rate (``Scenario.per_profile``), the rate and SLO
            to run at instead of the profile's (``--rate``, ``--slo-ttft-ms``,
            ``--slo-tpot-ms``).
        job: the number of requests and the starting configuration to run with instead of
            the profile's (``--requests``, ``--baseline-flags``): to size a job for a machine.
        resume: runs kept from a calibration with the same lab, profile, flags, load and job
            that stopped early (the ``runs`` of its partial file); they count towards ``runs``
            and only the rest are run.
        on_run: called after each finished run with every run so far (``resume``'s first), as
            the result's ``runs`` holds them: to save them before the calibration ends.

    Returns:
        ``{"lab", "profile", "flags", "load" (the rate and SLO run at, for a lab graded at a
        Poisson rate, else ``None``), "job" (``job`` as a dict, or ``None``), "runs": [each
        run's metrics and baseline metrics],
        "targets": [TargetCalibration as dicts], "valid": bool, "current_ok": bool,
        "applies": bool}``; ``applies``: the lab brings no measured targets for this profile,
        so this calibration, if valid, sets the targets grading here uses.

    Raises:
        LabError: an unknown lab, one without targets, flags the lab refuses, or ``load`` for
            a lab that sends at no per-profile rate, or a ``job`` with a starting configuration
            for a lab that runs none.
        ServerError: a server failed (its log tail included).
        ValueError: ``resume`` holds more runs than ``runs``.
    """
    if len(resume) > runs:
        raise ValueError(f"{len(resume)} runs are kept, more than the {runs} asked for")
    if load is not None and lab in SCENARIOS and not SCENARIOS[lab].per_profile:
        raise LabError(f"{lab} sends its requests at no per-profile rate: --rate and --slo-* "
                       "apply only to a lab graded at a Poisson rate (lab04)")
    if job is not None and job.baseline_args is not None and lab in SCENARIOS \
            and SCENARIOS[lab].baseline_args is None:
        raise LabError(f"{lab} runs no starting configuration beside the answer: "
                       "--baseline-flags applies to a lab that does (lab02 on)")
    records = [dict(r) for r in resume]
    with calibrating(lab, load, job), \
            tempfile.TemporaryDirectory(prefix=f"calibrate-{lab}-") as tmp:
        pin = setup(lab)
        sc = scenario(lab, pin.profile)
        if not sc.targets:
            raise LabError(f"{lab} has no performance targets to calibrate")
        for i in range(len(records), runs):
            data = await run(lab, flags, results_dir=Path(tmp))
            records.append(_run_record(data))
            if on_run is not None:
                on_run(list(records))
            values = ", ".join(f"{t.metric} {_fmt(data['metrics'].get(t.metric))}"
                               for t in sc.targets)
            echo(f"calibrate {lab}: run {i + 1}/{runs}: {values}")
    measured = [_from_record(r) for r in records]
    judged = [judge(t, [v for d in measured if (v := measured_value(d, t.metric)) is not None],
                    [v for d in measured if (v := _baseline_value(d, t.metric)) is not None])
              for t in sc.targets]
    return {
        "lab": lab, "profile": pin.profile, "flags": dict(flags),
        "load": ({"rate_rps": sc.per_profile[pin.profile].rate_rps, "slo": sc.slo.model_dump(),
                  "vs_start": sc.per_profile[pin.profile].vs_start}
                 if sc.per_profile and sc.slo is not None else None),
        "job": None if job is None else job.model_dump(),
        "runs": records,
        "targets": [asdict(j) for j in judged],
        "valid": any(j.baseline_misses for j in judged),
        "current_ok": all(j.current_ok for j in judged),
        "applies": pin.profile not in SCENARIOS[lab].calibrated,
    }


def report(result: dict) -> str:
    """``result`` of :func:`calibrate` as lines a person reads."""
    lines = [f"{result['lab']} on {result['profile']}, answer {json.dumps(result['flags'])}, "
             f"{len(result['runs'])} runs:"]
    if result.get("load"):
        load = result["load"]
        limits = ", ".join(f"{k} <= {v:g}" for k, v in load["slo"].items() if v)
        if load.get("vs_start"):
            rates = ", ".join(f"{r['load']['rate_rps']:.2f}" for r in result["runs"]
                              if r.get("load"))
            lines.append(f"  at Poisson {load['vs_start']:g} x the starting configuration's "
                         f"capacity measured in each run ({rates} requests/s), SLO {limits}")
        else:
            lines.append(f"  at Poisson {load['rate_rps']:g} requests/s, SLO {limits}")
    if result.get("job"):
        job = result["job"]
        what = [f"{job['num_requests']} requests"] if job.get("num_requests") else []
        if job.get("baseline_args") is not None:
            what.append(f"starting configuration {json.dumps(job['baseline_args'])}")
        lines.append(f"  job: {', '.join(what)} (not the lab's own on this profile)")
    durations = [((r.get("metrics") or {}).get("duration_s"),
                  (r.get("baseline") or {}).get("duration_s")) for r in result["runs"]]
    if durations and all(a is not None for a, _ in durations):
        lines.append("  run seconds, answer / baseline: " + ", ".join(
            f"{a:.1f} / {'-' if b is None else f'{b:.1f}'}" for a, b in durations))
    for t in result["targets"]:
        answer = ", ".join(f"{v:.4g}" for v in t["answer"])
        base = ", ".join(f"{v:.4g}" for v in t["baseline"]) or "-"
        now = "ok" if t["current_ok"] else "STRICTER than the runs allow"
        miss = "misses" if t["baseline_misses"] else "does NOT miss"
        lines.append(
            f"  {t['id']}: {t['metric']} answer [{answer}], baseline [{base}]; proposed "
            f"{t['op']} {t['proposed']:.4g} (margin {t['margin']:.3g}); the lab's own "
            f"{t['op']} {t['current']:g}: {now}; calibrated {t['op']} {t['applied']:g}; the "
            f"baseline {miss} it by more than the margin")
    lines.append("valid: " + ("yes, the baseline misses at least one target by more than the "
                              "margin" if result["valid"] else
                              "NO: the baseline misses no target by more than the margin"))
    if result.get("applies") and result["valid"]:
        lines.append(f"grading {result['lab']} on this machine's profile ({result['profile']}) "
                     "uses the calibrated targets once this file is in the course home's "
                     "calibration folder (the default --out)")
    elif result.get("applies"):
        lines.append(f"this calibration sets nothing: {result['lab']} keeps its estimated "
                     f"targets on {result['profile']}; try another answer or load")
    else:
        lines.append(f"{result['lab']} brings targets measured on {result['profile']}: they "
                     "grade here; this file is a report")
    return "\n".join(lines)

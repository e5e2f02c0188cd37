"""How a performance lab's targets are set from measured runs, and the targets an instructor
calibrated on this machine.

The rule (``labs/README.md``, "How targets are set"): run the lab's own run cell at least 3
times with a solution, take the worst run and move it by 3 standard deviations towards leniency
(``>=``: worst - 3 sd; ``<=``: worst + 3 sd). The lab is valid on a machine only if its starting
configuration (the baseline each run measures first) misses at least one target by more than
that margin: otherwise a learner who changes nothing could pass by luck.

``vllm-course calibrate LAB`` writes its runs to ``calibration/<profile>/<lab>.json`` under the
course home. On a profile whose targets the lab does not bring measured (``Scenario.calibrated``
has no entry: an estimate, or the generic ``gpu`` profile), a valid calibration file then sets
the targets that grading on this machine uses (:func:`local_calibration`): each target is the
lab's own or the calibrated proposal, whichever is more lenient. A calibration never makes a
target stricter than the lab's design; it relaxes a target the solution cannot reliably reach on
this machine to what it does reach, and only while the starting configuration still misses at
least one target by more than the margin. A lab graded at a Poisson rate also takes the rate and
SLO the calibration ran at (``vllm-course calibrate lab04 --rate ...``).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from vllm_course.config import SLO
from vllm_course.errors import stopped_claim
from vllm_course.grading.results import LabError
from vllm_course.grading.spec import SCENARIOS, ProfileJob, ProfileLoad, Scenario, Target
from vllm_course.models import course_home

MARGIN_SD = 3.0
"""The margin, in standard deviations of the solution's runs."""

DIGITS = 2
"""Significant digits a proposal is rounded to (towards leniency) before it grades."""


@dataclass(frozen=True)
class TargetCalibration:
    """One target's measurements over the calibration runs.

    Attributes:
        id, metric, op, current: the target as the lab brings it.
        answer: the metric in each run with the calibrated answer.
        baseline: the same metric of each run's baseline (the starting configuration); a ratio
            to the baseline is 1 there by definition.
        proposed: worst answer run moved by :data:`MARGIN_SD` standard deviations towards
            leniency: the strictest target the answer still meets with that margin.
        margin: :data:`MARGIN_SD` × the answer runs' sample standard deviation.
        current_ok: the lab's target is at least as lenient as ``proposed``.
        applied: what grading on a machine calibrated by these runs uses: ``current`` or
            ``proposed`` rounded towards leniency to :data:`DIGITS` significant digits,
            whichever is more lenient.
        baseline_misses: even the baseline's best run misses ``applied`` by more than
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
    applied: float
    baseline_misses: bool


def lenient(value: float, op: str, digits: int = DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits towards leniency: down for a ``>=``
    target (3.543 -> 3.5), up for a ``<=`` one (0.3712 -> 0.38)."""
    if value == 0 or not math.isfinite(value):
        return value
    step = 10.0 ** (math.floor(math.log10(abs(value))) - digits + 1)
    steps = value / step
    steps = math.floor(steps + 1e-9) if op == ">=" else math.ceil(steps - 1e-9)
    return round(steps * step, 12)


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
    applied = (min if up else max)(target.value, lenient(proposed, target.op))
    best_base = (max(baseline) if up else min(baseline)) if baseline else None
    misses = best_base is not None and (best_base < applied - margin if up
                                        else best_base > applied + margin)
    return TargetCalibration(
        id=target.id, metric=target.metric, op=target.op, current=target.value,
        answer=answer, baseline=baseline, proposed=proposed, margin=margin,
        current_ok=target.value <= proposed if up else target.value >= proposed,
        applied=applied, baseline_misses=misses)


def calibration_root() -> Path:
    """The folder ``vllm-course calibrate`` writes to by default: ``calibration/`` in the
    course home (``$VLLM_COURSE_HOME`` or ``~/.cache/vllm-course``)."""
    return course_home() / "calibration"


def calibration_path(lab: str, profile: str) -> Path:
    """Where ``vllm-course calibrate`` writes ``lab``'s runs on ``profile`` by default, and
    where :func:`local_calibration` reads them."""
    return calibration_root() / profile / f"{lab}.json"


@dataclass(frozen=True)
class LocalCalibration:
    """A calibration file of one lab on this machine's profile.

    Attributes:
        path: the file.
        valid: the baseline misses at least one applied target by more than its margin; only
            then does the file set the targets.
        scenario: the lab with the calibrated targets (and, for a lab graded at a Poisson rate,
            the calibrated rate and SLO on this profile; for a calibration run with its own job,
            that job); ``None`` when not ``valid``.
        note: one line for the set-up cell: what the file sets, or why it sets nothing.
    """

    path: Path
    valid: bool
    scenario: Scenario | None
    note: str


def local_calibration(lab: str, profile: str, bundled: Scenario) -> LocalCalibration | None:
    """The calibration of ``lab`` on ``profile`` that ``vllm-course calibrate`` wrote to
    :func:`calibration_path`, judged again from its runs with :func:`judge` against the lab's
    targets (``bundled``: the lab as the library brings it). ``None`` when there is no file, or
    when the lab brings targets measured on ``profile`` (those always grade).

    Raises:
        LabError: the file is not a calibration of ``lab`` on ``profile`` with a value per run
            for each of the lab's targets (the message names the file and says to calibrate
            again or delete it).
    """
    if profile in bundled.calibrated:
        return None
    path = calibration_path(lab, profile)
    if not path.is_file():
        return None
    redo = f"run `vllm-course calibrate {lab}` again or delete it"
    try:
        data = json.loads(path.read_text())
        if data["lab"] != lab or data["profile"] != profile:
            raise LabError(f"{path} is a calibration of {data['lab']} on {data['profile']}, not "
                           f"of {lab} on {profile}: {redo}")
        runs = {t["id"]: t for t in data["targets"]}
        judged = []
        for t in bundled.targets:
            if t.id not in runs:
                raise LabError(f"{path} has no runs for {lab}'s target {t.id} (the lab changed "
                               f"since): {redo}")
            judged.append(judge(t, [float(v) for v in runs[t.id]["answer"]],
                                [float(v) for v in runs[t.id]["baseline"]]))
        conditions = _calibrated_conditions(data, path, profile, bundled)
        when = min(str(r.get("created_at") or "?") for r in data["runs"])
        flags = json.dumps(data["flags"])
    except LabError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:   # pydantic's errors: ValueError
        raise LabError(f"{path} is not a calibration file of {lab} ({type(exc).__name__}: "
                       f"{exc}): {redo}") from None
    if not any(j.baseline_misses for j in judged):
        return LocalCalibration(path, False, None, (
            f"{path}: not valid (the starting configuration misses no target by more than the "
            "margin), so it sets nothing: the targets stay the lab's own estimates"))
    targets = tuple(_applied(t, j) for t, j in zip(bundled.targets, judged, strict=True))
    how = (f"vllm-course calibrate on this machine ({len(data['runs'])} runs of {flags} from "
           f"{when}; {path})")
    update: dict = {"targets": targets, "calibrated": {**bundled.calibrated, profile: how},
                    **conditions}
    changed = [f"{t.id} {t.op} {t.value:g}" for t, b in zip(targets, bundled.targets, strict=True)
               if t.value != b.value]
    note = f"{path} sets the targets" + (
        f" (relaxed: {', '.join(changed)})" if changed else " (the lab's own values)")
    return LocalCalibration(path, True, bundled.model_copy(update=update), note)


def _calibrated_conditions(data: dict, path: Path, profile: str, bundled: Scenario) -> dict:
    """The parts of ``bundled`` a calibration file (``data``, read from ``path``) ran with on
    ``profile`` other than the lab's own, as a :class:`Scenario` update: the rate and SLO of a
    lab graded at a Poisson rate (``per_profile``) and a job of its own (``profile_jobs``).

    Raises:
        KeyError, TypeError, ValueError: the file's ``load`` or ``job`` is malformed.
    """
    update: dict = {}
    how = f"calibrated here ({path})"
    if (load := data.get("load")) is not None:
        update["per_profile"] = {**bundled.per_profile, profile: ProfileLoad(
            rate_rps=load["rate_rps"], slo=SLO(**load["slo"]), vs_start=load.get("vs_start"),
            how=how)}
    if job := data.get("job"):
        update["profile_jobs"] = {**bundled.profile_jobs,
                                  profile: ProfileJob(**{**job, "how": how})}
    return update


def _applied(target: Target, judged: TargetCalibration) -> Target:
    """``target`` at its calibrated value; partial credit keeps its proportion to the value
    (3.0 with credit from 2.4 becomes 2.6 with credit from 2.08)."""
    if judged.applied == target.value:
        return target
    zero_at = target.zero_at
    if zero_at is not None and target.value:
        zero_at = judged.applied * zero_at / target.value
    partial = "" if zero_at is None else f", partial credit from {zero_at:.3g}"
    return target.model_copy(update={
        "value": judged.applied, "zero_at": zero_at,
        "about": f"{target.about} [calibrated on this machine: {target.op} "
                 f"{judged.applied:g}{partial}]"})


H200_RUNS = {"lab02": "lab02-calibration.json", "lab03": "lab03-job512.json",
             "lab04": "lab04-vs-start.json"}
"""The calibration runs on the course's H200 that set each lab's ``h200`` targets, as
``vllm-course calibrate`` wrote them (files under ``reference/h200/labs/``, whose README has the
commands and tables). Every lab's set-up cell shows them, whatever the machine."""


def h200_runs(lab: str) -> dict | None:
    """The committed H200 calibration runs of ``lab`` (:data:`H200_RUNS`), or ``None`` if it has
    none (lab01, graded on definitions, has no targets to calibrate)."""
    from vllm_course.models import REPO_ROOT

    name = H200_RUNS.get(lab)
    if name is None:
        return None
    return json.loads((REPO_ROOT / "reference" / "h200" / "labs" / name).read_text())


def _solution_run_line(lab: str) -> str:
    """For a lab with no targets to calibrate (lab01), one line on the reference runner's
    execution of its solution notebook on the H200 (``reference/h200/labs/<lab>/run.json``):
    when, with which vLLM, and whether every cell, hidden tests included, ran; or that it is
    pending."""
    from vllm_course.models import REPO_ROOT

    where = f"reference/h200/labs/{lab}/"
    try:
        run = json.loads((REPO_ROOT / where / "run.json").read_text())
    except (OSError, ValueError):
        return ("on the course's H200: pending (the solution notebook has not been run there "
                "yet; reference/h200/labs/README.md)")
    said = (f"stopped: {stopped_claim(run['failed'])}" if run.get("failed") else
            "every cell ran and every hidden test passed; this lab grades definitions, so it "
            "sets no target")
    return (f"on the course's H200 (vLLM {run.get('vllm_version', '?')}, "
            f"{run.get('measured', '?')}; {where}): the solution notebook ran: {said}")


def h200_lines(lab: str) -> list[str]:
    """What the course's H200 measured for ``lab``, in lines for the set-up cell: where and when,
    the job and load it ran, then each target's metric in every solution run beside the
    starting configuration's (3 significant digits); for a lab without targets to calibrate
    (lab01), one line on its solution notebook's run there, or that it is pending. The
    solution's flags are left out: a learner reads these lines before answering."""
    try:
        data = h200_runs(lab)
    except (OSError, ValueError) as exc:     # a checkout without reference/ (not `make setup`)
        return [f"on the course's H200: reference/h200/labs/{H200_RUNS[lab]} of the course's "
                f"repository could not be read here ({type(exc).__name__})"]
    if data is None:
        return [_solution_run_line(lab)]
    runs = data["runs"]
    when = sorted({(r.get("created_at") or "?")[:10] for r in runs})
    versions = sorted({r.get("vllm_version") or "?" for r in runs})
    lines = [f"on the course's H200 (vLLM {', '.join(versions)}, {', '.join(when)}; "
             f"reference/h200/labs/{H200_RUNS[lab]}), {len(runs)} runs of the solution "
             "(its flags are not shown here: they are the answer):"]
    if (job := data.get("job")) and job.get("num_requests"):
        lines.append(f"  a job of {job['num_requests']} requests, starting configuration "
                     f"{json.dumps(job.get('baseline_args'))}")
    if (load := data.get("load")) and load.get("vs_start"):
        rates = ", ".join(f"{r['load']['rate_rps']:.2f}" for r in runs if r.get("load"))
        limits = ", ".join(f"{k} <= {v:g}" for k, v in load["slo"].items() if v)
        lines.append(f"  at {load['vs_start']:g} x the starting configuration's capacity "
                     f"({rates} requests/s), SLO {limits}")
    start = ("vLLM's defaults" if SCENARIOS[lab].baseline_args == {} and not data.get("job")
             else "the starting configuration")
    for t in data["targets"]:
        answer = ", ".join(f"{v:.3g}" for v in t["answer"])
        base = ", ".join(f"{v:.3g}" for v in t["baseline"]) or "-"
        lines.append(f"  {t['id']} ({t['metric']}): the solution {answer}; {start} {base}")
    return lines

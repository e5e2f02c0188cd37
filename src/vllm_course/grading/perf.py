"""The performance labs (lab02 on): points for measured numbers against the scenario's targets.

The run cell (:func:`vllm_course.grading.run`) writes the learner's run's ``metrics`` (and, for a
scenario with a baseline, the baseline's run and ``output_tok_s_vs_baseline``) to the results file;
each test cell calls :func:`score_target` with one of the scenario's :class:`Target` ids. The
targets come from the library's scenario, never from the results file.
"""

from __future__ import annotations

from pathlib import Path

from vllm_course.grading.results import RESULTS_DIR, dropped_requests, load_results
from vllm_course.grading.session import quiet_stderr, scenario


def measured_value(data: dict, metric: str) -> float | None:
    """``metric`` of a results file's (or its baseline's) ``metrics`` as a float; ``None`` when
    the run measured none."""
    value = (data.get("metrics") or {}).get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def score_target(lab: str, target_id: str, results_dir: Path | str = RESULTS_DIR) -> float:
    """Points for one target (a test cell's last expression: nbgrader takes a number as partial
    credit): all of them when the measured value meets the target, a linear share between the
    target's ``zero_at`` and its value, else 0; and 0 while a target it depends on
    (``only_if``) is not met, or when a request of the run (or of its baseline's) did not
    complete (:func:`~vllm_course.grading.results.dropped_requests`). Prints the measured
    value, the target and the points.

    Raises:
        LabError: the results file is not trustworthy (see
            :func:`vllm_course.grading.load_results`).
        KeyError: ``lab`` has no target ``target_id``.
    """
    with quiet_stderr():
        data = load_results(lab, results_dir)
        sc = scenario(lab, data.get("profile"))     # the targets on the profile it ran on
        target = sc.target(target_id)
        measured = measured_value(data, target.metric)
        if (why := dropped_requests(data)) is not None:
            print(f"{target.id}: {why}: 0 / {target.points:g} points")
            return 0.0
        if measured is None:
            print(f"{target.id}: the run measured no {target.metric}: 0 / {target.points:g} points")
            return 0.0
        for other in map(sc.target, target.only_if):
            got = measured_value(data, other.metric)
            if got is None or not other.met(got):
                print(f"{target.id}: {target.metric} {measured:.4g}, but it scores only in a run "
                      f"that meets {other.id} ({other.metric} {other.op} {other.value:g}; "
                      f"measured {got}): 0 / {target.points:g} points")
                return 0.0
        points = round(target.credit(measured) * target.points, 2)
        print(f"{target.id}: {target.metric} {measured:.4g}, target {target.op} "
              f"{target.value:g} -> {points:g} / {target.points:g} points ({target.about})")
        return points

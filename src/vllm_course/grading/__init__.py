"""Graded labs: the locked cells of a lab notebook, the results file they write, and the points
its test cells award (``labs/README.md`` has the workflow and the threat model).

A lab notebook (``labs/source/labNN/labNN.ipynb``) calls, from locked cells, :func:`setup`
(pins the hardware profile and prints the scenario), :func:`run` (a fresh server of its own,
the scenario's workload, ``results/<lab>.json`` with a nonce and the server's counters) and,
from its test cells, a scoring function such as :func:`score_answers`. nbgrader executes the
whole notebook again when it grades, so the numbers graded are measured then.

``session`` holds what every lab shares (the pin, the flags a lab accepts, the run);
``results`` the results file and the proof that it is this kernel's own; ``lab01`` the
reference definitions lab01 grades against; ``perf`` the points of the performance labs (lab02
on) against their scenario's targets (``spec``); ``targets`` how runs set a target and the
targets calibrated on this machine; ``calibrate`` the runs that set them.

May import: everything below ``tuning`` (``experiment``, ``server``, ``env``, ``metrics``,
``records``, ``config``); it sits beside ``tuning``, never imports it, and only ``cli`` and the
notebooks import it.
"""

from vllm_course.grading.lab01 import (
    LAB01_FUNCTIONS,
    PERCENTILES,
    answers_of,
    example_record,
    reference_answers,
    score_answers,
)
from vllm_course.grading.perf import score_target
from vllm_course.grading.results import RESULTS_DIR, LabError, load_results, results_path
from vllm_course.grading.session import LAB_IDS, Pin, run, scenario, scenario_args, setup
from vllm_course.grading.spec import SCENARIOS, Scenario, Target

__all__ = [
    "LAB01_FUNCTIONS", "LAB_IDS", "PERCENTILES", "RESULTS_DIR", "SCENARIOS", "LabError", "Pin",
    "Scenario", "Target", "answers_of", "example_record", "load_results", "reference_answers",
    "results_path", "run", "scenario", "scenario_args", "score_answers", "score_target", "setup",
]

"""Tuning is comparing: sweeps, SLO searches and compares, with a result cache.

This room holds what runs many experiments and compares them: :mod:`~.spec` (what an experiment
of many points is given), :mod:`~.grid` (sweeps of server settings x load levels), :mod:`~.slo`
(the highest load that meets an SLO), :mod:`~.comparison` (settings with repeats and a verdict),
:mod:`~.stats` (their intervals), :mod:`~.points` (plans, time estimates, data-frame rows),
:mod:`~.cache` (finished points are never run again) and :mod:`~.progress` (progress events,
ETA, progress bar). It builds on the rest of the package (``experiment.run_experiment`` runs
each point); nothing outside it imports it except the package's top level and the CLI.
"""

from vllm_course.tuning.cache import ResultCache
from vllm_course.tuning.comparison import CompareResult, CompareSpec, compare
from vllm_course.tuning.grid import SweepPoint, SweepResult, SweepSpec, plan, sweep
from vllm_course.tuning.progress import ProgressBar, Step
from vllm_course.tuning.slo import SLOSearchResult, SLOSearchSpec, slo_search
from vllm_course.tuning.spec import ExperimentSpec

__all__ = ["CompareResult", "CompareSpec", "ExperimentSpec", "ProgressBar", "ResultCache",
           "SLOSearchResult", "SLOSearchSpec", "Step", "SweepPoint", "SweepResult", "SweepSpec",
           "compare", "plan", "slo_search", "sweep"]

"""vLLM Throughput Tuning: measure and tune real vLLM servers (the course's library).

Notebooks and scripts use this curated API; importing it does not import vLLM.

The package is laid out by domain, one room (subpackage or module) per noun, on layers. A room
imports only from rooms on lower layers (tests/unit/test_layers.py reads every import and holds
this), bottom to top:

1. ``errors``, ``config`` (run specs), ``records`` (one request's timings), ``models`` (offline
   model cards): plain data.
2. ``env/`` (this machine, hardware profiles, doctor, telemetry), ``prom/`` (the server's
   ``/metrics``), ``metrics`` (client metrics, as ``vllm bench serve`` computes them).
3. ``workload/``: what to send.
4. ``server/`` (a vLLM process and its owner) and ``loadgen/`` (how to send; it takes a base URL
   and never imports ``server``).
5. ``results``: one saved run.
6. ``diagnosis/`` and ``plots``: read a run.
7. ``experiment``: one run, end to end (docs/architecture.md follows it step by step).
8. ``tuning/`` (many runs: sweeps, SLO searches, compares), ``grading/`` (the graded labs'
   locked cells and scores; ``labs/README.md``) and ``reference/`` (the GPU reference runs:
   chapters, labs and comparisons planned into device calls), which never import each other.
9. ``notebook`` and ``cli``: what learners touch; then this API and ``python -m vllm_course``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_course.config import (
        SLO,
        FileWorkload,
        LoadSpec,
        RunConfig,
        ServerConfig,
        SyntheticWorkload,
        TraceWorkload,
    )
    from vllm_course.diagnosis import Diagnosis, Finding, diagnose
    from vllm_course.experiment import run_experiment
    from vllm_course.loadgen import LoadHooks, run_load, warm_up
    from vllm_course.loadgen.selfcheck import ClientChecks
    from vllm_course.metrics import Dist, RunSummary, summarize
    from vllm_course.prom import ServerMetrics, TimeSeries
    from vllm_course.records import RequestRecord
    from vllm_course.results import RunResult
    from vllm_course.server import ServerError, ServerPool, UnknownFlagError, VLLMServer
    from vllm_course.tuning import (
        CompareResult,
        CompareSpec,
        ProgressBar,
        ResultCache,
        SLOSearchResult,
        SLOSearchSpec,
        Step,
        SweepResult,
        SweepSpec,
        compare,
        slo_search,
        sweep,
    )
    from vllm_course.workload import PromptTokenizer, Request, WorkloadError

_WHERE = {
    "ClientChecks": "vllm_course.loadgen.selfcheck",
    "CompareResult": "vllm_course.tuning",
    "CompareSpec": "vllm_course.tuning",
    "Diagnosis": "vllm_course.diagnosis",
    "Dist": "vllm_course.metrics",
    "FileWorkload": "vllm_course.config",
    "Finding": "vllm_course.diagnosis",
    "LoadHooks": "vllm_course.loadgen",
    "LoadSpec": "vllm_course.config",
    "ProgressBar": "vllm_course.tuning",
    "PromptTokenizer": "vllm_course.workload",
    "Request": "vllm_course.workload",
    "RequestRecord": "vllm_course.records",
    "ResultCache": "vllm_course.tuning",
    "RunConfig": "vllm_course.config",
    "RunResult": "vllm_course.results",
    "RunSummary": "vllm_course.metrics",
    "SLO": "vllm_course.config",
    "SLOSearchResult": "vllm_course.tuning",
    "SLOSearchSpec": "vllm_course.tuning",
    "ServerConfig": "vllm_course.config",
    "ServerError": "vllm_course.server",
    "ServerMetrics": "vllm_course.prom",
    "ServerPool": "vllm_course.server",
    "Step": "vllm_course.tuning",
    "SweepResult": "vllm_course.tuning",
    "SweepSpec": "vllm_course.tuning",
    "SyntheticWorkload": "vllm_course.config",
    "TimeSeries": "vllm_course.prom",
    "TraceWorkload": "vllm_course.config",
    "UnknownFlagError": "vllm_course.server",
    "VLLMServer": "vllm_course.server",
    "WorkloadError": "vllm_course.workload",
    "compare": "vllm_course.tuning",
    "diagnose": "vllm_course.diagnosis",
    "run_experiment": "vllm_course.experiment",
    "run_load": "vllm_course.loadgen",
    "slo_search": "vllm_course.tuning",
    "summarize": "vllm_course.metrics",
    "sweep": "vllm_course.tuning",
    "warm_up": "vllm_course.loadgen",
}
"""Each public name and the module it lives in: imported on first use (PEP 562), so that
a process that needs one part (a client worker process imports the load generator) does
not pay for importing every other part."""

__version__ = "0.1.0"

__all__ = [
    "ClientChecks",
    "CompareResult",
    "CompareSpec",
    "Diagnosis",
    "Dist",
    "FileWorkload",
    "Finding",
    "LoadHooks",
    "LoadSpec",
    "ProgressBar",
    "PromptTokenizer",
    "Request",
    "RequestRecord",
    "ResultCache",
    "RunConfig",
    "RunResult",
    "RunSummary",
    "SLO",
    "SLOSearchResult",
    "SLOSearchSpec",
    "ServerConfig",
    "ServerError",
    "ServerMetrics",
    "ServerPool",
    "Step",
    "SweepResult",
    "SweepSpec",
    "SyntheticWorkload",
    "TimeSeries",
    "TraceWorkload",
    "UnknownFlagError",
    "VLLMServer",
    "WorkloadError",
    "compare",
    "diagnose",
    "run_experiment",
    "run_load",
    "slo_search",
    "summarize",
    "sweep",
    "warm_up",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vllm_course' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

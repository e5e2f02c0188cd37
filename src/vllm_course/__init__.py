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
8. ``tuning/`` (many runs: sweeps, SLO searches, compares) and ``grading/`` (the graded labs'
   locked cells and scores; ``labs/README.md``), which never import each other.
9. ``notebook`` and ``cli``: what learners touch; then this API and ``python -m vllm_course``.
"""

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

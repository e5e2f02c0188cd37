"""vLLM Throughput Tuning: measure and tune real vLLM servers (the course's library).

Notebooks and scripts use this curated API; importing it does not import vLLM.
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
from vllm_course.loadgen import run_load
from vllm_course.metrics import Dist, RunSummary, summarize
from vllm_course.pool import ServerPool
from vllm_course.prom import ServerMetrics, TimeSeries
from vllm_course.records import RequestRecord
from vllm_course.results import RunResult
from vllm_course.selfcheck import ClientChecks
from vllm_course.server import ServerError, UnknownFlagError, VLLMServer
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
]

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
from vllm_course.workload import PromptTokenizer, Request, WorkloadError

__version__ = "0.1.0"

__all__ = [
    "ClientChecks",
    "Diagnosis",
    "Dist",
    "FileWorkload",
    "Finding",
    "LoadSpec",
    "PromptTokenizer",
    "Request",
    "RequestRecord",
    "RunConfig",
    "RunResult",
    "RunSummary",
    "SLO",
    "ServerConfig",
    "ServerError",
    "ServerMetrics",
    "ServerPool",
    "SyntheticWorkload",
    "TimeSeries",
    "TraceWorkload",
    "UnknownFlagError",
    "VLLMServer",
    "WorkloadError",
    "diagnose",
    "run_experiment",
    "run_load",
    "summarize",
]

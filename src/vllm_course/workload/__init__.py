"""What to send: the requests of a run, from any workload kind.

``request`` holds :class:`Request` and the JSONL format; ``tokenizer`` builds prompts of an
exact token length with the model's own tokenizer; ``synthetic`` draws a request set from a
seed; ``generators`` builds the course's scenario workloads (shared prefixes, priorities,
multi-turn chats) from YAML; ``lengths`` holds their length distributions; ``trace_rows`` reads
public traces (Azure, Mooncake) and ``trace`` turns them into requests that replay their
timing; ``prefix`` computes what a prefix cache
can share; ``stats`` describes a request set (:class:`WorkloadStats`). :func:`load_requests` is
the one place a run config's workload becomes requests.

May import: ``config``, ``errors``, ``models`` and ``metrics`` (it opens no sockets).
"""

from __future__ import annotations

from vllm_course.config import (
    Endpoint,
    FileWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadSpec,
)
from vllm_course.workload import trace
from vllm_course.workload.request import (
    Message,
    Request,
    WorkloadError,
    check_endpoint,
    json_object,
    read_jsonl,
    write_jsonl,
)
from vllm_course.workload.synthetic import synthesize, warmup_requests
from vllm_course.workload.tokenizer import PromptTokenizer

__all__ = [
    "Message", "PromptTokenizer", "Request", "WorkloadError", "check_endpoint", "json_object",
    "load_requests", "read_jsonl", "synthesize", "warmup_requests", "write_jsonl",
]


def load_requests(spec: WorkloadSpec, model: str, endpoint: Endpoint) -> list[Request]:
    """The requests of any workload kind: synthetic, a JSONL file, or a trace (``kind: trace``).

    Args:
        spec: the run config's ``workload:`` section.
        model: the served model (its tokenizer builds and counts the prompts).
        endpoint: ``completions`` or ``chat``.

    Raises:
        WorkloadError: the workload could not be read or built (naming ``path:line``), or
            token-id prompts were meant for the chat endpoint.
    """
    if isinstance(spec, TraceWorkload):
        return trace.import_trace(spec, model, endpoint)
    if isinstance(spec, FileWorkload):
        requests = read_jsonl(spec.path, spec.num_requests)
        check_endpoint(requests, endpoint, str(spec.path))
        return requests
    if isinstance(spec, SyntheticWorkload):
        return synthesize(spec, PromptTokenizer(model), endpoint)
    raise TypeError(f"not a workload spec: {spec!r}")

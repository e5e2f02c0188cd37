"""Why a vLLM server did not start: :class:`ServerError` with a cause read from its log and advice
on what to change (:func:`classify_failure`), and the log's last lines (:func:`tail`)."""

from __future__ import annotations

import re
from pathlib import Path

LOG_TAIL_LINES = 40


class ServerError(RuntimeError):
    """A vLLM server failed to start or died.

    Attributes:
        cause: ``bad_flag``, ``bad_value``, ``out_of_memory``, ``port_in_use``, ``model_not_found``,
            ``max_model_len``, ``timeout``, ``crashed`` or ``unknown``.
        log_tail: the last lines of the server log.
        log_path: the full log.
    """

    def __init__(
        self, message: str, cause: str = "unknown", log_tail: str = "", log_path: Path | None = None
    ):
        full = message
        if log_tail:
            full += f"\n--- last lines of {log_path or 'the server log'} ---\n{log_tail}"
        super().__init__(full)
        self.cause = cause
        self.log_tail = log_tail
        self.log_path = log_path


class UnknownFlagError(ServerError):
    """A flag the installed vLLM does not know; raised before anything is launched."""



_CAUSES = [
    ("port_in_use", r"Address already in use|Errno 98"),
    (
        "out_of_memory",
        r"out of memory|OutOfMemoryError|Available memory on node .* less than|"
        r"No available memory for the cache blocks|Insufficient memory|Cannot allocate memory",
    ),
    (
        "max_model_len",
        r"max_model_len.*(larger|greater) than|KV cache is needed, which is larger than",
    ),
    (
        "model_not_found",
        r"not a valid model identifier|Repository Not Found|does not appear to have|"
        r"Invalid repository ID|No such file or directory.*config\.json|"
        r"Can't load the configuration|couldn't connect to 'https://huggingface.co'|"
        r"Repo id must be in the form|outgoing traffic has been disabled|"
        r"LocalEntryNotFoundError|GatedRepoError|RepositoryNotFoundError",
    ),
    ("bad_flag", r"unrecognized arguments|error: argument|invalid choice"),
]

ADVICE = {
    "port_in_use": "another process holds the port; leave port unset to pick a free one",
    "out_of_memory": "lower --gpu-memory-utilization / --kv-cache-memory-bytes, --max-model-len "
    "or --max-num-seqs, or stop other servers (`vllm-course servers list`)",
    "max_model_len": "the KV cache cannot hold one request of --max-model-len tokens: lower "
    "--max-model-len or give the KV cache more memory",
    "model_not_found": "check the model name: a card (tiny-mistral, mistral-7b-v0.3), a local "
    "path, or a hub id (needs network and, for gated models, HF_TOKEN)",
    "bad_flag": "vLLM rejected a flag or value; see the log lines below",
    "timeout": "the server did not become healthy in time; see the log lines below",
    "crashed": "the server process exited; see the log lines below",
    "unknown": "see the log lines below",
}


def classify_failure(log_text: str) -> str:
    """The likely cause of a failed start from the log: one of :attr:`ServerError.cause`."""
    for cause, pattern in _CAUSES:
        if re.search(pattern, log_text, re.I):
            return cause
    return "unknown"



def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if unreadable)."""
    try:
        data = path.read_bytes()[-200_000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])

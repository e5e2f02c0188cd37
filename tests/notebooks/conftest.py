"""Chapter notebooks, each executed top to bottom in a fresh kernel against real vLLM.

This pytest session is the CI job's owner of servers: it owns one ServerPool and
lends it to the kernels through a PoolBroker (``VLLM_COURSE_POOL``), so chapters that ask for
the same settings share one server instead of starting their own. Every server is stopped at the
end of the session and checked for survivors.
"""

from __future__ import annotations

import os

import psutil
import pytest

from vllm_course import env
from vllm_course.server import ServerPool
from vllm_course.server.broker import ENV_VAR, PoolBroker


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def broker_url():
    if env.vllm_version() is None:
        pytest.fail("vLLM is not installed: run `make setup` (chapters run real servers)")
    profile = env.current_profile()
    pool = ServerPool(max_live=profile.max_live_servers, profile_args=profile.server_args)
    pids: set[int] = set()
    original = pool.acquire

    def acquire(config, log_path=None):
        server = original(config, log_path=log_path)
        pids.add(server.proc.pid)
        return server

    pool.acquire = acquire
    original_prestart = pool.prestart

    def prestart(configs):
        servers = original_prestart(configs)
        pids.update(s.proc.pid for s in servers)
        return servers

    pool.prestart = prestart
    try:
        with PoolBroker(pool) as url:
            yield url
    finally:
        pool.close()
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"vLLM servers still alive after the chapters: {alive}"


@pytest.fixture
def chapter_env(broker_url, monkeypatch):
    """The environment a chapter's kernel inherits: small workloads, the broker's servers."""
    monkeypatch.setenv("COURSE_SIZE", "ci")
    monkeypatch.setenv(ENV_VAR, broker_url)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return dict(os.environ)

"""A CPU server runs below the client's priority, in its own scheduling group too."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_course.server.process import CPU_SERVER_NICE, _child_setup


@pytest.fixture
def server_like() -> Iterator[int]:
    """A child started as VLLMServer.start starts a CPU server: a new session, _child_setup."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True,
                         preexec_fn=functools.partial(_child_setup, False, CPU_SERVER_NICE))
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def test_the_server_process_runs_at_the_cpu_servers_nice(server_like: int) -> None:
    expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + CPU_SERVER_NICE)
    assert os.getpriority(os.PRIO_PROCESS, server_like) == expected


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(),
                    reason="this kernel has no autogroups: the processes' nice values apply alone")
def test_the_servers_session_is_a_group_of_its_own_with_the_same_nice(server_like: int) -> None:
    # "/autogroup-N nice K": a new session is a new group, and the scheduler shares the CPU
    # between groups by the group's nice value, not the processes'
    group = Path(f"/proc/{server_like}/autogroup").read_text().split()
    ours = Path("/proc/self/autogroup").read_text().split()
    assert group[0] != ours[0]
    assert group[1:] == ["nice", str(CPU_SERVER_NICE)]

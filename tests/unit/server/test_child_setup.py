"""A CPU server runs below the client's priority, in its own scheduling group too."""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_course.server import process
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


def _autogroup(pid: int | str) -> tuple[str, int] | None:
    """(group, nice) from /proc/PID/autogroup ("/autogroup-N nice K"), or None for a process in
    no autogroup: one whose session was never created by setsid (PID 1 and its children in a
    container, as on CI runners) reads an empty file and is scheduled in the root group."""
    fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    if not fields:
        return None
    group, word, nice = fields
    assert word == "nice"
    return group, int(nice)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(),
                    reason="this kernel has no autogroups: the processes' nice values apply alone")
def test_the_servers_session_is_a_group_of_its_own_with_the_same_nice(server_like: int) -> None:
    # a new session is a new group, and the scheduler shares the CPU between groups (and the
    # root group's processes) by the group's nice value, not the processes'
    group = _autogroup(server_like)
    ours = _autogroup("self")
    assert group is not None, "a new session always gets an autogroup of its own"
    assert group[1] == CPU_SERVER_NICE
    assert ours is None or ours[0] != group[0]


class _Refusing:
    """open() for /proc/self/autogroup that answers EAGAIN ``refusals`` times, as the kernel does
    to a second change within 0.1 s from a process without CAP_SYS_ADMIN."""

    def __init__(self, refusals: int, errno_: int = errno.EAGAIN) -> None:
        self.refusals, self.errno, self.calls, self.written = refusals, errno_, 0, []

    def __call__(self, path: str, mode: str) -> _Refusing:
        assert (path, mode) == ("/proc/self/autogroup", "w")
        self.calls += 1
        if self.calls <= self.refusals:
            raise OSError(self.errno, os.strerror(self.errno))
        return self

    def __enter__(self) -> _Refusing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def write(self, text: str) -> None:
        self.written.append(text)


def test_the_groups_nice_is_retried_while_the_kernel_says_eagain(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refusing = _Refusing(refusals=2)
    monkeypatch.setattr(process, "open", refusing, raising=False)
    assert process._set_autogroup_nice(5, attempts=3, wait_s=0.0)
    assert refusing.calls == 3 and refusing.written == ["5"]

    always = _Refusing(refusals=10)
    monkeypatch.setattr(process, "open", always, raising=False)
    assert not process._set_autogroup_nice(5, attempts=3, wait_s=0.0)
    assert always.calls == 3 and always.written == []


def test_no_autogroups_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = _Refusing(refusals=10, errno_=errno.ENOENT)
    monkeypatch.setattr(process, "open", missing, raising=False)
    assert not process._set_autogroup_nice(5, attempts=3, wait_s=0.0)
    assert missing.calls == 1

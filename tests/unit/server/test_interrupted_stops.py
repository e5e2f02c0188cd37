"""A server's process group is stopped whatever interrupts its start or its stop: an error or
Ctrl-C after the process was launched, or a second Ctrl-C during the clean-shutdown grace
period. Stand-ins for a server: ``sleep`` in a session of its own, one that ignores SIGTERM as a
busy engine may."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from vllm_course.config import ServerConfig
from vllm_course.server import ServerPool, groups, process, registry
from vllm_course.server.groups import group_alive

# a process group whose leader ignores SIGTERM (an ignored signal stays ignored across exec)
DEAF = ["sh", "-c", "trap '' TERM; exec sleep 60"]


def _gone(pgid: int, leader: subprocess.Popen | None = None, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while group_alive(pgid, leader):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill(leader: subprocess.Popen) -> None:
    """SIGKILL ``leader``'s group if anything of it is left, and reap the leader."""
    try:
        os.killpg(leader.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    leader.wait(timeout=10)


def test_a_second_ctrl_c_during_the_grace_period_kills_the_group_at_once(monkeypatch):
    proc = subprocess.Popen(DEAF, start_new_session=True)
    try:
        time.sleep(0.2)                              # the trap is set
        real_wait = groups._wait

        def interrupted(done, timeout_s):
            monkeypatch.setattr(groups, "_wait", real_wait)
            raise KeyboardInterrupt                  # during the 20 s SIGTERM grace period

        monkeypatch.setattr(groups, "_wait", interrupted)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            groups.stop_group(proc.pid, timeout_s=20.0, leader=proc)
        assert _gone(proc.pid, proc), "the group outlived an interrupted stop"
        assert time.monotonic() - t0 < 10.0          # SIGKILL, not the grace period
    finally:
        _kill(proc)


@pytest.fixture
def sleeper(monkeypatch, tmp_path):
    """VLLMServer launches ``sleep`` instead of vLLM and finds it healthy at once; the course
    home (its registry) is a folder of this test's."""
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(process, "check_args", lambda args: None)
    monkeypatch.setattr(process.VLLMServer, "argv", lambda self: list(DEAF))
    monkeypatch.setattr(process.VLLMServer, "_wait_ready", lambda self, t_start: None)
    monkeypatch.setattr(process.VLLMServer, "_fill_batch_limits", lambda self: None)
    return process.VLLMServer(ServerConfig(model="tiny-mistral"), log_path=tmp_path / "log.txt")


def test_a_start_interrupted_after_the_launch_stops_its_group(sleeper, monkeypatch):
    launched = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        launched.append(real_popen(*args, **kwargs))
        return launched[-1]

    def ctrl_c(self):
        raise KeyboardInterrupt                      # while reading the block size

    monkeypatch.setattr(process.subprocess, "Popen", popen)
    monkeypatch.setattr(process.VLLMServer, "_block_size", ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            sleeper.start()
        (proc,) = launched
        assert _gone(proc.pid, proc), "a start interrupted after its launch left the server"
        assert sleeper.proc is None
        assert proc.pid not in [e["pid"] for e in registry.entries()]
    finally:
        for proc in launched:
            _kill(proc)


def test_a_pool_interrupted_while_closing_still_stops_every_server(sleeper, monkeypatch):
    monkeypatch.setattr(process.VLLMServer, "_block_size", lambda self: None)
    other = process.VLLMServer(ServerConfig(model="tiny-mistral", args={"max-num-seqs": 2}),
                               log_path=sleeper.log_path.with_name("log2.txt"))
    pool = ServerPool(max_live=2)
    pool._servers = {"a": sleeper.start(), "b": other.start()}
    pids = [sleeper.proc.pid, other.proc.pid]
    leaders = [sleeper.proc, other.proc]
    real_stop = groups.stop_group
    calls = []

    def first_interrupted(pgid, timeout_s=20.0, leader=None):
        calls.append(timeout_s)
        if len(calls) == 1:
            real_stop(pgid, 0.0, leader)
            raise KeyboardInterrupt                  # a second Ctrl-C while the first one stops
        real_stop(pgid, timeout_s, leader)

    monkeypatch.setattr(process, "stop_group", first_interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.close()
        assert all(_gone(pid, leader) for pid, leader in zip(pids, leaders, strict=True))
        assert calls[1:] == [0.0], "the server not stopped yet was killed without a grace period"
    finally:
        for leader in leaders:
            _kill(leader)

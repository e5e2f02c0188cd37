"""The one way the course stops a server: its whole process group, SIGTERM then SIGKILL.

vLLM's API server starts an engine-core process (and on GPUs, workers) in the same process group;
stopping only the API server can leave them holding memory. Both :meth:`VLLMServer.stop
<vllm_course.server.process.VLLMServer.stop>` and ``vllm-course servers stop`` (the registry) come
here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

KILL_WAIT_S = 10.0
"""Seconds to wait for the group to disappear after SIGKILL."""


def stop_group(pgid: int, timeout_s: float = 20.0, leader: subprocess.Popen | None = None) -> None:
    """Stop process group ``pgid``: SIGTERM, wait up to ``timeout_s`` seconds for the group leader
    to exit (a clean shutdown), SIGKILL whatever is left of the group, and wait up to
    :data:`KILL_WAIT_S` seconds until no live process remains in it.

    Args:
        pgid: the group, whose leader has pid ``pgid`` (``start_new_session=True``).
        timeout_s: seconds a clean shutdown may take.
        leader: the leader's ``Popen`` when this process started it: it is reaped, so it
            leaves no zombie. Without it (another process started the server) a zombie leader
            counts as gone.

    A group that is already gone, or whose processes belong to another user, is left as is;
    nothing is raised. Interrupted while it waits for the clean shutdown (a second Ctrl-C), it
    sends SIGKILL at once before the interrupt goes on: no group is left running.
    """
    _signal(pgid, signal.SIGTERM)
    try:
        _wait(lambda: not _leader_alive(pgid, leader), timeout_s)
    except BaseException:
        _signal(pgid, signal.SIGKILL)
        raise
    _signal(pgid, signal.SIGKILL)
    if not _wait(lambda: not group_alive(pgid, leader), KILL_WAIT_S):
        _signal(pgid, signal.SIGKILL)


def group_alive(pgid: int, leader: subprocess.Popen | None = None) -> bool:
    """True while a live (not zombie) process is in group ``pgid``."""
    if leader is not None:
        leader.poll()   # reap it once it exited, so it stops counting
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _leader_alive(pgid: int, leader: subprocess.Popen | None) -> bool:
    if leader is not None:
        return leader.poll() is None
    try:
        return psutil.Process(pgid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(done, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True

"""SIGTERM (``timeout``, ``kill``, a CI runner) stops a ``vllm-course`` command as Ctrl-C does: its
``finally`` blocks run, so the process groups it owns (servers) are stopped. Python's default
for SIGTERM exits at once and leaves them running (seen: a calibration killed by ``pkill``
left two half-started CPU servers, 1 core each, behind)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

from vllm_course.server.groups import group_alive

# a command of the course's CLI group that owns a child process group (a stand-in for a server:
# `sleep` in a session of its own), stopped in a finally as the server pools stop theirs
SCRIPT = textwrap.dedent("""
    import subprocess, sys, time
    from vllm_course.cli import main
    from vllm_course.server.groups import stop_group

    @main.command("own-a-group")
    def own_a_group():
        child = subprocess.Popen(["sleep", "120"], start_new_session=True,
                                 stdout=subprocess.DEVNULL)
        print(child.pid, flush=True)
        try:
            time.sleep(120)
        finally:
            stop_group(child.pid, timeout_s=5, leader=child)
            print("stopped", flush=True)

    main(["own-a-group"])
""")


def _signal_stops_the_group(script: str, sig: int) -> None:
    """Run ``script`` (it prints its child group's pid as it enters a 120 s blocking call), send
    ``sig``, and assert that the script's ``finally`` ran, it failed, and the group is gone;
    within 30 s."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    child = int(proc.stdout.readline())
    try:
        assert group_alive(child)
        time.sleep(0.2)                    # inside the blocking call
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        assert "stopped" in out
        assert proc.returncode != 0        # interrupted, not a success
        assert not group_alive(child)
    finally:
        if group_alive(child):
            os.killpg(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_sigterm_runs_the_commands_finally_and_stops_its_process_group():
    _signal_stops_the_group(SCRIPT, signal.SIGTERM)


# Ctrl-C while a coroutine under asyncio.run blocks the event loop in a server start (a stand-in:
# time.sleep inside the pool's `interruptible()` block): asyncio.run's own SIGINT handler would
# only cancel the main task once the call returned, 120 s later
ASYNC_SCRIPT = textwrap.dedent("""
    import asyncio, signal, subprocess, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores SIGINT
    from vllm_course.server.groups import stop_group
    from vllm_course.server.pool import interruptible

    async def blocked(child):
        try:
            with interruptible():
                print(child.pid, flush=True)
                time.sleep(120)                     # a blocking server start
        finally:
            stop_group(child.pid, timeout_s=5, leader=child)
            print("stopped", flush=True)

    child = subprocess.Popen(["sleep", "120"], start_new_session=True, stdout=subprocess.DEVNULL)
    asyncio.run(blocked(child))
""")


def test_ctrl_c_stops_a_server_start_that_blocks_asyncio_run_at_once():
    _signal_stops_the_group(ASYNC_SCRIPT, signal.SIGINT)


def test_asyncio_runs_own_ctrl_c_handler_is_back_after_the_block():
    from vllm_course.server.pool import interruptible

    seen = {}

    async def main():
        seen["asyncio"] = signal.getsignal(signal.SIGINT)
        with interruptible():
            seen["inside"] = signal.getsignal(signal.SIGINT)
        seen["after"] = signal.getsignal(signal.SIGINT)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a fresh process
    try:
        asyncio.run(main())
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen["asyncio"] is not signal.default_int_handler     # asyncio.run put in its own
    assert seen["inside"] is signal.default_int_handler
    assert seen["after"] == seen["asyncio"]

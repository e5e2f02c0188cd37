"""SIGTERM (``timeout``, ``kill``, a CI runner) stops a ``vllm-course`` command as Ctrl-C does: its
``finally`` blocks run, so the process groups it owns (servers) are stopped. Python's default
for SIGTERM exits at once and leaves them running (seen: a calibration killed by ``pkill``
left two half-started CPU servers, 1 core each, behind)."""

from __future__ import annotations

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


def test_sigterm_runs_the_commands_finally_and_stops_its_process_group():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    child = int(proc.stdout.readline())
    try:
        assert group_alive(child)
        time.sleep(0.2)                    # inside the command's time.sleep
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert "stopped" in out
        assert proc.returncode != 0        # interrupted, not a success
        assert not group_alive(child)
    finally:
        if group_alive(child):
            os.killpg(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


# the same, the command's work inside asyncio.run and blocked in a call that does not return to
# the event loop (as a server start is, for tens of seconds): asyncio.run's own Ctrl-C handler
# would only cancel the main task once the call returned
ASYNC_SCRIPT = textwrap.dedent("""
    import asyncio, subprocess, time
    from vllm_course.cli import main
    from vllm_course.server.groups import stop_group

    async def blocked(child):
        try:
            print(child.pid, flush=True)
            time.sleep(120)                     # a blocking server start
        finally:
            stop_group(child.pid, timeout_s=5, leader=child)
            print("stopped", flush=True)

    @main.command("own-a-group-async")
    def own_a_group_async():
        child = subprocess.Popen(["sleep", "120"], start_new_session=True,
                                 stdout=subprocess.DEVNULL)
        asyncio.run(blocked(child))

    main(["own-a-group-async"])
""")


def test_ctrl_c_stops_a_command_blocked_inside_asyncio_run_at_once():
    proc = subprocess.Popen([sys.executable, "-c", ASYNC_SCRIPT], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child = int(proc.stdout.readline())
    try:
        assert group_alive(child)
        time.sleep(0.2)                    # inside the blocking call
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)   # not after the 120 s the call would take
        assert "stopped" in out
        assert proc.returncode != 0
        assert not group_alive(child)
    finally:
        if group_alive(child):
            os.killpg(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()

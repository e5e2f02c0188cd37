"""A small on-disk list of the vLLM servers this course started, for ``vllm-course servers``.

Each running server has ``<course home>/servers/<pid>.json`` with its port, model, owner and
log. Entries whose process is gone are removed when listed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

from vllm_course import models
from vllm_course.server.groups import stop_group


def _dir() -> Path:
    return models.course_home() / "servers"


def register(pid: int, *, host: str, port: int, model: str, log_path: Path, args: dict) -> None:
    """Record a just-launched server: its process (group leader) ``pid``, where it listens, the
    model it serves, its log and its effective flags."""
    _dir().mkdir(parents=True, exist_ok=True)
    entry = {
        "pid": pid,
        "port": port,
        "host": host,
        "model": model,
        "owner_pid": os.getpid(),
        "started_at": time.time(),
        "log": str(log_path),
        "args": args,
        # the guard against a reused pid: a later process with this pid starts at another time
        "create_time": _create_time(pid),
    }
    (_dir() / f"{pid}.json").write_text(json.dumps(entry))


def unregister(pid: int) -> None:
    """Forget a stopped server."""
    (_dir() / f"{pid}.json").unlink(missing_ok=True)


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _is_ours(entry: dict) -> bool:
    """True if the entry's pid is still the vLLM server we started: alive, started when the entry
    says (a reused pid belongs to a process started later; an entry without a start time cannot
    be checked and is not ours), a vLLM server's command line, leading its own process group."""
    pid, created = entry.get("pid"), entry.get("create_time")
    if not isinstance(pid, int) or pid <= 1 or not isinstance(created, (int, float)):
        return False
    if not _alive(pid):
        return False
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) > 1:
            return False
        return "vllm.entrypoints" in " ".join(_cmdline(proc)) and os.getpgid(pid) == pid
    except (psutil.Error, OSError):
        return False


def _cmdline(proc: psutil.Process, wait_s: float = 1.0) -> list[str]:
    """``proc``'s command line. Linux shows an empty one while a process is inside
    ``execve`` (``/proc/<pid>/cmdline`` reads the new image's arguments once they are in
    place), which a server registered the moment ``Popen`` returned can still be: wait up to
    ``wait_s`` (s) for it, as a zombie (also empty) was ruled out before."""
    deadline = time.monotonic() + wait_s
    while not (cmdline := proc.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return cmdline


_REQUIRED = {"pid": int, "port": int, "host": str, "model": str, "owner_pid": int,
             "started_at": (int, float), "log": str}


def _valid(entry: object) -> bool:
    return isinstance(entry, dict) and all(isinstance(entry.get(k), t)
                                           for k, t in _REQUIRED.items())


def entries() -> list[dict]:
    """Servers still running, oldest first; stale, foreign or malformed entries are deleted."""
    out = []
    for path in sorted(_dir().glob("*.json")) if _dir().is_dir() else []:
        try:
            entry = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            entry = None
        if _valid(entry) and _is_ours(entry):
            entry["owner_alive"] = _alive(entry["owner_pid"])
            out.append(entry)
        else:
            path.unlink(missing_ok=True)
    return sorted(out, key=lambda e: e["started_at"])


def stop(pid: int, timeout_s: float = 20.0) -> bool:
    """Stop a listed server's process group (SIGTERM, then SIGKILL).

    Only a pid that :func:`entries` lists (a live vLLM server this course started, checked by
    command line, start time and process group) is signalled; anything else returns False.
    """
    entry = next((e for e in entries() if e["pid"] == pid), None)
    if entry is None:
        return False
    stop_group(pid, timeout_s)
    unregister(pid)
    return True

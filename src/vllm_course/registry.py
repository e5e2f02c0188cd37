"""A small on-disk list of the vLLM servers this course started, for ``vllm-course servers``.

Each running server has ``<course home>/servers/<pid>.json`` with its port, model, owner and
log. Entries whose process is gone are removed when listed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_course import models

if TYPE_CHECKING:
    from vllm_course.server import VLLMServer


def _dir() -> Path:
    return models.course_home() / "servers"


def register(server: VLLMServer) -> None:
    """Record a just-launched server."""
    assert server.proc is not None
    _dir().mkdir(parents=True, exist_ok=True)
    entry = {
        "pid": server.proc.pid,
        "port": server.port,
        "host": server.config.host,
        "model": server.config.model,
        "owner_pid": os.getpid(),
        "started_at": time.time(),
        "log": str(server.log_path),
        "args": server.effective_args(),
    }
    (_dir() / f"{server.proc.pid}.json").write_text(json.dumps(entry))


def unregister(pid: int) -> None:
    """Forget a stopped server."""
    (_dir() / f"{pid}.json").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def entries() -> list[dict]:
    """Servers still running, oldest first; stale entries are deleted."""
    out = []
    for path in sorted(_dir().glob("*.json")) if _dir().is_dir() else []:
        try:
            entry = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            path.unlink(missing_ok=True)
            continue
        if _alive(entry["pid"]):
            entry["owner_alive"] = _alive(entry["owner_pid"])
            out.append(entry)
        else:
            path.unlink(missing_ok=True)
    return sorted(out, key=lambda e: e["started_at"])


def stop(pid: int, timeout_s: float = 20.0) -> bool:
    """Stop a listed server's process group (SIGTERM, then SIGKILL). False if not running."""
    if not _alive(pid):
        unregister(pid)
        return False
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if not _alive(pid):
            break
    unregister(pid)
    return True

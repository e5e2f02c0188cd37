"""Server reuse inside one owner, which stops every server it started.

A :class:`ServerPool` belongs to one owner: a pytest session, a CLI run, a Jupyter kernel, a CI
job. It hands out a running server whose settings are identical to the ones asked for, or starts
one; it never adopts a server it did not start. It stops every server it started when it is
closed, at interpreter exit (``atexit``), and a server also dies with the owner process itself
(``PR_SET_PDEATHSIG``). Servers idle for longer than ``idle_timeout_s`` are stopped, and at most
``max_live`` run at once (the least recently used idle one is stopped to make room).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from vllm_course.config import ServerConfig
from vllm_course.server.process import VLLMServer


class ServerPool:
    """Running servers of one owner, keyed by their settings.

    Args:
        max_live: most servers running at once (2 on the CPU profile).
        idle_timeout_s: stop a server nobody used for this long (seconds).
        profile_args: the hardware profile's default flags for every server.
    """

    def __init__(
        self, max_live: int = 2, idle_timeout_s: float = 900.0, profile_args: dict | None = None
    ):
        self.max_live = max_live
        self.idle_timeout_s = idle_timeout_s
        self.profile_args = dict(profile_args or {})
        self._servers: dict[str, VLLMServer] = {}
        self._last_used: dict[str, float] = {}
        self._in_use: set[str] = set()
        self.announce: Callable[[VLLMServer], AbstractContextManager] | None = None
        """Wraps every server start (``notebook.setup()`` shows the start and its time)."""
        self._lock = threading.RLock()
        self._closed = False
        self._reaper = threading.Thread(target=self._reap_idle, daemon=True)
        self._reaper.start()
        atexit.register(self.close)

    def _key(self, config: ServerConfig) -> str:
        return config.key() + repr(sorted(self.profile_args.items()))

    def acquire(self, config: ServerConfig, log_path: Path | None = None) -> VLLMServer:
        """A healthy server started with exactly ``config``; starts one if needed.

        Raises:
            ServerError: if a new server fails to start (see :class:`VLLMServer.start`).
            RuntimeError: if the pool is closed or every live server is in use.
        """
        key = self._key(config)
        with self._lock:
            if self._closed:
                raise RuntimeError("this server pool is closed")
            server = self._servers.get(key)
            if server is not None and not server.alive():
                del self._servers[key]
                server.stop()
                server = None
            if server is None:
                self._make_room()
                server = VLLMServer(config, log_path=log_path, profile_args=self.profile_args)
                with self.announce(server) if self.announce else contextlib.nullcontext():
                    server.start()
                self._servers[key] = server
            self._in_use.add(key)
            self._last_used[key] = time.monotonic()
            return server

    def release(self, server: VLLMServer) -> None:
        """Mark a server as no longer used by a run (it keeps running until idle or close)."""
        with self._lock:
            for key, s in self._servers.items():
                if s is server:
                    self._in_use.discard(key)
                    self._last_used[key] = time.monotonic()

    def _make_room(self) -> None:
        while len(self._servers) >= self.max_live:
            idle = [k for k in self._servers if k not in self._in_use]
            if not idle:
                raise RuntimeError(f"all {self.max_live} live servers are in use")
            victim = min(idle, key=lambda k: self._last_used.get(k, 0.0))
            self._servers.pop(victim).stop()

    def _reap_idle(self) -> None:
        while not self._closed:
            time.sleep(5.0)
            now = time.monotonic()
            with self._lock:
                for key in list(self._servers):
                    if (
                        key not in self._in_use
                        and now - self._last_used.get(key, now) > self.idle_timeout_s
                    ):
                        self._servers.pop(key).stop()

    @property
    def servers(self) -> list[VLLMServer]:
        """The servers this pool is running."""
        with self._lock:
            return list(self._servers.values())

    def close(self) -> None:
        """Stop every server this pool started."""
        with self._lock:
            self._closed = True
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

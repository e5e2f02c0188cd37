"""Server reuse inside one owner, which stops every server it started.

A :class:`ServerPool` belongs to one owner: a pytest session, a CLI run, a Jupyter kernel, a CI
job. It hands out a running server whose settings are identical to the ones asked for, or starts
one; it never adopts a server it did not start. It stops every server it started when it is
closed, at interpreter exit (``atexit``), and a server also dies with the owner process itself
(``PR_SET_PDEATHSIG``). Servers idle for longer than ``idle_timeout_s`` are stopped, and at most
``max_live`` run at once (the least recently used idle one is stopped to make room).
:meth:`ServerPool.prestart` starts several servers side by side before a notebook needs them.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from vllm_course.config import ServerConfig
from vllm_course.server.process import VLLMServer, free_port


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
        self._starting: set[VLLMServer] = set()   # starts in progress (they hold the lock)
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
                self._starting.add(server)
                try:
                    with (self.announce(server) if self.announce else contextlib.nullcontext(),
                          interruptible()):
                        server.start()
                finally:
                    self._starting.discard(server)
                self._servers[key] = server
            self._in_use.add(key)
            self._last_used[key] = time.monotonic()
            return server

    def prestart(self, configs: Sequence[ServerConfig]) -> list[VLLMServer]:
        """Start, side by side, the servers of ``configs`` that are not running yet, and return
        all of them (in the order asked for; duplicates once).

        A server start is mostly single-threaded Python (imports, the engine core's start), so
        on a machine with spare cores two starts side by side take less than two one after the
        other (``benchmarks/server_start.py --side-by-side 2``). Idle servers not asked for are
        stopped first, least recently used first, to keep within ``max_live``. The servers
        started stay in the pool, idle, until a run acquires them.

        Raises:
            ValueError: if ``configs`` asks for more distinct servers than ``max_live``.
            RuntimeError: if the pool is closed, or servers in use leave no room.
            ServerError: the first start that failed (servers that did start are kept).
        """
        wanted: dict[str, ServerConfig] = {}
        for config in configs:
            wanted.setdefault(self._key(config), config)
        if len(wanted) > self.max_live:
            raise ValueError(f"{len(wanted)} servers asked for at once, but this pool runs at "
                             f"most {self.max_live}")
        with self._lock:
            if self._closed:
                raise RuntimeError("this server pool is closed")
            for key in list(self._servers):
                if key in wanted and not self._servers[key].alive():
                    self._servers.pop(key).stop()
            missing = {k: c for k, c in wanted.items() if k not in self._servers}
            self._make_room(len(missing), keep=set(wanted))
            new = {k: VLLMServer(c, profile_args=self.profile_args) for k, c in missing.items()}
            _distinct_ports(list(new.values()))
            errors = self._start_side_by_side(new)
            now = time.monotonic()
            for key, server in new.items():
                if key in errors:
                    server.stop()
                else:
                    self._servers[key] = server
                    self._last_used[key] = now
            if errors:
                raise next(iter(errors.values()))
            return [self._servers[k] for k in wanted]

    def _start_side_by_side(self, new: dict[str, VLLMServer]) -> dict[str, BaseException]:
        """Start every server in its own thread; the errors, by key. On Ctrl-C (or any error
        while waiting) every one of them is stopped before it is raised."""
        errors: dict[str, BaseException] = {}

        def start(key: str, server: VLLMServer) -> None:
            try:
                with self.announce(server) if self.announce else contextlib.nullcontext():
                    server.start()
            except BaseException as exc:  # noqa: BLE001 (returned to the caller, who raises it)
                errors[key] = exc

        threads = [threading.Thread(target=start, args=item, daemon=True) for item in new.items()]
        self._starting.update(new.values())
        for t in threads:
            t.start()
        try:
            with interruptible():
                for t in threads:
                    t.join()
        except BaseException:   # Ctrl-C: no server may outlive the interrupted starts
            for t, server in zip(threads, new.values(), strict=True):
                while t.is_alive():
                    server.stop(timeout_s=5.0)
                    t.join(0.1)
                server.stop(timeout_s=5.0)
            raise
        finally:
            self._starting.difference_update(new.values())
        return errors

    def release(self, server: VLLMServer) -> None:
        """Mark a server as no longer used by a run (it keeps running until idle or close)."""
        with self._lock:
            for key, s in self._servers.items():
                if s is server:
                    self._in_use.discard(key)
                    self._last_used[key] = time.monotonic()

    def stop_idle(self) -> int:
        """Stop every server no run is using (say, before a command that starts servers of its
        own: on a GPU an idle server still holds its memory). Returns how many were stopped."""
        with self._lock:
            idle = [k for k in self._servers if k not in self._in_use]
            for key in idle:
                self._servers.pop(key).stop()
        return len(idle)

    def _make_room(self, n: int = 1, keep: Collection[str] = ()) -> None:
        """Stop idle servers, least recently used first, until ``n`` more fit in ``max_live``
        (never one in use or in ``keep``).

        Raises:
            RuntimeError: if the servers in use (or kept) leave no room.
        """
        while len(self._servers) + n > self.max_live:
            idle = [k for k in self._servers if k not in self._in_use and k not in keep]
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
        """Stop every server this pool started, including one still starting.

        A start holds the pool's lock for as long as it takes (minutes for a 7B model on a GPU),
        so while the lock is taken, starts in progress (say, of a notebook whose time ran out)
        are stopped, again until the lock comes free (a start may launch its process just after
        a stop found none): their ``start()`` raises, and the lock comes free at once.
        """
        self._closed = True
        while not self._lock.acquire(timeout=0.2):
            for server in list(self._starting):
                server.stop(timeout_s=5.0)
        try:
            servers, self._servers = list(self._servers.values()), {}
        finally:
            self._lock.release()
        try:
            for server in servers:
                server.stop()
        finally:        # interrupted (a second Ctrl-C): the servers not stopped yet, at once
            for server in servers:
                if server.alive():
                    server.stop(timeout_s=0.0)

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within this block, Ctrl-C raises KeyboardInterrupt at once (Python's default), also where
    a coroutine under ``asyncio.run`` blocks its event loop, as a server start does.

    ``asyncio.run`` (``asyncio.Runner``, Python 3.11+) replaces the default SIGINT handler with
    one that only cancels the main task when the event loop next gets control; during a start
    that never comes until the server is up: a calibration interrupted 20 s in went on for 30 s
    more (2026-12-05). Only for the blocking call: elsewhere asyncio's handler is the safe one,
    since a KeyboardInterrupt raised inside the event loop's own code can leave a task that is
    never finished (bpo-39622). Nothing changes outside the main thread or where SIGINT is
    ignored (a background job) or already Python's default.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, signal.SIG_DFL, None, signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _distinct_ports(servers: list[VLLMServer]) -> None:
    """Give each server without a configured port a free one, no two the same (servers started
    in parallel threads would otherwise race for the same free port)."""
    taken: set[int] = set()
    for server in servers:
        while server.port is None or (server.config.port is None and server.port in taken):
            server.port = free_port(server.config.host)
        taken.add(server.port)

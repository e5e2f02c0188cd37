"""Lend one owner's servers to notebooks running in other kernels (a CI job running chapters).

Each chapter runs in a fresh kernel, but starting a CPU server takes ~30-50 s, so eight chapters
that each started their own would spend minutes on starts alone. A server may be reused only
inside one owner that stops it on exit — here the CI job's pytest session: it owns a
:class:`~vllm_course.server.ServerPool` and serves it over HTTP on 127.0.0.1
(:class:`PoolBroker`); a kernel whose environment has ``VLLM_COURSE_POOL=http://127.0.0.1:PORT``
gets a :class:`RemotePool` from :func:`vllm_course.server.default_pool` and borrows servers from
it. The owner stops every server
when it closes the broker; a borrowed server is never stopped by the borrower.

Graded lab runs never borrow: they start their own servers with a pool they own.

Protocol (JSON over HTTP, one request at a time):

* ``GET /info`` → ``{"profile_args": {...}, "max_live": int}``;
* ``GET /servers`` → ``{"configs": [ServerConfig, ...], "pids": [int | null, ...]}``: the
  settings and process ids of the servers running;
* ``POST /acquire`` ``{"config": ServerConfig, "log_path": str | null}`` → ``{"key", "base_url",
  "pid", "log_path", "facts"}`` (starts a server if none with those settings runs; on failure HTTP
  500 with ``{"error", "cause", "log_tail"}``);
* ``POST /release`` ``{"key"}`` → ``{}``;
* ``POST /prestart`` ``{"configs": [ServerConfig, ...]}`` → ``{"started": [base_url, ...]}``
  (:meth:`ServerPool.prestart`: starts the missing ones side by side; errors as for acquire).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil

from vllm_course.config import ServerConfig
from vllm_course.server.failures import ServerError
from vllm_course.server.pool import ServerPool
from vllm_course.server.process import VLLMServer
from vllm_course.server.startup import StartupFacts

ENV_VAR = "VLLM_COURSE_POOL"


class PoolBroker:
    """Serve ``pool``'s servers to other processes on ``127.0.0.1`` (a free port).

    Use as ``with PoolBroker(pool) as url: ...``; leaving the block stops the HTTP service, not
    the servers (the pool's owner closes the pool).
    """

    def __init__(self, pool: ServerPool):
        self.pool = pool
        self._lent: dict[str, VLLMServer] = {}
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the value for ``VLLM_COURSE_POOL``."""
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def acquire(self, body: dict) -> dict:
        config = ServerConfig.model_validate(body["config"])
        log_path = Path(body["log_path"]) if body.get("log_path") else None
        with self._lock:   # one start at a time: a CPU machine cannot start two at once well
            server = self.pool.acquire(config, log_path=log_path)
            key = f"{server.proc.pid}"
            self._lent[key] = server
        return {
            "key": key,
            "base_url": server.base_url,
            "pid": server.proc.pid,
            "log_path": str(server.log_path),
            "facts": server.facts.model_dump(),
        }

    def prestart(self, body: dict) -> dict:
        configs = [ServerConfig.model_validate(c) for c in body["configs"]]
        with self._lock:
            servers = self.pool.prestart(configs)
        return {"started": [s.base_url for s in servers]}

    def release(self, body: dict) -> dict:
        server = self._lent.get(str(body.get("key")))
        if server is not None:
            self.pool.release(server)
        return {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:   # quiet: the owner's output stays clean
                pass

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path == "/info":
                    self._reply(200, {"profile_args": broker.pool.profile_args,
                                      "max_live": broker.pool.max_live})
                elif self.path == "/servers":
                    servers = broker.pool.servers
                    self._reply(200, {"configs": [s.config.model_dump(mode="json")
                                                  for s in servers],
                                      "pids": [s.proc.pid if s.proc else None
                                               for s in servers]})
                else:
                    self._reply(404, {"error": f"no such path {self.path}"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    routes = {"/acquire": broker.acquire, "/release": broker.release,
                              "/prestart": broker.prestart}
                    if self.path in routes:
                        self._reply(200, routes[self.path](body))
                    else:
                        self._reply(404, {"error": f"no such path {self.path}"})
                except ServerError as exc:
                    message = exc.args[0].split("\n--- last lines of", 1)[0] if exc.args else ""
                    self._reply(500, {"error": message, "cause": exc.cause,
                                      "log_tail": exc.log_tail})
                except Exception as exc:  # noqa: BLE001 (reported to the borrower, not lost)
                    self._reply(500, {"error": f"{type(exc).__name__}: {exc}", "cause": None,
                                      "log_tail": ""})

        return Handler


@dataclass
class _Proc:
    pid: int


@dataclass(frozen=True)
class LiveServer:
    """A server running in the broker's pool, as :attr:`RemotePool.servers` lists it: its
    settings (a sweep asks which settings are live, to plan its order) and its process (a run
    waits until the other servers are idle)."""

    config: ServerConfig
    proc: _Proc | None = None


class RemoteServer:
    """A server borrowed from a :class:`PoolBroker`: what a run needs of a ``VLLMServer``
    (``base_url``, ``facts``, ``log_path``, ``proc.pid``, ``alive()``, ``check_alive()``)."""

    def __init__(self, config: ServerConfig, reply: dict):
        self.config = config
        self.key = reply["key"]
        self.base_url = reply["base_url"]
        self.proc = _Proc(int(reply["pid"]))
        self.log_path = Path(reply["log_path"])
        self.facts = StartupFacts.model_validate(reply["facts"])

    def alive(self) -> bool:
        """True while the server's process runs (it belongs to the broker's owner)."""
        try:
            return psutil.Process(self.proc.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def check_alive(self) -> None:
        """Raise :class:`ServerError` (cause ``crashed``) if the server is gone."""
        if not self.alive():
            raise ServerError(f"the borrowed vLLM server (pid {self.proc.pid}) is gone",
                              cause="crashed", log_tail="", log_path=self.log_path)


class RemotePool:
    """The borrower's side of a :class:`PoolBroker` (what ``default_pool()`` returns when
    ``VLLM_COURSE_POOL`` is set). ``close()`` does nothing: the servers are not ours."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(900.0, connect=10.0))
        try:
            info = self._http.get("/info")
            info.raise_for_status()
        except httpx.HTTPError as exc:
            raise RuntimeError(
                f"{ENV_VAR}={url} is set but no server broker answers there ({exc}); unset it to "
                "let this kernel start its own servers"
            ) from None
        self.profile_args: dict = info.json()["profile_args"]
        self.max_live: int = int(info.json().get("max_live", 1))
        self._closed = False

    def acquire(self, config: ServerConfig, log_path: Path | None = None) -> RemoteServer:
        """Borrow a server started with exactly ``config`` (the broker starts one if needed).

        Raises:
            ServerError: the broker could not start it (cause and log tail included).
        """
        resp = self._http.post("/acquire", json={
            "config": config.model_dump(mode="json"),
            "log_path": str(log_path) if log_path else None,
        })
        if resp.status_code != 200:
            err = resp.json()
            raise ServerError(err["error"], cause=err.get("cause") or "crashed",
                              log_tail=err.get("log_tail", ""), log_path=log_path)
        return RemoteServer(config, resp.json())

    def prestart(self, configs: Sequence[ServerConfig]) -> None:
        """Have the broker start these servers side by side (:meth:`ServerPool.prestart`).

        Raises:
            ServerError: a start failed (cause and log tail included).
            ValueError: more distinct configs than the broker's ``max_live``.
        """
        if (n := len({c.key() for c in configs})) > self.max_live:
            raise ValueError(f"{n} servers asked for at once, but the broker runs at most "
                             f"{self.max_live}")
        resp = self._http.post("/prestart", json={
            "configs": [c.model_dump(mode="json") for c in configs]})
        if resp.status_code != 200:
            err = resp.json()
            raise ServerError(err["error"], cause=err.get("cause") or "crashed",
                              log_tail=err.get("log_tail", ""))

    @property
    def servers(self) -> list[LiveServer]:
        """The servers running in the broker's pool now (their settings)."""
        resp = self._http.get("/servers")
        resp.raise_for_status()
        reply = resp.json()
        pids = reply.get("pids") or [None] * len(reply["configs"])
        return [LiveServer(ServerConfig.model_validate(c), _Proc(pid) if pid else None)
                for c, pid in zip(reply["configs"], pids, strict=True)]

    def release(self, server: RemoteServer) -> None:
        """Give a borrowed server back (it keeps running in the owner's pool)."""
        self._http.post("/release", json={"key": server.key})

    def close(self) -> None:
        """Nothing to stop: the broker's owner stops its servers."""
        self._closed = True
        self._http.close()

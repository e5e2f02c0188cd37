"""``VLLMServer``: start a real vLLM server, wait until it serves, read its startup facts, stop it.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` in its own process group,
bound to 127.0.0.1 on a free port, with its log in a file. Flags are checked against the installed
vLLM's own parser before launch, so a misspelled flag fails in milliseconds with the closest real
flag named, instead of after a 40-second start. Stopping sends SIGTERM to the whole group, waits,
then SIGKILLs: no engine process survives, also on exceptions and Ctrl-C.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from vllm_course import models
from vllm_course.config import ServerConfig
from vllm_course.env import machine
from vllm_course.server import registry
from vllm_course.server.failures import (
    ADVICE,
    ServerError,
    classify_failure,
    tail,
)
from vllm_course.server.flags import check_args
from vllm_course.server.groups import stop_group
from vllm_course.server.startup import (
    StartupFacts,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    parse_startup_log,
    this_machine,
)

DEV_MODE = "VLLM_SERVER_DEV_MODE"
"""The environment variable that makes vLLM serve its development endpoints, among them
``POST /reset_prefix_cache``. Every server the course starts has it set to 1 (as vLLM's own
``vllm bench sweep`` does, vllm/benchmarks/sweep/server.py), so each measured run can start from
an empty prefix cache; the servers listen on 127.0.0.1 only. ``ServerConfig.env`` may set it to
0."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """True if a TCP listener could bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# On the CPU build the server and the load generator share the same few cores, and an engine busy
# on every core can starve the client for ~100 ms, so requests leave late. A slightly lower
# priority for the server lets the client (a few % of one core) run when it is due.
CPU_SERVER_NICE = 5


def _set_autogroup_nice(nice: int, attempts: int = 5, wait_s: float = 0.11) -> bool:
    """Give this process's autogroup (its session's scheduling group) the nice value ``nice``.

    Without CAP_SYS_ADMIN the kernel accepts one such change per 0.1 s machine-wide and answers
    EAGAIN to the next (kernel/sched/autogroup.c, proc_sched_autogroup_set_nice): two servers
    started side by side would collide, so EAGAIN is retried ``attempts`` times ``wait_s`` apart.

    Returns:
        True if the value was set; False where the kernel has no autogroups (the processes'
        nice values then apply alone) or kept refusing.
    """
    for _ in range(attempts):
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(nice))
            return True
        except OSError as e:
            if e.errno != errno.EAGAIN:
                return False
            time.sleep(wait_s)
    return False


def _child_setup(die_with_parent: bool, nice: int) -> None:  # in the child, before exec
    if nice:
        os.nice(nice)
        # The child is a new session (start_new_session), and with Linux autogroups (on by
        # default) each session is a scheduling group: CPU time is shared between groups first,
        # whatever the processes' nice values. So the group gets the nice value too (sched(7),
        # "The autogroup feature"). Without it, on 2 cores, the client's event loop stalled in
        # 11 of 16 bursts of chapter 17 (up to 160 ms; 0.5 s in the chapter, two servers up);
        # with it, in 1 of 16 (35 ms).
        _set_autogroup_nice(nice)
    if not die_with_parent:
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the owner dies
    except OSError:
        pass


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def effective_args(config: ServerConfig, profile_args: Mapping[str, object]) -> dict:
    """The flags a server is started with: ``profile_args`` (the hardware profile's) overridden
    by ``config.args``, in the order they are passed; on the CPU build without
    ``--kv-cache-memory-bytes``, 1 GiB of KV cache (vLLM's CPU default is 4 GiB)."""
    merged = {k: v for k, v in profile_args.items() if k not in config.args}
    merged.update(config.args)
    if machine.vllm_build() == "cpu" and merged.get("kv-cache-memory-bytes") is None:
        merged["kv-cache-memory-bytes"] = 1 << 30
    return merged


class VLLMServer:
    """One vLLM OpenAI-compatible server process.

    Use as a context manager::

        with VLLMServer(ServerConfig(args={"max-num-seqs": 64}), log_path=path) as srv:
            print(srv.base_url, srv.facts.kv_cache_tokens)

    Args:
        config: the server settings.
        log_path: where the server's stdout and stderr go (a temp-like default under the course
            home if ``None``). Each start writes it anew: the facts read from it are this
            start's, also where a notebook run again gives the same path.
        profile_args: flags from the hardware profile, used where ``config.args`` does not set
            them (the CPU profile's ``--kv-cache-memory-bytes``).
    """

    def __init__(
        self, config: ServerConfig, log_path: Path | None = None, profile_args: dict | None = None
    ):
        self.config = config
        self.profile_args = dict(profile_args or {})
        self.log_path = (
            Path(log_path)
            if log_path
            else (models.course_home() / "logs" / f"server-{os.getpid()}-{time.time_ns()}.log")
        )
        self.port = config.port
        self.proc: subprocess.Popen | None = None
        self.facts = StartupFacts()
        self.served_model = config.model

    # -- command line ---------------------------------------------------------------------
    def effective_args(self) -> dict:
        """Profile flags overridden by the config's, in the order they are passed."""
        return effective_args(self.config, self.profile_args)

    def argv(self) -> list[str]:
        """The full command line (flags checked separately by :func:`check_flags`)."""
        args = ServerConfig(model=self.config.model, args=self.effective_args()).argv()
        model, extra = models.resolve(self.config.model)
        head = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
        if "served-model-name" not in self.effective_args():
            head += ["--served-model-name", self.config.model]
        return head + extra + ["--host", self.config.host, "--port", str(self.port)] + args

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.config.host}:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> VLLMServer:
        """Launch and wait until ``/health`` answers 200.

        Raises:
            UnknownFlagError: a flag vLLM does not know (before launch).
            ServerError: ``cause="bad_value"`` before launch, for a flag value vLLM rejects or
                one the CPU build cannot run (:func:`check_cpu_kv_dtype`); or the server exited or
                did not become healthy within ``config.startup_timeout_s``; ``cause`` says why
                and the log tail is shown.
        """
        if self.proc is not None:
            return self
        check_args(self.effective_args())
        model = self.config.model
        if (
            not models.is_card(model)
            and model.startswith(("/", "./", "../", "~"))
            and not Path(model).expanduser().exists()
        ):
            raise ServerError(
                f"model path {model} does not exist (nothing was launched): "
                f"{ADVICE['model_not_found']}",
                cause="model_not_found",
            )
        if self.port is None:
            self.port = free_port(self.config.host)
        elif not port_is_free(self.config.host, self.port):
            raise ServerError(f"port {self.port} on {self.config.host} is in use (nothing was "
                              f"launched): {ADVICE['port_in_use']}", cause="port_in_use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", DEV_MODE: "1", **self.config.env}
        t_start = time.monotonic()
        # a new file for every start: appended to, a second run of a notebook that names the
        # same path read its facts (engine init, KV cache) from the first run's lines
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environ,
                start_new_session=True,
                # PR_SET_PDEATHSIG fires when the *thread* that forked exits: tie the server to
                # the main thread only (atexit and the owning pool stop it in every case)
                preexec_fn=functools.partial(_child_setup, _in_main_thread(),
                                             CPU_SERVER_NICE if machine.vllm_build() == "cpu"
                                             else 0),
            )
        # from here on the process runs: whatever stops this start (a failure, Ctrl-C, an error
        # reading its facts) stops the process group before it goes on
        try:
            registry.register(self.proc.pid, host=self.config.host, port=self.port,
                              model=self.config.model, log_path=self.log_path,
                              args=self.effective_args())
            self._wait_ready(t_start)
            self.facts = parse_startup_log(self.log_path.read_text(errors="replace"))
            self.facts.ready_s = round(time.monotonic() - t_start, 2)
            self.facts.block_size = self._block_size()
            self._fill_batch_limits()
        except BaseException:
            self.stop(timeout_s=5.0)   # a half-started engine may ignore SIGTERM for a while
            raise
        return self

    def _fill_batch_limits(self) -> None:
        """Fill ``max_num_batched_tokens``/``max_num_seqs`` from vLLM's defaults where the log
        did not say."""
        facts = self.facts
        if facts.max_num_seqs is not None and facts.max_num_batched_tokens is not None:
            return
        device, mem, name = this_machine()
        mode = {**self.profile_args, **self.config.args}.get("performance-mode")
        if facts.max_num_batched_tokens is None:
            facts.max_num_batched_tokens = default_max_num_batched_tokens(device, mem, name, mode)
        if facts.max_num_seqs is None:
            self.facts.max_num_seqs = default_max_num_seqs(
                device, mem, name, mode, facts.max_num_batched_tokens
            )
            self.facts.max_num_seqs_source = "vLLM default"

    def _block_size(self) -> int | None:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            text = httpx.get(f"{self.base_url}/metrics", timeout=10.0).text
        except httpx.HTTPError:
            return None
        lines = "\n".join(ln for ln in text.splitlines() if "cache_config_info" in ln) + "\n"
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                value = sample.labels.get("block_size")
                if value and value.isdigit():
                    return int(value)
        return None

    def _wait_ready(self, t_start: float) -> None:
        deadline = t_start + self.config.startup_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                proc = self.proc
                if proc is None:   # stop() from another thread: the owner closed meanwhile
                    raise ServerError("vLLM server stopped while starting: its owner (a pool "
                                      "closing, Ctrl-C) stopped it", cause="crashed",
                                      log_tail=tail(self.log_path), log_path=self.log_path)
                code = proc.poll()
                if code is not None:
                    raise self._failure(f"vLLM server exited with code {code} while starting")
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise self._failure(
                        f"vLLM server not healthy after {self.config.startup_timeout_s:.0f} s",
                        cause="timeout",
                    )
                time.sleep(0.5)

    def _failure(self, message: str, cause: str | None = None) -> ServerError:
        text = tail(self.log_path, 400)
        cause = classify_failure(text) if cause is None or cause == "crashed" else cause
        if cause == "unknown" and self.proc is not None and self.proc.poll() is not None:
            cause = "crashed"
        return ServerError(
            f"{message}: {cause.replace('_', ' ')} — {ADVICE[cause]}",
            cause=cause,
            log_tail=tail(self.log_path),
            log_path=self.log_path,
        )

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """Raise :class:`ServerError` (cause ``crashed`` or the log's cause) if the server died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise self._failure(
                f"vLLM server (pid {self.proc.pid}) died with code {self.proc.returncode}",
                cause="crashed",
            )

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the whole process group: SIGTERM, wait up to ``timeout_s``, then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            stop_group(proc.pid, timeout_s, leader=proc)
        finally:
            registry.unregister(proc.pid)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"VLLMServer({self.config.model!r}, {self.base_url}, {state})"


async def reset_prefix_cache(base_url: str, *, wait_s: float = 10.0) -> None:
    """Empty a running server's prefix cache: ``POST /reset_prefix_cache``, as vLLM's
    ``vllm bench sweep`` does between runs. vLLM refuses while blocks are still held, e.g. by
    requests a cancelled client left running, and says callers may retry
    (vllm/entrypoints/serve/dev/cache/api_router.py). vLLM 0.32 answers 200 with
    ``{"success": false}`` then; other versions answer 409 or 5xx, or 200 with no body on
    success. A refusal is retried every 0.25 s for up to ``wait_s`` seconds.

    Raises:
        ServerError: the server has no such endpoint (started with ``VLLM_SERVER_DEV_MODE=0``),
            could not be reached, or still refused after ``wait_s`` seconds.
    """
    import asyncio

    deadline = time.monotonic() + wait_s
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as client:
        while True:
            try:
                response = await client.post("/reset_prefix_cache")
            except httpx.HTTPError as exc:
                raise ServerError(f"{base_url}: POST /reset_prefix_cache failed: {exc!r}") from None
            if response.status_code == 404:
                raise ServerError(f"{base_url} has no /reset_prefix_cache: it was started with "
                                  f"{DEV_MODE}=0; remove that from the server's env, or set "
                                  "load.reset_prefix_cache: false", cause="bad_flag")
            if response.status_code == 200 and _reset_succeeded(response):
                return
            if response.status_code not in (200, 409) and response.status_code < 500:
                raise ServerError(f"{base_url}: POST /reset_prefix_cache answered "
                                  f"{response.status_code}: {response.text[:200]}")
            if time.monotonic() > deadline:
                last = f"{response.status_code} {response.text[:100]!r}"
                raise ServerError(f"{base_url} refused to reset its prefix cache for {wait_s:g} "
                                  f"s (last answer {last}): requests still hold KV blocks")
            await asyncio.sleep(0.25)


def _reset_succeeded(response: httpx.Response) -> bool:
    """A 200 answer to a reset: ``{"success": true}``, or no JSON body (older vLLM)."""
    try:
        body = response.json()
    except ValueError:
        return True
    return not isinstance(body, dict) or bool(body.get("success", True))

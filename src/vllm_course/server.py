"""``VLLMServer``: start a real vLLM server, wait until it serves, read its startup facts, stop it.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` in its own process group,
bound to 127.0.0.1 on a free port, with its log in a file. Flags are checked against the installed
vLLM's own parser before launch, so a misspelled flag fails in milliseconds with the closest real
flag named, instead of after a 40-second start. Stopping sends SIGTERM to the whole group, waits,
then SIGKILLs: no engine process survives, also on exceptions and Ctrl-C.
"""

from __future__ import annotations

import ctypes
import difflib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from vllm_course import env, models
from vllm_course.config import ServerConfig

LOG_TAIL_LINES = 40
DEV_MODE = "VLLM_SERVER_DEV_MODE"
"""The environment variable that makes vLLM serve its development endpoints, among them
``POST /reset_prefix_cache``. Every server the course starts has it set to 1 (as vLLM's own
``vllm bench sweep`` does, vllm/benchmarks/sweep/server.py), so each measured run can start from
an empty prefix cache; the servers listen on 127.0.0.1 only. ``ServerConfig.env`` may set it to
0."""

_FLAGS_SCRIPT = r"""
import json
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print("FLAGS=" + json.dumps(sorted({s for a in parser._actions for s in a.option_strings})))


def accepts(action, value):
    try:
        action.type(value)
        return True
    except Exception:
        return False


def kind(action):
    # what a value of this flag must look like, probed with the parser's own type function
    if action.nargs == 0:
        return {"kind": "flag"}
    if action.choices:
        return {"kind": "choices", "choices": sorted(str(c) for c in action.choices)}
    if action.type is None or action.type is str or accepts(action, "abc"):
        return {"kind": "any"}
    if accepts(action, "7") and accepts(action, "1k"):
        return {"kind": "human-int-or-auto" if accepts(action, "auto") else "human-int"}
    if accepts(action, "7") and not accepts(action, "7.5"):
        return {"kind": "int"}
    if accepts(action, "7.5"):
        return {"kind": "float"}
    return {"kind": "any"}


print("KINDS=" + json.dumps({s: kind(a) for a in parser._actions for s in a.option_strings
                             if s.startswith("--")}))
"""


class ServerError(RuntimeError):
    """A vLLM server failed to start or died.

    Attributes:
        cause: ``bad_flag``, ``bad_value``, ``out_of_memory``, ``port_in_use``, ``model_not_found``,
            ``max_model_len``, ``timeout``, ``crashed`` or ``unknown``.
        log_tail: the last lines of the server log.
        log_path: the full log.
    """

    def __init__(
        self, message: str, cause: str = "unknown", log_tail: str = "", log_path: Path | None = None
    ):
        full = message
        if log_tail:
            full += f"\n--- last lines of {log_path or 'the server log'} ---\n{log_tail}"
        super().__init__(full)
        self.cause = cause
        self.log_tail = log_tail
        self.log_path = log_path


class UnknownFlagError(ServerError):
    """A flag the installed vLLM does not know; raised before anything is launched."""


def _read_parser() -> tuple[list[str], dict[str, dict]]:
    """Every ``--flag`` of the installed vLLM's OpenAI server and what its value must look like,
    read in a subprocess (importing vLLM's parser takes seconds and emits warnings) and cached
    under the course home as ``flags/<version>.json`` and ``flags/<version>.kinds.json``.

    Raises:
        ServerError: if vLLM is not installed or its parser could not be read.
    """
    version = env.vllm_version()
    if version is None:
        raise ServerError("vLLM is not installed here; run `make setup`", cause="not_installed")
    folder = models.course_home() / "flags"
    names, kinds = folder / f"{version}.json", folder / f"{version}.kinds.json"
    if names.is_file() and kinds.is_file():
        return json.loads(names.read_text()), json.loads(kinds.read_text())
    proc = subprocess.run(
        [sys.executable, "-c", _FLAGS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in proc.stdout.splitlines()
             if ln.startswith(("FLAGS=", "KINDS="))}
    if proc.returncode != 0 or set(found) != {"FLAGS", "KINDS"}:
        raise ServerError(f"could not read vLLM {version}'s flags", log_tail=proc.stderr[-3000:])
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in ((kinds, found["KINDS"]), (names, found["FLAGS"])):
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return json.loads(found["FLAGS"]), json.loads(found["KINDS"])


def known_flags() -> list[str]:
    """Every ``--flag`` the installed vLLM's OpenAI server accepts, e.g. ``--max-num-seqs``
    (read once per vLLM version, see :func:`_read_parser`).

    Raises:
        ServerError: if vLLM is not installed or its parser could not be read.
    """
    version = env.vllm_version()
    cache = models.course_home() / "flags" / f"{version}.json"
    if version is not None and cache.is_file():
        return json.loads(cache.read_text())
    return _read_parser()[0]


def flag_kinds() -> dict[str, dict]:
    """What each ``--flag``'s value must look like, probed with the installed vLLM's own parser:
    ``{"kind": "flag"}`` (on/off, no value), ``int``, ``float``, ``human-int`` (an integer or a
    size such as ``1k``, ``25.6k``, ``2G``, as vllm/utils/argparse_utils.py's
    ``human_readable_int`` parses it), ``human-int-or-auto`` (also ``auto`` or ``-1``, as
    ``--max-model-len`` takes), ``choices`` (with the list) or ``any``.

    Raises:
        ServerError: if vLLM is not installed or its parser could not be read.
    """
    return _read_parser()[1]


RANGES: dict[str, tuple[float, float | None]] = {
    "max-num-seqs": (1, None),
    "max-num-batched-tokens": (1, None),
    "max-model-len": (1, None),
    "block-size": (1, None),
    "kv-cache-memory-bytes": (1, None),
    "tensor-parallel-size": (1, None),
    "pipeline-parallel-size": (1, None),
    "data-parallel-size": (1, None),
    "api-server-count": (1, None),
    "stream-interval": (1, None),
    "gpu-memory-utilization": (1e-9, 1.0),
}
"""Ranges (inclusive; ``None``: no upper bound) of the settings the course teaches, which vLLM
checks only after a server has started loading: counts and sizes are at least 1, and
``--gpu-memory-utilization`` is a fraction in (0, 1] (vLLM's CacheConfig)."""

_SIZE = re.compile(r"^(\d+(\.\d+)?[kmgt]|\d+[KMGT]|[+-]?\d+)$")
"""What vLLM's ``human_readable_int`` accepts: a plain integer, a decimal size (``25.6k``: k, m, g,
t are powers of 1000) or a whole binary one (``2G``: K, M, G, T are powers of 1024)."""
_AUTO = {"auto", "-1"}


def check_values(args: dict[str, object], kinds: dict[str, dict] | None = None) -> None:
    """Reject a flag value that vLLM's parser would refuse, or one outside :data:`RANGES`,
    before anything is launched (the server would otherwise spend its start-up first).

    Args:
        args: server flags without ``--`` (``ServerConfig.args``), ``None`` values skipped.
        kinds: :func:`flag_kinds` (read when not given).

    Raises:
        ServerError: with ``cause="bad_value"``, naming the flag, the value and what it must be.
    """
    kinds = flag_kinds() if kinds is None else kinds
    for name, value in args.items():
        if value is None:
            continue
        spec = kinds.get(f"--{name}")
        if spec is None:   # unknown names are check_flags' job
            continue
        problem = _value_problem(spec, value)
        auto = spec.get("kind") == "human-int-or-auto" and str(value).strip().lower() in _AUTO
        if problem is None and name in RANGES and not isinstance(value, bool) and not auto:
            low, high = RANGES[name]
            number = _number(value)
            if number is not None and (number < low or (high is not None and number > high)):
                problem = ("a fraction in (0, 1]" if high is not None
                           else f"at least {low:g}")
        if problem:
            raise ServerError(f"--{name} must be {problem}, not {value!r} (nothing was launched)",
                              cause="bad_value")


def _number(value: object) -> float | None:
    try:
        return float(value)   # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _value_problem(spec: dict, value: object) -> str | None:
    kind = spec.get("kind")
    if kind == "flag":
        return None if isinstance(value, bool) else "true or false (an on/off flag)"
    if isinstance(value, bool):
        return {"int": "an integer", "float": "a number", "human-int": "an integer",
                "human-int-or-auto": "an integer or auto",
                "choices": f"one of {', '.join(spec.get('choices', []))}"}.get(kind)
    if kind == "int":
        text = str(value)
        return None if re.fullmatch(r"-?\d+", text) else "an integer"
    if kind == "float":
        return None if _number(value) is not None else "a number"
    if kind == "human-int":
        return None if _SIZE.match(str(value).strip()) else (
            "an integer or a size such as 2048, 25.6k or 2G")
    if kind == "human-int-or-auto":
        text = str(value).strip()
        return None if _SIZE.match(text) or text.lower() in _AUTO else (
            "an integer, a size such as 2048, 25.6k or 2G, or auto")
    if kind == "choices":
        choices = spec.get("choices", [])
        return None if str(value) in choices else f"one of {', '.join(choices)}"
    return None


def check_flags(argv: list[str], flags: list[str] | None = None) -> None:
    """Reject any ``--flag`` in ``argv`` that vLLM does not accept.

    Raises:
        UnknownFlagError: naming the bad flag and the closest real ones.
    """
    flags = known_flags() if flags is None else flags
    allowed = set(flags)
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, flags, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UnknownFlagError(
            f"vLLM {env.vllm_version()} has no flag {name}{hint} (nothing was launched)",
            cause="bad_flag",
        )


@dataclass
class StartupFacts:
    """What the server said about itself while starting.

    Attributes:
        vllm_version: version in the banner.
        kv_cache_tokens: KV cache size in tokens ("GPU/CPU KV cache size: N tokens").
        max_concurrency: "Maximum concurrency for L tokens per request: X" (the X).
        max_concurrency_at_len: the L of that line, in tokens.
        attention_backend: e.g. ``FLASH_ATTN``, or ``None`` where the build does not log it.
        engine_init_s: "init engine ... took S seconds".
        ready_s: seconds from launch until ``/health`` answered 200.
        block_size: tokens per KV cache block, from the ``vllm:cache_config_info`` metric (the
            attention backend may override ``--block-size``; vLLM's CPU backend uses 128).
        max_model_len: longest request (prompt + output tokens) the server accepts: "Using max
            model len N", or the engine config's ``max_seq_len=N`` (vLLM 0.26 and 0.32 log both).
        max_num_batched_tokens: the scheduler's token budget per step: "Chunked prefill is
            enabled with max_num_batched_tokens=N", else the flag from "non-default args".
        max_num_seqs: most requests in the running batch: the flag from "non-default args",
            else vLLM's default for this machine (:func:`default_max_num_seqs`; vLLM does not log
            it).
        max_num_seqs_source: ``"flag"`` or ``"vLLM default"``.
    """

    vllm_version: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_len: int | None = None
    attention_backend: str | None = None
    engine_init_s: float | None = None
    ready_s: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_seqs_source: str | None = None


def parse_startup_log(text: str) -> StartupFacts:
    """Extract :class:`StartupFacts` from a server log (missing facts stay ``None``)."""
    facts = StartupFacts()
    if m := re.search(r"LLM engine \(v([^)\s]+)\)", text) or re.search(
        r"version (\d+\.\d+\S*)", text
    ):
        facts.vllm_version = m.group(1)
    if m := re.search(r"KV cache size: ([\d,]+) tokens", text):
        facts.kv_cache_tokens = int(m.group(1).replace(",", ""))
    if m := re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x", text):
        facts.max_concurrency_at_len = int(m.group(1).replace(",", ""))
        facts.max_concurrency = float(m.group(2).replace(",", ""))
    if m := re.search(
        r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend", text
    ):
        facts.attention_backend = m.group(1)
    if m := re.search(r"init engine .*? took ([\d.]+) s", text):
        facts.engine_init_s = float(m.group(1))
    if m := re.search(r"Using max model len (\d+)", text) or re.search(
        r"LLM engine \(v[^)]*\) with config: .*?\bmax_seq_len=(\d+)", text
    ):
        facts.max_model_len = int(m.group(1))
    if m := re.search(r"max_num_batched_tokens=(\d+)", text) or re.search(
        r"non-default args: \{.*?'max_num_batched_tokens': (\d+)", text
    ):
        facts.max_num_batched_tokens = int(m.group(1))
    if m := re.search(r"non-default args: \{.*?'max_num_seqs': (\d+)", text):
        facts.max_num_seqs = int(m.group(1))
        facts.max_num_seqs_source = "flag"
    return facts


def default_max_num_seqs(
    device: str, gpu_memory_bytes: int | None = None, gpu_name: str = "",
    performance_mode: str | None = None, max_num_batched_tokens: int | None = None,
) -> int:
    """vLLM's default ``max_num_seqs`` for ``vllm serve`` (``EngineArgs.get_batch_defaults``).

    CPU: 128 per tensor-parallel rank (world size 1 assumed here); a GPU with at least 70 GiB
    that is not an A100: 1024; other GPUs: 256; ``--performance-mode throughput`` doubles it;
    vLLM then caps it at ``max_num_batched_tokens`` (``vllm/engine/arg_utils.py``,
    ``get_batch_defaults``; read in 0.26 and 0.32).

    Args:
        device: ``"cpu"`` or ``"gpu"``.
        gpu_memory_bytes: total memory of the GPU (bytes); ``None`` counts as small.
        gpu_name: e.g. ``"NVIDIA H200"``.
        performance_mode: the ``--performance-mode`` flag, if given.
        max_num_batched_tokens: the step budget, if known.
    """
    if device == "cpu":
        seqs = 128
    elif (gpu_memory_bytes or 0) >= 70 * 2**30 and "a100" not in gpu_name.lower():
        seqs = 1024
    else:
        seqs = 256
    if performance_mode == "throughput":
        seqs *= 2
    return min(seqs, max_num_batched_tokens) if max_num_batched_tokens else seqs


def default_max_num_batched_tokens(
    device: str, gpu_memory_bytes: int | None = None, gpu_name: str = "",
    performance_mode: str | None = None,
) -> int:
    """vLLM's default ``max_num_batched_tokens`` for ``vllm serve`` (``get_batch_defaults``).

    CPU: 2048 (world size 1); a GPU with at least 160 GiB: 16384; at least 70 GiB and not an
    A100 (H100, H200): 8192; other GPUs: 2048; ``--performance-mode throughput`` doubles it
    (``vllm/engine/arg_utils.py`` of 0.32, the same table for H200 in 0.26).
    vLLM logs the value only sometimes ("Chunked prefill is enabled with ..."), hence this.
    """
    mem = gpu_memory_bytes or 0
    if device == "cpu":
        budget = 2048
    elif mem >= 160 * 2**30:
        budget = 16384
    elif mem >= 70 * 2**30 and "a100" not in gpu_name.lower():
        budget = 8192
    else:
        budget = 2048
    return budget * 2 if performance_mode == "throughput" else budget


def _gpu_memory() -> tuple[int | None, str]:
    """(total bytes, name) of GPU 0 from ``nvidia-smi``, or (None, "") without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, ""
    try:
        out = subprocess.run(
            [exe, "--query-gpu=memory.total,name", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.splitlines()
        mib, name = out[0].split(",", 1)
        return int(float(mib)) * 2**20, name.strip()
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, ""


_CAUSES = [
    ("port_in_use", r"Address already in use|Errno 98"),
    (
        "out_of_memory",
        r"out of memory|OutOfMemoryError|Available memory on node .* less than|"
        r"No available memory for the cache blocks|Insufficient memory|Cannot allocate memory",
    ),
    (
        "max_model_len",
        r"max_model_len.*(larger|greater) than|KV cache is needed, which is larger than",
    ),
    (
        "model_not_found",
        r"not a valid model identifier|Repository Not Found|does not appear to have|"
        r"Invalid repository ID|No such file or directory.*config\.json|"
        r"Can't load the configuration|couldn't connect to 'https://huggingface.co'|"
        r"Repo id must be in the form|outgoing traffic has been disabled|"
        r"LocalEntryNotFoundError|GatedRepoError|RepositoryNotFoundError",
    ),
    ("bad_flag", r"unrecognized arguments|error: argument|invalid choice"),
]

_ADVICE = {
    "port_in_use": "another process holds the port; leave port unset to pick a free one",
    "out_of_memory": "lower --gpu-memory-utilization / --kv-cache-memory-bytes, --max-model-len "
    "or --max-num-seqs, or stop other servers (`vllm-course servers list`)",
    "max_model_len": "the KV cache cannot hold one request of --max-model-len tokens: lower "
    "--max-model-len or give the KV cache more memory",
    "model_not_found": "check the model name: a card (tiny-mistral, mistral-7b-v0.3), a local "
    "path, or a hub id (needs network and, for gated models, HF_TOKEN)",
    "bad_flag": "vLLM rejected a flag or value; see the log lines below",
    "timeout": "the server did not become healthy in time; see the log lines below",
    "crashed": "the server process exited; see the log lines below",
    "unknown": "see the log lines below",
}


def classify_failure(log_text: str) -> str:
    """The likely cause of a failed start from the log: one of :attr:`ServerError.cause`."""
    for cause, pattern in _CAUSES:
        if re.search(pattern, log_text, re.I):
            return cause
    return "unknown"


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


def _child_setup(die_with_parent: bool, nice: int) -> None:  # in the child, before exec
    if nice:
        os.nice(nice)
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


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if unreadable)."""
    try:
        data = path.read_bytes()[-200_000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class VLLMServer:
    """One vLLM OpenAI-compatible server process.

    Use as a context manager::

        with VLLMServer(ServerConfig(args={"max-num-seqs": 64}), log_path=path) as srv:
            print(srv.base_url, srv.facts.kv_cache_tokens)

    Args:
        config: the server settings.
        log_path: where the server's stdout and stderr go (a temp-like default under the course
            home if ``None``).
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
        merged = {k: v for k, v in self.profile_args.items() if k not in self.config.args}
        merged.update(self.config.args)
        if env.vllm_build() == "cpu" and merged.get("kv-cache-memory-bytes") is None:
            merged["kv-cache-memory-bytes"] = 1 << 30
        return merged

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
            ServerError: the server exited or did not become healthy within
                ``config.startup_timeout_s``; ``cause`` says why and the log tail is shown.
        """
        if self.proc is not None:
            return self
        check_flags(ServerConfig(args=self.effective_args()).argv())
        check_values(self.effective_args())
        model = self.config.model
        if (
            not models.is_card(model)
            and model.startswith(("/", "./", "../", "~"))
            and not Path(model).expanduser().exists()
        ):
            raise ServerError(
                f"model path {model} does not exist (nothing was launched): "
                f"{_ADVICE['model_not_found']}",
                cause="model_not_found",
            )
        if self.port is None:
            self.port = free_port(self.config.host)
        elif not port_is_free(self.config.host, self.port):
            raise ServerError(f"port {self.port} on {self.config.host} is in use (nothing was "
                              f"launched): {_ADVICE['port_in_use']}", cause="port_in_use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", DEV_MODE: "1", **self.config.env}
        t_start = time.monotonic()
        with open(self.log_path, "ab") as log:
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
                                             CPU_SERVER_NICE if env.vllm_build() == "cpu" else 0),
            )
        from vllm_course import registry

        registry.register(self)
        try:
            self._wait_ready(t_start)
        except BaseException:
            self.stop(timeout_s=5.0)   # a half-started engine may ignore SIGTERM for a while
            raise
        self.facts = parse_startup_log(self.log_path.read_text(errors="replace"))
        self.facts.ready_s = round(time.monotonic() - t_start, 2)
        self.facts.block_size = self._block_size()
        self._fill_batch_limits()
        return self

    def _fill_batch_limits(self) -> None:
        """Fill ``max_num_batched_tokens``/``max_num_seqs`` from vLLM's defaults where the log
        did not say."""
        facts = self.facts
        if facts.max_num_seqs is not None and facts.max_num_batched_tokens is not None:
            return
        cpu = env.vllm_build() == "cpu"
        mem, name = (None, "") if cpu else _gpu_memory()
        mode = {**self.profile_args, **self.config.args}.get("performance-mode")
        device = "cpu" if cpu else "gpu"
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
                code = self.proc.poll()
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
            f"{message}: {cause.replace('_', ' ')} — {_ADVICE[cause]}",
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
        from vllm_course import registry

        try:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _wait_group_gone(proc.pid, 10.0)
        finally:
            registry.unregister(proc.pid)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"VLLMServer({self.config.model!r}, {self.base_url}, {state})"


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.1)
    _kill_group(pgid, signal.SIGKILL)


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

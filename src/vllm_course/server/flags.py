"""Server flags checked against the installed vLLM's own argument parser, by name and value,
before anything is launched (a misspelled flag fails in milliseconds with the closest real flag
named, instead of after a 40-second start)."""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys

from vllm_course import models
from vllm_course.config import ServerConfig
from vllm_course.env import machine
from vllm_course.server.failures import ServerError, UnknownFlagError

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



def _read_parser() -> tuple[list[str], dict[str, dict]]:
    """Every ``--flag`` of the installed vLLM's OpenAI server and what its value must look like,
    read in a subprocess (importing vLLM's parser takes seconds and emits warnings) and cached
    under the course home as ``flags/<version>.json`` and ``flags/<version>.kinds.json``.

    Raises:
        ServerError: if vLLM is not installed or its parser could not be read.
    """
    version = machine.vllm_version()
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
    version = machine.vllm_version()
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
        ServerError: with ``cause="bad_value"``, naming the flag, the value and what it must be;
            also for ``--quantization fp8`` under ``--dtype float32`` (vLLM takes fp8 weights
            only with bfloat16 or float16 activations).
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
    quantization, dtype = str(args.get("quantization")).lower(), str(args.get("dtype")).lower()
    if quantization == "fp8" and dtype in ("float32", "float"):
        # vLLM checks this while it builds its config, after the start has begun: "torch.float32
        # is not supported for quantization method fp8. Supported dtypes: [torch.bfloat16,
        # torch.float16]" (seen with vLLM 0.32's CPU build and the cpu-tiny profile)
        raise ServerError(
            f"--quantization fp8 needs --dtype bfloat16 or float16, not {dtype} (nothing was "
            "launched): add --dtype bfloat16, or remove --quantization", cause="bad_value")


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
            f"vLLM {machine.vllm_version()} has no flag {name}{hint} (nothing was launched)",
            cause="bad_flag",
        )


def check_cpu_kv_dtype(args: dict[str, object], flags: list[str] | None = None) -> None:
    """Refuse, before launch, the KV cache dtypes vLLM's CPU build stops on (call it for the CPU
    build only). ``args`` are the server's flags; ``flags`` the CPU's
    (:func:`vllm_course.env.cpu_flags`, read when ``None``).

    Raises:
        ServerError: ``cause="bad_value"``, for ``--kv-cache-dtype fp8*`` on a CPU without
            AVX-512 or AMX (vLLM 0.32 stops the server while it starts: "FP8 KV cache on CPU
            requires x86 with AVX-512 or AMX", ``vllm/v1/attention/backends/cpu_attn.py``), or a
            16-bit KV cache under a float32 model (vLLM 0.32's CPU engine died on its first
            requests with tiny-mistral and ``--kv-cache-dtype bfloat16``).
    """
    kv = str(args.get("kv-cache-dtype", "auto")).lower()
    if kv == "auto":
        return
    flags = machine.cpu_flags() if flags is None else flags
    if kv.startswith("fp8") and not machine.supports_cpu_fp8_kv(flags):
        raise ServerError(
            f"--kv-cache-dtype {kv} needs a CPU with AVX-512 or AMX in vLLM's CPU build, and this "
            f"one has {', '.join(flags) or 'neither'} (nothing was launched): remove the flag, or "
            "run on a GPU or an AVX-512 CPU", cause="bad_value")
    dtype = str(args.get("dtype", "auto")).lower()
    if dtype in ("float32", "float") and kv in ("bfloat16", "float16", "half"):
        raise ServerError(
            f"--kv-cache-dtype {kv} under --dtype {dtype} stops vLLM's CPU engine on its first "
            "requests (vLLM 0.32; nothing was launched): keep --kv-cache-dtype auto (the "
            "model's dtype)", cause="bad_value")


def check_args(args: dict[str, object]) -> None:
    """Every check a server's flags get before launch, in one place: names
    (:func:`check_flags`), values (:func:`check_values`) and, on the CPU build, the KV cache
    dtypes it stops on (:func:`check_cpu_kv_dtype`). ``args`` are the effective flags.

    Raises:
        UnknownFlagError: naming the bad flag and the closest real ones.
        ServerError: ``cause="bad_value"``, for a value vLLM rejects or the CPU build cannot run.
    """
    check_flags(ServerConfig(args=args).argv())
    check_values(args)
    if machine.vllm_build() == "cpu":
        check_cpu_kv_dtype(args)

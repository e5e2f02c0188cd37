"""Where a vLLM server's start-up time goes, with and without ``--enforce-eager``.

    python benchmarks/server_start.py                 # the detected profile, 2 starts each
    python benchmarks/server_start.py --repeats 3 --variants eager

Each start launches a real server (the profile's model and flags, 127.0.0.1), waits for
``/health`` and stops it. The phases come from the timestamps vLLM writes in its log (second
resolution), measured from the launch: imports until the API server printed its version, the
engine core's start, weight loading, torch.compile, the engine's profile/KV-cache/warm-up, and
the last phase until the API server answered. Prints one table: seconds per phase and variant.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import statistics
import tempfile
import time
from pathlib import Path

from vllm_course import env
from vllm_course.config import ServerConfig
from vllm_course.server import VLLMServer

VARIANTS = {"compiled": {}, "eager": {"enforce-eager": True}}
# (phase, the log line that ends it), in the order they happen
MARKS = [
    ("imports, argument parsing", r"vLLM API server version"),
    ("engine core process start", r"Initializing a V1 LLM engine"),
    ("model load (dummy weights)", r"(?:Loading weights|Model loading) took"),
    ("torch.compile", r"torch\.compile takes|Compil(?:ing|ation) .* took"),
    ("profile, KV cache, warm-up", r"init engine .* took"),
    ("API server ready", r"Starting vLLM API server|Application startup complete"),
]
STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def _stamp(line: str, year: int) -> float | None:
    m = STAMP.search(line)
    if m is None:
        return None
    mo, d, h, mi, s = map(int, m.groups())
    return dt.datetime(year, mo, d, h, mi, s).timestamp()


def phases(log: str, launched: float, ready_s: float) -> dict[str, float]:
    """Seconds since the launch at which each phase ended (``None``-free: missing marks are
    skipped); ``ready`` is when ``/health`` first answered."""
    year = dt.datetime.fromtimestamp(launched).year
    out: dict[str, float] = {}
    for name, pattern in MARKS:
        for line in log.splitlines():
            if re.search(pattern, line) and (t := _stamp(line, year)) is not None:
                out[name] = max(0.0, t - launched)
                break
    out["/health answered"] = ready_s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args()
    profile = env.current_profile()
    results: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for variant in args.variants:
                log = Path(tmp) / f"{variant}-{i}.log"
                config = ServerConfig(model=profile.model, args=VARIANTS[variant])
                launched = time.time()
                server = VLLMServer(config, log_path=log, profile_args=profile.server_args)
                try:
                    server.start()
                    ready = server.facts.ready_s
                finally:
                    server.stop()
                results[variant].append(phases(log.read_text(errors="replace"), launched, ready))
                print(f"{variant} start {i + 1}: ready in {ready:.1f} s", flush=True)
    names = [n for n, _ in MARKS] + ["/health answered"]
    print(f"\nseconds since launch (median of {args.repeats}; vLLM {env.vllm_version()}, "
          f"profile {profile.name})")
    print(f"{'phase ends':<30}" + "".join(f"{v:>12}" for v in args.variants))
    for name in names:
        cells = []
        for v in args.variants:
            vals = [r[name] for r in results[v] if name in r]
            cells.append(f"{statistics.median(vals):12.1f}" if vals else f"{'-':>12}")
        print(f"{name:<30}" + "".join(cells))


if __name__ == "__main__":
    main()

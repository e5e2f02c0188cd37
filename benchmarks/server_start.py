"""Where a vLLM server's start-up time goes, with and without ``--enforce-eager``.

    python benchmarks/server_start.py                 # the detected profile, 2 starts each
    python benchmarks/server_start.py --repeats 3 --variants eager
    python benchmarks/server_start.py --side-by-side 2     # N eager starts: in turn vs at once

Each start launches a real server (the profile's model and flags, 127.0.0.1), waits for
``/health`` and stops it. The table gives, per variant, the second (since the launch) at which
each phase ended, from the timestamps vLLM writes in its log (second resolution): imports and
argument parsing, the engine core process's start, model load, the warm-up (where
torch.compile runs), profiling and KV cache allocation, the API server's start; then when
``/health`` first answered, and vLLM's own "init engine ... took X s (compilation: Y s)".

With ``--side-by-side N`` it instead starts N ``--enforce-eager`` servers (identical but for a label
in their environment, so the pool keeps them apart) one after the other, then N side by side
(``ServerPool.prestart``, what ``nb.start_servers`` uses in the chapters), and prints the wall
time until all N answered ``/health``, stops excluded.
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
from vllm_course.server import ServerPool, VLLMServer

VARIANTS = {"compiled": {}, "eager": {"enforce-eager": True}}
# (phase, the log line that ends it), in the order they happen (vLLM 0.32's CPU build)
MARKS = [
    ("imports, argument parsing", r"non-default args"),
    ("engine core process start", r"Initializing a V1 LLM engine"),
    ("model load (dummy weights)", r"Warming up model for the compilation"),
    ("warm-up (torch.compile)", r"Warming up done"),
    ("profile, KV cache", r"init engine .* took"),
    ("API server ready", r"Starting vLLM server on|Available routes"),
]
COMPILE = re.compile(r"init engine .* took ([\d.]+) s(?: \(compilation: ([\d.]+) s)?")
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
    if m := COMPILE.search(log):
        out["engine init (vLLM's own)"] = float(m.group(1))
        out["of it compilation (vLLM's own)"] = float(m.group(2) or 0.0)
    return out


def side_by_side(n: int, repeats: int) -> None:
    """Print the wall time (s) of N eager starts one after the other and side by side."""
    profile = env.current_profile()
    configs = [ServerConfig(model=profile.model, args={"enforce-eager": True},
                            env={"VLLM_COURSE_REPLICA": str(i)}) for i in range(n)]
    print(f"{n} eager starts (vLLM {env.vllm_version()}, profile {profile.name}): wall time until "
          "all answered /health, s")
    print(f"{'repeat':<8}{'one after the other':>22}{'side by side':>14}{'ratio':>8}")
    for r in range(repeats):
        times = []
        for together in (False, True):
            pool = ServerPool(max_live=n, profile_args=profile.server_args)
            try:
                t0 = time.monotonic()
                if together:
                    pool.prestart(configs)
                else:
                    for config in configs:
                        pool.release(pool.acquire(config))
                times.append(time.monotonic() - t0)
            finally:
                pool.close()
        print(f"{r + 1:<8}{times[0]:>22.1f}{times[1]:>14.1f}{times[1] / times[0]:>8.2f}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--side-by-side", type=int, metavar="N",
                    help="instead: N eager starts one after the other, then side by side")
    args = ap.parse_args()
    if args.side_by_side:
        side_by_side(args.side_by_side, args.repeats)
        return
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
    names = [n for n, _ in MARKS] + ["/health answered", "engine init (vLLM's own)",
                                     "of it compilation (vLLM's own)"]
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

"""What every chapter notebook uses: set-up, workload sizes, checks of "what you should see",
and the committed H200 reference results.

A chapter starts with::

    from vllm_course import notebook as nb
    profile = nb.setup()              # prints where it runs; returns the hardware Profile

scales its workloads with ``nb.scaled(full=400, ci=60)`` (``COURSE_SIZE=ci`` in CI), runs real
experiments with ``await run_experiment(...)`` (servers come from the kernel's pool, or from the
CI job's broker when ``VLLM_COURSE_POOL`` is set: see :mod:`vllm_course.server.broker`), and
states each claim of "what you should see" as ``nb.check(condition, "claim", evidence)``: a
chapter that runs but shows nonsense fails in CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vllm_course.env import machine
from vllm_course.env.profile import Profile
from vllm_course.errors import stopped_claim
from vllm_course.models import REPO_ROOT

REFERENCE_DIR = REPO_ROOT / "reference"
SIZES = ("ci", "full")


def size() -> str:
    """``"ci"`` when ``COURSE_SIZE=ci`` (small workloads, for CI on 2 cores), else ``"full"``.

    Raises:
        ValueError: for another value of ``COURSE_SIZE``.
    """
    value = os.environ.get("COURSE_SIZE", "full").strip().lower() or "full"
    if value not in SIZES:
        raise ValueError(f"COURSE_SIZE must be one of {', '.join(SIZES)}, not {value!r}")
    return value


def scaled(full: int, ci: int) -> int:
    """``ci`` under ``COURSE_SIZE=ci``, else ``full`` (e.g. a number of requests)."""
    return ci if size() == "ci" else full


def part(name: str) -> bool:
    """Whether this execution runs the part ``name`` of a chapter: True unless
    ``COURSE_PARTS`` names other parts only. A chapter whose GPU run needs more server starts
    than one device call holds is run in parts (``vllm-course reference run ch15.int4``; see
    reference/README.md); a learner runs every part."""
    from vllm_course.reference.catalog import PARTS_VAR

    chosen = {p.strip() for p in os.environ.get(PARTS_VAR, "").split(",") if p.strip()}
    return not chosen or name in chosen


def setup(quiet: bool = False) -> Profile:
    """Detect the hardware profile and say where this notebook runs.

    Prints one line: profile, device, model card, vLLM version and build, workload size, and
    whether servers come from this kernel or from a CI broker; a second when the profile is an
    estimate or generic (not measured on this GPU model). Returns the :class:`Profile`.
    """
    profile = machine.current_profile()
    if _in_kernel():
        from vllm_course import experiment
        from vllm_course.server import ServerPool, default_pool

        experiment.PROGRESS = RequestProgress
        pool = default_pool()
        if isinstance(pool, ServerPool):   # a CI broker's servers are started elsewhere
            pool.announce = server_start_notice
    if not quiet:
        version, build = machine.vllm_version(), machine.vllm_build()
        broker = os.environ.get("VLLM_COURSE_POOL")
        print(
            f"profile {profile.name} ({profile.device}), model {profile.model}, "
            f"vLLM {version or 'NOT INSTALLED'} ({build or '?'} build), size {size()}, "
            + (f"servers from the CI broker at {broker}" if broker
               else "servers owned by this kernel")
        )
        if profile.status != "measured":
            print(f"note: {profile.description}. The chapters' expected numbers come from the "
                  "cpu-tiny and h200 profiles; directions should hold here, sizes may differ.")
        if version is None:
            raise RuntimeError("vLLM is not installed in this kernel's Python: run `make setup` "
                               "and pick the kernel 'Python (vllm-course)'")
    return profile


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (where a display can be updated in place)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class _Line:
    """One line of a cell's output, replaced in place on each :meth:`show`."""

    def __init__(self) -> None:
        self._handle = None

    def show(self, text: str) -> None:
        from IPython.display import display

        bundle = {"text/plain": text}
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)


class RequestProgress:
    """A run's progress in the cell: ``name: [#####.....] 12/48 requests, 3 s``, updated in place
    at most 4 times a second (a :data:`vllm_course.loadgen.ProgressFn`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._line = _Line()
        self._t0 = time.monotonic()
        self._shown = -1.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._shown < 0.25:
            return
        self._shown = now
        filled = int(20 * done / total) if total else 0
        self._line.show(f"{self.name}: [{'#' * filled}{'.' * (20 - filled)}] {done}/{total} "
                        f"requests, {now - self._t0:.0f} s")


@contextmanager
def server_start_notice(server) -> Iterator[None]:
    """Say in the cell that a vLLM server is starting, with its elapsed time every second, and
    when it is ready (a :attr:`vllm_course.server.ServerPool.announce` hook)."""
    line, t0, done = _Line(), time.monotonic(), threading.Event()
    flags = " ".join(server.config.argv()) or "default flags"
    what = f"vLLM server for {server.config.model} ({flags})"

    def tick() -> None:
        while not done.wait(1.0):
            line.show(f"starting a {what}: {time.monotonic() - t0:.0f} s "
                      "(~40-70 s on a 2-core CPU, ~2 min on a GPU)")

    line.show(f"starting a {what} ...")
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    except BaseException:
        done.set()
        line.show(f"the {what} did not start ({time.monotonic() - t0:.0f} s)")
        raise
    done.set()
    ticker.join()
    kv = server.facts.kv_cache_tokens
    line.show(f"{what} ready in {time.monotonic() - t0:.0f} s"
              + (f", KV cache {kv:,} tokens" if kv else ""))


#: How far apart two timings of the *same work* can land on a small shared CPU machine (the
#: 2-core CI runner): the largest ratio measured there is x1.40 (chapter 11, a fresh-clone CI run:
#: the same batch of 8 at 395 and at 553 output tok/s); the band adds a margin to it. A timing
#: claim of "no change" or "no clear gain" on the CPU build is judged against this band, since
#: inside it two runs of the same work cannot be told apart; claims that vLLM guarantees (engine
#: steps, blocks, tokens, preemptions) are judged exactly instead.
CPU_TIMING_NOISE = 1.5


def within_noise(a: float, b: float, noise: float = CPU_TIMING_NOISE) -> bool:
    """Whether two positive timings (or rates) of the same work differ by less than ``noise``.

    Args:
        a, b: the two measurements, in the same unit (ms, s or tok/s); both must be > 0.
        noise: the largest ratio allowed either way (default :data:`CPU_TIMING_NOISE`).

    Returns:
        ``1 / noise <= a / b <= noise``; False when either value is not a positive number.
    """
    try:
        ratio = a / b
    except (TypeError, ZeroDivisionError):
        return False
    return bool(a > 0 and b > 0 and 1 / noise <= ratio <= noise)


def start_servers(*configs: Any) -> bool:
    """Start the servers a chapter is about to use side by side, before its first run needs
    them (:meth:`vllm_course.server.ServerPool.prestart`); each run then finds its server
    running. A server start is mostly single-threaded, so on the project's 2-core machine two
    eager starts took 43 s side by side against 61 s one after the other (measured with
    ``benchmarks/server_start.py --side-by-side 2``, 2026-12-02).

    Args:
        configs: :class:`vllm_course.config.ServerConfig` objects, the order does not matter.

    Returns:
        True if they were started (or already ran); False, doing nothing, when there is only one
        distinct config or more than the pool keeps running at once (``max_live``): then each
        run starts its server when it needs it, as it would anyway.

    Raises:
        ServerError: a start failed (its cause and log tail included).
    """
    from vllm_course.server import default_pool

    pool = default_pool()
    if not 1 < len({c.key() for c in configs}) <= pool.max_live:
        return False
    pool.prestart(list(configs))
    return True


class CheckFailed(AssertionError):
    """A chapter's "what you should see" claim did not hold."""


def check(condition: bool, claim: str, evidence: Any = None) -> None:
    """Assert one claim of "what you should see", printing it either way.

    Args:
        condition: whether the claim held in this run.
        claim: the claim, in words (e.g. "total tok/s rises with concurrency").
        evidence: the numbers behind it, printed beside the claim.

    Raises:
        CheckFailed: if ``condition`` is false (so CI fails on a notebook showing nonsense).
    """
    detail = "" if evidence is None else f"  [{evidence}]"
    if not condition:
        raise CheckFailed(f"expected: {claim}{detail}")
    print(f"ok: {claim}{detail}")


def reference(path: str) -> dict | None:
    """A committed reference result (JSON) under ``reference/``, or ``None`` if it is not there.

    ``path`` is relative to ``reference/``, e.g. ``"h200/observability/h200-light/summary.json"``.
    When the file is missing (the H200 run is pending), prints that plainly and returns None.
    """
    file = REFERENCE_DIR / path
    if not file.is_file():
        print(f"H200 reference pending: {file.relative_to(REPO_ROOT)} is not committed yet")
        return None
    return json.loads(file.read_text())


def show_reference_run(path: str, numbers: bool = True, others: bool = True) -> None:
    """Show a chapter's committed H200 run summary (``run.json`` as ``vllm-course reference run``
    writes it: ``headline``, ``failed``, ``numbers`` rows of ``quantity``/values, which a person
    fills from the run's outputs, ``checks`` lines): the headline, why it stopped early if it
    did, the numbers as a table (unless ``numbers`` is false or there are none yet) and the
    chapter's check lines. A summary not committed yet is said
    to be pending, as :func:`reference` does. Unless ``others`` is false, one line follows for
    each other GPU profile that ran the same item (:func:`other_gpu_runs`), pending or not."""
    run = reference(path)
    if run is not None:
        print(run["headline"])
        if run.get("failed"):
            print("stopped early:", run["failed"])
        if numbers and run.get("numbers"):
            import pandas as pd
            from IPython.display import display

            display(pd.DataFrame(run["numbers"]).set_index("quantity"))
        # indented: an executed chapter's own check lines start with "ok: ", and the reference
        # runner (vllm_course.reference.run) reads only those
        print("\n".join("  " + line for line in run["checks"]))
    for line in other_gpu_runs(path) if others else []:
        print(line)


def other_gpu_runs(path: str) -> list[str]:
    """One line per other profile folder of ``reference/`` holding the same run summary as
    ``path`` (``"h200/chapters/17_preemption_scheduling/run.json"`` -> ``h100-80g/chapters/...``):
    its GPU, profile, date and vLLM version, whether every check held or the claim it stopped at,
    and the folder whose ``outputs.txt`` and figures hold the rest. Folders in name order; none
    there: ``[]``."""
    from vllm_course.reference.catalog import other_profile_runs

    own, _, rest = path.partition("/")
    dest = Path(rest).parent
    lines = []
    for name, run in other_profile_runs(REFERENCE_DIR, own, str(dest)):
        outcome = (f"stopped early, {stopped_claim(run['failed'])}" if run.get("failed")
                   else f"all {len(run['checks'])} checks held")
        lines.append(f"also on {run['gpu']}, profile {name}, {run['measured']}, vLLM "
                     f"{run['vllm_version']}: {outcome} "
                     f"({(REFERENCE_DIR / name / dest).relative_to(REPO_ROOT)}/)")
    return lines


def results_root(chapter: str) -> Path:
    """Where a chapter's runs go: ``results/chapters/<chapter>/`` under the repository."""
    path = REPO_ROOT / "results" / "chapters" / chapter
    path.mkdir(parents=True, exist_ok=True)
    return path


def vllm_source_lines(relative: str, pattern: str) -> list[str]:
    """Lines of the installed vLLM's source file ``relative`` (e.g. ``"config/cache.py"``) that
    match the regular expression ``pattern``, as ``"relative:N: line"`` (N from 1); read from
    disk, without importing vLLM. Chapters quote vLLM's own code this way, so the quote follows
    the version the learner has installed.

    Raises:
        FileNotFoundError: vLLM is not installed, or has no such file.
    """
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("vLLM is not installed in this kernel's environment")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return [f"{relative}:{i}: {line.strip()}"
            for i, line in enumerate(path.read_text().splitlines(), 1) if re.search(pattern, line)]

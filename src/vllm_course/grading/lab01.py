"""lab01, "Measure it right": the learner's metric functions against the reference definitions.

The learner writes TTFT, TPOT, ITL and E2EL of one request record, a percentile and goodput, as
``vllm bench serve`` defines them (``vllm/benchmarks/serve.py`` and
``vllm/benchmarks/lib/endpoint_request_func.py``; :mod:`vllm_course.metrics` implements the same
definitions). The run cell applies them to every request of a fresh run
(:func:`answers_of`), stores their values beside the reference ones in ``results/lab01.json``,
and each test cell awards the share of values that agree (:func:`score_answers`).
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_course import metrics
from vllm_course.config import SLO
from vllm_course.grading.results import RESULTS_DIR, LabError, load_results, records_of
from vllm_course.grading.session import Measure, quiet_stderr
from vllm_course.records import RequestRecord

LAB01_FUNCTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
"""The per-request functions: ``record dict -> ms`` (``itl_ms``: a list of ms)."""
PERCENTILES = (50.0, 90.0, 99.0)
"""Where the learner's ``percentile`` is tried, on the run's reference TTFTs (ms)."""
TOLERANCE = 1e-6
"""How far a value may be from the reference (ms, or req/s for goodput) and still count."""
_LIBRARY = "vllm_course"


def _globals_read(code: Any) -> set[str]:
    """The global names ``code`` (and the code nested in it: comprehensions, inner functions)
    loads; attribute names (``r.ttft_s``) are not globals and are left out."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_read(const)
    return names


def _is_library(obj: Any) -> bool:
    """Whether ``obj`` is a module, class or function of this course's library."""
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
    else:
        obj = getattr(obj, "__func__", obj)             # a bound method: its function
        name = getattr(obj, "__module__", None) if callable(obj) else None
    return isinstance(name, str) and (name == _LIBRARY or name.startswith(_LIBRARY + "."))


def library_uses(fn: Any, _seen: set[int] | None = None) -> set[str]:
    """The names through which ``fn`` reaches this course's library (:data:`_LIBRARY`): the
    globals its code reads, the variables it closes over and its default arguments that are a
    module, class or function of the library, followed into the learner's own functions it
    uses (a helper of the learner's named ``ttft_s`` is the learner's, not the library's).

    A name is resolved to the object it holds, so an alias (``f = metrics.ttft_s``) counts and
    a global of the learner's that shares a library name (a dict called ``metrics``) does not.
    """
    seen = set() if _seen is None else _seen
    if id(fn) in seen:
        return set()
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        return library_uses(fn.func, seen) | {
            u for a in (*fn.args, *fn.keywords.values()) for u in _uses_of("argument", a, seen)}
    if _is_library(fn):
        return {getattr(fn, "__qualname__", repr(fn))}
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    found: dict[str, Any] = {}
    scope = getattr(fn, "__globals__", {})
    found.update({n: scope[n] for n in _globals_read(code) if n in scope})
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            found[name] = cell.cell_contents
        except ValueError:              # a cell not filled yet
            continue
    defaults = [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
    found.update({f"a default argument ({i})": d for i, d in enumerate(defaults)})
    used: set[str] = set()
    for name, obj in found.items():
        used |= _uses_of(name, obj, seen)
    return used


def _uses_of(name: str, obj: Any, seen: set[int]) -> set[str]:
    if _is_library(obj):
        return {name}
    if isinstance(obj, (types.FunctionType, types.MethodType, functools.partial)):
        return library_uses(obj, seen)
    return set()


def answers_of(**functions: Callable) -> Measure:
    """The run cell's ``measure`` hook: apply the learner's functions to the measured records.

    ``functions``: :data:`LAB01_FUNCTIONS` (each ``record dict -> ms``; ``itl_ms`` a list of
    ms), ``percentile(values, p)`` (applied to the reference TTFTs at :data:`PERCENTILES`) and
    ``goodput_rps(records, slo, duration_s)`` (``slo`` a dict of ``ttft_ms``/``tpot_ms``/
    ``e2el_ms`` limits in ms, ``None`` where unset; the result in req/s). A function that raises
    is recorded as the error's text, so one broken function costs only its own points.

    Raises:
        LabError: a function that uses this course's library (:func:`library_uses`; the lab
            asks for the definitions, not for a call to ours), or every function still raises
            ``NotImplementedError`` on a made-up record (a run could score nothing, so no
            server starts).
    """
    for name, fn in functions.items():
        if used := library_uses(fn):
            raise LabError(f"{name} uses {sorted(used)}, from the course's library "
                           f"({_LIBRARY}): write the definition yourself (your own helper "
                           "functions are fine)")
    if functions and all(_not_implemented(name, fn) for name, fn in functions.items()):
        raise LabError(f"every function ({', '.join(functions)}) still raises "
                       "NotImplementedError, so a run would score nothing: write at least one, "
                       "then run this cell again (nothing was started)")

    def call(fn: Callable | None, *args: Any) -> Any:
        if fn is None:
            return "not defined"
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 (graded as wrong, not fatal)
            return f"{type(exc).__name__}: {exc}"

    def measure(records: list[dict], run: dict) -> dict:
        reference = reference_answers(records, run["slo"], run["duration_s"])
        answers: dict[str, Any] = {name: [call(functions.get(name), dict(r)) for r in records]
                                   for name in LAB01_FUNCTIONS}
        ttfts = [v for v in reference["ttft_ms"] if v is not None]
        answers["percentile"] = [call(functions.get("percentile"), list(ttfts), p)
                                 for p in PERCENTILES]
        answers["goodput_rps"] = call(functions.get("goodput_rps"), [dict(r) for r in records],
                                      dict(run["slo"] or {}), run["duration_s"])
        return {"answers": answers, "reference": reference}

    return measure


def _not_implemented(name: str, fn: Callable | None) -> bool:
    """Whether ``fn`` (one of lab01's functions, by ``name``) raises NotImplementedError on a
    made-up successful request of 3 tokens (any other outcome, error or not, counts as
    written)."""
    if fn is None:
        return True
    record = RequestRecord(index=0, prompt_len=8, max_tokens=3, sent_s=0.0,
                           chunk_s=[0.05, 0.06, 0.08], chunk_tokens=[1, 1, 1],
                           last_choice_s=0.08, end_s=0.09, prompt_tokens=8, output_tokens=3,
                           finish_reason="length").to_dict()
    args: tuple = {"percentile": ([1.0, 2.0, 3.0], 50.0),
                   "goodput_rps": ([record], {"ttft_ms": 1000.0}, 1.0)}.get(name, (record,))
    try:
        fn(*args)
    except NotImplementedError:
        return True
    except Exception:  # noqa: BLE001 (written, if wrongly: the run grades it)
        return False
    return False


def reference_answers(records: list[dict], slo: dict | None, duration_s: float) -> dict:
    """What each lab01 answer should be for ``records`` (dicts as in ``requests.jsonl``): the
    per-request metrics in ms (``None`` where a definition gives none), ``percentile`` of the
    TTFTs at :data:`PERCENTILES` (ms), ``goodput_rps`` over ``duration_s`` seconds (req/s), all
    from :mod:`vllm_course.metrics`."""
    recs = [RequestRecord.from_dict(r) for r in records]
    ms = {"ttft_ms": metrics.ttft_s, "tpot_ms": metrics.tpot_s, "e2el_ms": metrics.e2el_s}
    ref: dict[str, Any] = {name: [None if (v := fn(r)) is None else 1000.0 * v for r in recs]
                           for name, fn in ms.items()}
    ref["itl_ms"] = [[1000.0 * v for v in metrics.itl_s(r)] for r in recs]
    ttfts = [v for v in ref["ttft_ms"] if v is not None]
    ref["percentile"] = [metrics.percentile(ttfts, p) for p in PERCENTILES]
    summary = metrics.summarize(recs, slo=SLO.model_validate(slo) if slo else None,
                                duration_s=duration_s)
    ref["goodput_rps"] = summary.goodput_rps
    return ref


def _same(a: Any, b: Any) -> bool:
    if b is None:
        return a is None
    if isinstance(b, list):
        return (isinstance(a, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b, strict=True)))
    number = isinstance(a, (int, float)) and not isinstance(a, bool)
    return number and abs(float(a) - b) <= TOLERANCE


def score_answers(lab: str, name: str, points: float,
                  results_dir: Path | str = RESULTS_DIR) -> float:
    """Points for one of the learner's lab01 answers (a test cell's last expression: nbgrader
    takes a number as partial credit): ``points`` × the share of values within
    :data:`TOLERANCE` of the reference stored by the run cell (``None`` where the definition
    gives none). Per-request metrics count request by request, ``percentile`` at
    :data:`PERCENTILES`, ``goodput_rps`` as one value. Prints the share and the first mismatch.

    Raises:
        LabError: the results file is not trustworthy (see :func:`load_results`) or has no
            reference for ``name``.
    """
    with quiet_stderr():
        data = load_results(lab, results_dir)
        if name not in (data.get("reference") or {}):
            raise LabError(f"{lab}'s results have no reference for {name!r}")
        expected = data["reference"][name]
        got = (data.get("answers") or {}).get(name)
        if name == "goodput_rps":
            expected, got = [expected], [got]
        if not isinstance(got, list) or len(got) != len(expected):
            print(f"{name}: {got!r} is not one value per expected answer: 0 / {points:g} points")
            return 0.0
        right = [_same(g, e) for g, e in zip(got, expected, strict=True)]
        share = sum(right) / len(right) if right else 0.0
        print(f"{name}: {sum(right)} of {len(right)} values equal the reference -> "
              f"{share * points:.2f} / {points:g} points")
        if not all(right):
            i = right.index(False)
            print(f"  first mismatch (#{i}): yours {got[i]!r}, reference {expected[i]!r}")
        return round(share * points, 2)


def example_record(lab: str, results_dir: Path | str = RESULTS_DIR) -> dict:
    """The first measured request record of ``lab``'s last run (a dict as in
    ``requests.jsonl``), to look at its fields; chunk lists are cut to 5 entries.

    Raises:
        LabError: the results file is not trustworthy (see :func:`load_results`).
    """
    data = load_results(lab, results_dir)
    record = dict(records_of(Path(data["run_dir"]))[0])
    for key in ("chunk_s", "chunk_tokens"):
        if len(record[key]) > 5:
            record[key] = record[key][:5] + [f"... {len(record[key]) - 5} more"]
    return record

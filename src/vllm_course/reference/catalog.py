"""What a reference run can run, and how long each item is expected to take on the device.

An item's estimate is its last run's ``wall_s`` from the ``run.json`` committed in its results
folder when there is one (the device seconds it took there), else the longest of its runs on
the other GPU profiles (``reference/h100-80g/`` when an H100 ran it and the H200 has not: the
same commands, the GPU's speed aside), else :data:`DEFAULT_S` for its kind. A run on this
profile that a call stopped at its limit (``run.json``, or ``first-call-run.json`` beside the
``merged.txt`` of a comparison that other calls finished) marks the item ``ran_out``: its time
there is only a lower bound, and the plan gives it a call of its own. Its ``servers``
are the server settings (``ServerConfig.key()``) that its run on this profile recorded, so the
plan can put items that share a server side by side; empty when not known yet.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vllm_course.env.profile import profile_names
from vllm_course.models import REPO_ROOT

REFERENCE_ROOT = REPO_ROOT / "reference"

#: Device seconds assumed for an item never run on the device, by kind. Sources: the H200 runs
#: of 2026-11/12 (reference/h200/): chapters took 137-389 s each with their server starts
#: (100-130 s for a 7B card), lab02/lab03 calibrations 337 and 438 s, a Poisson comparison of
#: 900 requests x 2 repeats per tool about 400 s with its server start.
#: Labs graded on definitions, not on measured performance: nothing to calibrate, so their
#: reference run executes the solution notebook (``labs/source/<lab>/``), whose run cell starts
#: its own server and whose test cells, hidden ones included, check the run (the grading
#: scenarios' labs without targets; a unit test keeps the two in step).
UNMEASURED_LABS = ("lab01",)
#: The environment variable naming the parts of a chapter a kernel runs (comma-separated;
#: unset or empty: all), read by :func:`vllm_course.notebook.part`.
PARTS_VAR = "COURSE_PARTS"
#: Chapters whose GPU run needs more server starts than one device call holds, and the parts
#: (``nb.part(...)`` in the notebook) each of which fits one: ``ch15.fp8`` runs part "fp8".
CHAPTER_PARTS = {"ch15": ("fp8", "int4"), "ch18": ("replicas", "layouts-a", "layouts-b")}
DEFAULT_S = {"chapter": 300, "lab": 450, "bench": 420, "demo": 240}
#: A lab item's calibration file in its folder, and the finished runs a calibration stopped at
#: a call's end keeps beside it (``vllm-course calibrate`` names it after the file), which the
#: item's next run resumes from.
CALIBRATION = "calibration.json"
KEPT_RUNS = "calibration.partial.json"
#: A comparison whose repeats several calls made keeps the first call's ``run.json`` under this
#: name beside ``merged.txt`` (``compare_vllm_bench.py --merge``): the runner made that call, the
#: others ran by hand.
FIRST_CALL_RUN = "first-call-run.json"
#: How ``run.json``'s ``failed`` begins for a run the call's end stopped: the runner writes
#: "stopped: the call's time ran out" (a notebook: "stopped: TimeoutError (...)"), and the
#: records written by hand before it "stopped at the call's 540 s deadline ...". Other failures
#: begin otherwise ("CheckFailed: ...", "exit status 1"), though ``reference status`` shows
#: every failure as "stopped: <claim>".
RAN_OUT = "stopped"

#: The harness comparisons: the two acceptance workloads of benchmarks/README.md, a Poisson
#: load below saturation and a burst (compare_vllm_bench.py's flags). The
#: script saves its table after every repeat, so a call's end keeps the repeats it finished;
#: ``compare_vllm_bench.py --merge`` joins the repeats of several calls.
BENCH_ARGS = {
    "bench-poisson": ("--num-requests", "900", "--input-len", "1024", "--output-len", "256",
                      "--rate", "15", "--repeats", "2"),
    "bench-burst": ("--num-requests", "1000", "--input-len", "128", "--output-len", "512",
                    "--rate", "inf", "--repeats", "3", "--prime", "1"),
}


@dataclass(frozen=True)
class Item:
    """One thing to run on the device.

    Attributes:
        id: ``ch11``, ``lab03``, ``bench-burst``, ``demo``.
        kind: ``chapter``, ``lab``, ``bench`` or ``demo``.
        source: the notebook a chapter or an unmeasured lab runs (repository-relative), else the
            lab id or script.
        dest: its results folder under ``reference/<profile>/``.
        estimate_s: expected device seconds, server starts included (s).
        estimate_from: where the estimate comes from, for a person.
        servers: server settings its last run used (``ServerConfig.key()``), empty if unknown.
        parts: for one part of a chapter (id ``ch15.int4``), the ``COURSE_PARTS`` its kernel
            runs with (:func:`vllm_course.notebook.part`); empty: the whole chapter.
        ran_out: its last run on this profile was stopped by its call's end, so
            ``estimate_s`` (the time it had run then) is a lower bound.
    """

    id: str
    kind: str
    source: str
    dest: str
    estimate_s: int
    estimate_from: str
    servers: tuple[str, ...] = field(default=())
    parts: str = ""
    ran_out: bool = False

    def argv(self, model: str, profile: str, out: Path) -> list[str]:
        """The command that runs a lab, bench or demo item, writing into ``out`` (a chapter
        runs in a kernel instead: ``[]``)."""
        py = [sys.executable]
        if self.kind == "lab":
            if self.source.endswith(".ipynb"):    # executed in a kernel, as a chapter is
                return []
            return [*py, "-m", "vllm_course", "calibrate", self.id, "--profile", profile,
                    "--out", str(out / CALIBRATION)]
        if self.kind == "bench":
            return [*py, str(REPO_ROOT / self.source), "--model", model,
                    *BENCH_ARGS[self.id], "--out", str(out)]
        if self.kind == "demo":
            return [*py, "-m", "vllm_course", "demo", "--results", str(out)]
        return []


def _last_run(folder: Path, name: str = "run.json") -> dict:
    """``folder/name`` (a run's record) as a dict; ``{}`` if it is missing, unreadable or not
    an object."""
    try:
        run = json.loads((folder / name).read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    return run if isinstance(run, dict) else {}


def _wall_s(run: dict) -> float | None:
    """A run's ``wall_s`` (s) if it is a finite number of device seconds (0 to a day), else
    ``None``: a damaged ``run.json`` must not plan a call of minus five or infinite seconds."""
    wall = run.get("wall_s")
    ok = isinstance(wall, int | float) and not isinstance(wall, bool) and 0 <= wall <= 86_400
    return float(wall) if ok else None


def _servers(run: dict) -> tuple[str, ...]:
    """A run's ``servers`` (``ServerConfig.key()`` strings); ``()`` if it is not a list of
    strings."""
    servers = run.get("servers")
    if isinstance(servers, list) and all(isinstance(s, str) for s in servers):
        return tuple(servers)
    return ()


def measured_on(run: dict, missing: str = "?") -> str:
    """A run's ``measured`` date, ``missing`` when it records none (or not as one line of
    text)."""
    date = run.get("measured")
    return date if isinstance(date, str) and date and date.isprintable() else missing


def _kept_runs(folder: Path) -> tuple[int, int] | None:
    """(runs kept, runs wanted) of the calibration a call stopped in ``folder``, if any."""
    try:
        kept = json.loads((folder / KEPT_RUNS).read_text())
        runs, wanted = kept["runs"], kept["runs_wanted"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return None
    if not isinstance(runs, list) or not isinstance(wanted, int) or isinstance(wanted, bool) \
            or not 0 < wanted <= 100:
        return None                     # damaged: plan the item as if nothing were kept
    return len(runs), wanted


def other_profile_runs(root: Path, profile: str, dest: str) -> list[tuple[str, dict]]:
    """(profile, run) for each profile folder under ``root`` (named after one of the course's
    profiles) other than ``profile`` whose ``dest/run.json`` reads as a JSON object, in folder
    name order; none: ``[]``."""
    if not root.is_dir():
        return []
    known = set(profile_names())
    return [(folder.name, run) for folder in sorted(root.iterdir())
            if folder.is_dir() and folder.name in known and folder.name != profile
            and (run := _last_run(folder / dest))]


def _elsewhere(root: Path, profile: str, dest: str) -> tuple[str, dict] | None:
    """(profile, run) of the longest timed run of ``dest`` on another profile under ``root``,
    or ``None``: the longest, because a call planned too short stops its item unfinished."""
    timed = [(name, run) for name, run in other_profile_runs(root, profile, dest)
             if _wall_s(run) is not None]
    return max(timed, key=lambda r: _wall_s(r[1]), default=None)


def _item(id_: str, kind: str, source: str, dest: str, profile: str, parts: str = "",
          root: Path = REFERENCE_ROOT) -> Item:
    last = _last_run(root / profile / dest)
    # a lab calibration an earlier call stopped, resumed by the next (not the lab01 notebook)
    kept = (_kept_runs(root / profile / dest)
            if kind == "lab" and not source.endswith(".ipynb") else None)
    made = last.get("runs_made", kept[0] if kept else None)
    wall = _wall_s(last)
    stopped = last or _last_run(root / profile / dest, FIRST_CALL_RUN)
    ran_out = (_wall_s(stopped) is not None
               and str(stopped.get("failed") or "").startswith(RAN_OUT))
    if kept and kept[0] < kept[1] and wall is not None and isinstance(made, int) and made > 0:
        # the rest, at the time its last call's runs took (an overestimate: that time also
        # holds the run it was stopped in)
        per_run = wall / made
        how = (f"resumes {kept[0]} of {kept[1]} runs kept, ~{per_run:.0f} s a run in its "
               f"last call on {measured_on(last)}")
        estimate = int(round(per_run * (kept[1] - kept[0])))
    elif kept and kept[0] < kept[1]:
        how, estimate = (f"resumes {kept[0]} of {kept[1]} runs kept; no run of its last call "
                         f"was timed: the default for a {kind}"), DEFAULT_S[kind]
    elif ran_out:
        wall = _wall_s(stopped)
        how = (f"its last run ran out of its call after {wall:.0f} s on {measured_on(stopped)}: "
               "it needs more")
        estimate = int(round(wall))
    elif wall is not None:
        how, estimate = f"its last run: {wall:.0f} s on {measured_on(last)}", int(round(wall))
    elif other := _elsewhere(root, profile, dest):
        name, run = other
        how = (f"not run on {profile} yet: its {name} run took {_wall_s(run):.0f} s on "
               f"{measured_on(run)}")
        estimate = int(round(_wall_s(run)))
    else:
        how, estimate = f"not run yet: the default for a {kind}", DEFAULT_S[kind]
    return Item(id_, kind, source, dest, estimate, how, _servers(last), parts, ran_out)


def catalog(profile: str = "h200", root: Path = REPO_ROOT) -> list[Item]:
    """Every item, in the course's order: the demo, chapters, labs, then the comparisons."""
    items = [_item("demo", "demo", "vllm_course demo", "demo", profile)]
    for nb in sorted((root / "chapters").glob("[0-9][0-9]_*.ipynb")):
        chapter, source = f"ch{nb.name[:2]}", nb.relative_to(root).as_posix()
        items.append(_item(chapter, "chapter", source, f"chapters/{nb.stem}", profile))
        for name in CHAPTER_PARTS.get(chapter, ()):
            items.append(_item(f"{chapter}.{name}", "chapter", source,
                               f"chapters/{nb.stem}.{name}", profile, parts=name))
    for lab in sorted((root / "labs" / "source").glob("lab[0-9][0-9]")):
        source = ((lab / f"{lab.name}.ipynb").relative_to(root).as_posix()
                  if lab.name in UNMEASURED_LABS else lab.name)
        items.append(_item(lab.name, "lab", source, f"labs/{lab.name}", profile))
    for bench in BENCH_ARGS:
        items.append(_item(bench, "bench", "benchmarks/compare_vllm_bench.py", f"bench/{bench}",
                           profile))
    return items


GROUPS = {"chapters": "chapter", "labs": "lab", "bench": "bench"}


def select(words: list[str], items: list[Item]) -> list[Item]:
    """The items ``words`` name, in the catalog's order, each once: ids (``ch11``, ``lab03``,
    ``bench-burst``, ``demo``, a chapter's part ``ch15.int4``), ranges of one kind
    (``ch01-ch08``), ``chapters``, ``labs``, ``bench`` or ``all`` (ranges and groups hold whole
    chapters, not their parts).

    Raises:
        ValueError: a word names nothing (the message lists what exists), or a range runs
            backwards (``ch03-ch01``: the message gives it the right way round).
    """
    by_id = {i.id: i for i in items}
    chosen: set[str] = set()
    for word in words:
        w = word.strip().lower()
        if w == "all":
            chosen |= {i.id for i in items if not i.parts}
        elif w in GROUPS:
            chosen |= {i.id for i in items if i.kind == GROUPS[w] and not i.parts}
        elif m := re.fullmatch(r"([a-z]+)([0-9]{1,3})-([a-z]+)?([0-9]{1,3})", w):
            prefix, lo, prefix2, hi = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
            if prefix2 not in (None, prefix):
                raise ValueError(f"{word!r}: a range stays within one kind, e.g. ch01-ch08")
            if lo > hi:
                raise ValueError(f"{word!r} runs backwards: write the lower number first, "
                                 f"{prefix}{m.group(4)}-{prefix}{m.group(2)}")
            found = {i.id for i in items if re.fullmatch(rf"{prefix}(\d+)", i.id)
                     and lo <= int(i.id[len(prefix):]) <= hi}
            if not found:
                raise ValueError(f"{word!r} names no item; there are: {', '.join(by_id)}")
            chosen |= found
        elif w in by_id:
            chosen.add(w)
        else:
            raise ValueError(f"{word!r} names no item; there are: {', '.join(by_id)}, "
                             "ranges like ch01-ch08, chapters, labs, bench, all")
    return [i for i in items if i.id in chosen]

"""Where the reference runs stand: for each item and each GPU profile folder under
``reference/``, its last run (date, whether every check held or the claim it stopped at) and
whether the item's source changed since that run, so a stale run (a chapter's code cells
rewritten since) is told from a current one before device time is spent.

"Changed" compares what the item's source executes (a notebook's code cells: its prose changes
often, and a run does not execute it) with what it executed in the run: exactly, by the
``source_sha256`` the runner records in ``run.json``; for runs older than that record, by the
source at the commit that last changed the run's ``run.json`` (a fix landed in that same
commit is missed), and without git history (a downloaded archive) not at all.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vllm_course.env.profile import profile_names
from vllm_course.errors import stopped_claim
from vllm_course.reference.catalog import (
    CHAPTER_PARTS,
    REFERENCE_ROOT,
    REPO_ROOT,
    Item,
    _last_run,
    measured_on,
)


@dataclass(frozen=True)
class Standing:
    """One item's last run on one profile.

    Attributes:
        item: the item id (``ch11``).
        profile: the profile folder (``h200``).
        measured: the run's date (``YYYY-MM-DD``); ``""`` if there is no run.
        outcome: ``"all N checks held"``, ``"stopped: <claim>"``, ``"ok"`` (a run with no
            check lines: a lab calibration, a comparison), ``"calibrated: <files>"`` (a lab
            calibrated before the runner existed), ``"ok: merged.txt ..."`` (a comparison
            whose repeats several calls made, ``compare_vllm_bench.py --merge``), ``"before the
            runner: <file>"`` (see :data:`EARLIER`), ``"covered by <items>"`` (see
            :func:`standings`) or ``"pending"``.
        changed: whether the item's source changed since the run was committed; ``None`` when
            unknown (no run, or no git history).
    """

    item: str
    profile: str
    measured: str
    outcome: str
    changed: bool | None

    @property
    def redo(self) -> bool:
        """True for a run that stopped, whose ``run.json`` cannot be read, or whose item
        changed after it was committed."""
        return bool(self.changed) or self.outcome.startswith(("stopped", "unreadable"))


def sources(item: Item) -> list[str]:
    """The repository files whose change can change what ``item`` measures: a chapter's
    notebook (its jupytext twin holds the same code), a lab's notebook (its calibration runs
    the locked run cell with the solution), a comparison's script, the module of the demo
    command (a change to another command in it counts too). Changes to the library beneath
    them are not counted: they would mark every run."""
    if item.kind == "chapter":
        return [item.source]
    if item.kind == "lab":
        return [f"labs/source/{item.id}/{item.id}.ipynb"]
    if item.kind == "bench":
        return [item.source]
    return ["src/vllm_course/cli/runs.py"]


def _code_cells(data: bytes) -> list[str] | None:
    """The code cells' sources of a notebook's JSON; ``None`` if it is not one."""
    try:
        cells = json.loads(data)["cells"]
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c.get("cell_type") == "code"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _what_runs(path: str, data: bytes) -> bytes:
    """What of a source file a run executes: a notebook's code cells, else the whole file."""
    if path.endswith(".ipynb") and (cells := _code_cells(data)) is not None:
        return "\0".join(cells).encode()
    return data


def source_digest(item: Item, root: Path = REPO_ROOT) -> str | None:
    """SHA-256 (hex) of what ``item``'s sources (:func:`sources`) execute, as the runner
    records it in ``run.json`` (``source_sha256``); ``None`` if one is missing."""
    digest = hashlib.sha256()
    for path in sources(item):
        try:
            data = (root / path).read_bytes()
        except OSError:
            return None
        digest.update(path.encode() + b"\0" + _what_runs(path, data) + b"\0")
    return digest.hexdigest()


def _git(root: Path, *args: str) -> bytes | None:
    """``git -C root ARGS``'s output, or ``None`` if it failed (no git, no history)."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _same_run(then: bytes, now: bytes) -> bool:
    """Whether two versions of a record are the same run: a ``run.json``'s headline (date, GPU,
    call, time) decides, as later commits edit its file list; any other record must match."""
    try:
        old, new = json.loads(then), json.loads(now)
        if isinstance(old, dict) and isinstance(new, dict) and "headline" in new:
            return old.get("headline") == new["headline"]
    except ValueError:
        pass
    return then == now


def landed(record: Path, root: Path = REPO_ROOT) -> str | None:
    """The commit that brought ``record``'s run in: the oldest of the commits that changed it
    since which it is still the same run (:func:`_same_run`; a later commit that only edits a
    ``run.json``'s file list does not count). ``None`` when ``record`` is not committed or
    there is no git history."""
    path = record.relative_to(root).as_posix()
    log = _git(root, "log", "--format=%H", "--", path)
    try:
        now = record.read_bytes()
    except OSError:
        return None
    found = None
    for commit in (log or b"").decode().split():
        then = _git(root, "show", f"{commit}:{path}")
        if then is None or not _same_run(then, now):
            break
        found = commit
    return found


def source_changed(record: Path, paths: list[str], root: Path = REPO_ROOT) -> bool | None:
    """Whether ``paths`` (repository-relative files) differ now from the commit that brought
    ``record``'s run in (:func:`landed`), notebooks by their code cells only: for runs made
    before the runner recorded ``source_sha256``. ``None`` when that commit is unknown."""
    return _changed_at(landed(record, root), paths, root)


def _changed_at(commit: str | None, paths: list[str], root: Path) -> bool | None:
    """:func:`source_changed` from the commit that brought a run in (``None``: unknown)."""
    if commit is None:
        return None
    for path in paths:
        then = _git(root, "show", f"{commit}:{path}")
        try:
            now = (root / path).read_bytes()
        except OSError:
            return True                                  # removed since
        if then is None or _what_runs(path, then) != _what_runs(path, now):
            return True                                  # added or changed since
    return False


def _outcome(run: dict) -> str:
    if run.get("failed"):
        claim = stopped_claim(run["failed"])
        return "stopped: " + (claim if len(claim) <= 90 else claim[:89] + "…")
    checks = run.get("checks")
    return f"all {len(checks)} checks held" if isinstance(checks, list) and checks else "ok"


#: Items run before the runner existed whose results another layout keeps: (profile, item) ->
#: the file under ``reference/<profile>/`` (dated by the commit that added it).
EARLIER = {("h200", "bench-poisson"): "bench/client-wire-2026-12-04-poisson/comparison.json"}


def _calibrated(folder: Path, lab: str) -> tuple[Path, str] | None:
    """A lab's calibration files from before the runner (``labs/lab02-calibration.json`` beside
    its folder): (the last by name, ``"calibrated: <names> (valid ...)"``), or ``None``."""
    files = sorted(folder.parent.glob(f"{lab}-*.json"))
    if not files:
        return None
    said = []
    for file in files:
        try:
            valid = json.loads(file.read_text()).get("valid")
        except (OSError, ValueError, AttributeError):
            valid = None
        said.append(f"{file.name} (valid: {valid})")
    return files[-1], "calibrated: " + ", ".join(said)


def _committed_on(commit: str | None, root: Path) -> str:
    """The date (``YYYY-MM-DD``) of ``commit`` (the one that brought a record with no date of
    its own in); ``""`` if unknown."""
    done = _git(root, "show", "-s", "--format=%cs", commit) if commit else None
    return done.decode().strip() if done else ""


def profiles(root: Path = REFERENCE_ROOT) -> list[str]:
    """The profile folders under ``root`` (``h100-80g``, ``h200``), in name order: folders
    named after one of the course's profiles (not ``.ipynb_checkpoints`` or a stray folder)."""
    if not root.is_dir():
        return []
    known = set(profile_names())
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name in known)


def standing(item: Item, profile: str, root: Path = REFERENCE_ROOT,
             repo: Path = REPO_ROOT) -> Standing:
    """Where ``item`` stands on ``profile``: its ``run.json`` under ``root/profile/item.dest``,
    else (a lab) its calibration files from before the runner, else a comparison's
    ``merged.txt``, else its record in :data:`EARLIER`, else pending. A lab with both names
    its calibration files after the run's outcome."""
    folder = root / profile / item.dest
    run = _last_run(folder)
    old = _calibrated(folder, item.id) if item.kind == "lab" else None
    if run:
        record, measured, outcome = folder / "run.json", measured_on(run, ""), _outcome(run)
        if old:
            outcome += "; also " + old[1]
    elif (folder / "run.json").is_file():
        return Standing(item.id, profile, "", "unreadable run.json (not a JSON object)", None)
    elif old:
        record, outcome = old
        measured = None          # no date of its own: the commit that brought it in (below)
    elif (folder / "merged.txt").is_file():         # a comparison run over several calls
        record, outcome = folder / "merged.txt", "ok: merged.txt joins several calls' repeats"
        measured = None
    elif (profile, item.id) in EARLIER and (root / profile / EARLIER[profile, item.id]).is_file():
        record = root / profile / EARLIER[profile, item.id]
        outcome = f"before the runner: {EARLIER[profile, item.id]}"
        measured = None
    else:
        return Standing(item.id, profile, "", "pending", None)
    if run.get("source_sha256"):                     # recorded by the runner: exact
        changed = source_digest(item, repo) != run["source_sha256"]
    else:                                            # older runs: the commit that added them
        commit = landed(record, repo)                # once: it walks the record's history
        changed = _changed_at(commit, sources(item), repo)
        if measured is None:
            measured = _committed_on(commit, repo)
    return Standing(item.id, profile, measured, outcome, changed)


#: Chapter parts that need more GPUs than the device lends: the whole chapter run on one GPU
#: skips them (chapter 18's TP=2 vs DP=2 layouts: "needs at least 2"), so it does not cover them.
MULTI_GPU_PARTS = ("ch18.layouts-a", "ch18.layouts-b")


def _covered(row: Standing, ran: set[str]) -> str | None:
    """For a pending chapter part, or a pending chapter run in parts, what ran in its place on
    the same profile (the whole chapter; all its parts); else ``None``."""
    whole, _, part = row.item.partition(".")
    if part and whole in ran and row.item not in MULTI_GPU_PARTS:
        return whole
    parts = [f"{row.item}.{p}" for p in CHAPTER_PARTS.get(row.item, ())]
    if parts and all(p in ran for p in parts):
        return ", ".join(parts)
    return None


def standings(items: list[Item], root: Path = REFERENCE_ROOT,
              repo: Path = REPO_ROOT) -> list[Standing]:
    """One :class:`Standing` per item and profile folder, items in the order given. A chapter
    part pending where its whole chapter ran (or a chapter pending whose parts all ran) is
    ``"covered by ..."``, not pending. So is one whose own run is to redo (stopped, or its
    source changed since) where what covers it ran later, on the same day or after, and is
    not to redo itself (h200's ch15 stopped on 2026-12-04; ch15.fp8 and ch15.int4 ran whole
    on 2026-12-07): ``"covered by ...; its own run of <date> superseded"``."""
    rows = [standing(item, profile, root, repo) for item in items for profile in profiles(root)]
    ran = {(r.profile, r.item) for r in rows if r.measured or r.outcome != "pending"}
    held = {(r.profile, r.item): r.measured for r in rows if r.measured and not r.redo}
    out = []
    for row in rows:
        mine = {item for profile, item in ran if profile == row.profile}
        if row.outcome == "pending" and (by := _covered(row, mine)):
            row = Standing(row.item, row.profile, "", f"covered by {by}", None)
        elif row.redo and row.measured and (by := _covered(row, {
                item for (profile, item), day in held.items()
                if profile == row.profile and day >= row.measured})):
            row = Standing(row.item, row.profile, "",
                           f"covered by {by}; its own run of {row.measured} superseded", None)
        out.append(row)
    return out


def describe(rows: list[Standing]) -> str:
    """The standings for a person: one line per item and profile, then per profile the runs to
    redo (stopped, or their item changed since) and those pending, and how many runs could not
    be compared with their source (no ``source_sha256`` and no git history)."""
    lines = []
    for row in rows:
        note = "  CHANGED since: rerun" if row.changed else ""
        lines.append(f"{row.item:<14} {row.profile:<9} {row.measured or '-':<10}  "
                     f"{row.outcome}{note}")
    for profile in sorted({r.profile for r in rows}):
        mine = [r for r in rows if r.profile == profile]
        redo = [r.item for r in mine if r.redo]
        pending = [r.item for r in mine if r.outcome == "pending"]
        lines.append(f"{profile}: {len(mine) - len(pending)} of {len(mine)} run or covered; "
                     f"to redo: {' '.join(redo) or 'none'}; pending: "
                     f"{' '.join(pending) or 'none'}")
    unknown = sum(r.changed is None and not r.outcome.startswith(("pending", "covered",
                                                                  "unreadable")) for r in rows)
    if unknown:
        lines.append(f"{unknown} run(s) not compared with their source: no source_sha256 in "
                     "run.json and no git history here")
    return "\n".join(lines)

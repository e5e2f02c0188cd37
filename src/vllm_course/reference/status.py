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

from vllm_course.reference.catalog import REFERENCE_ROOT, REPO_ROOT, Item, _last_run


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
            runner: <file>"`` (see :data:`EARLIER`) or ``"pending"``.
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
        """True for a run that stopped, or whose item changed after it was committed."""
        return bool(self.changed) or self.outcome.startswith("stopped")


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


def _code_cells(text: str) -> list[str] | None:
    """The code cells' sources of a notebook's JSON text; ``None`` if it is not one."""
    try:
        cells = json.loads(text)["cells"]
    except (ValueError, KeyError, TypeError):
        return None
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c.get("cell_type") == "code"]


def _what_runs(path: str, text: str) -> str:
    """What of a source file a run executes: a notebook's code cells, else the whole text."""
    if path.endswith(".ipynb") and (cells := _code_cells(text)) is not None:
        return "\0".join(cells)
    return text


def source_digest(item: Item, root: Path = REPO_ROOT) -> str | None:
    """SHA-256 (hex) of what ``item``'s sources (:func:`sources`) execute, as the runner
    records it in ``run.json`` (``source_sha256``); ``None`` if one is missing."""
    digest = hashlib.sha256()
    for path in sources(item):
        try:
            text = (root / path).read_text()
        except OSError:
            return None
        digest.update(f"{path}\0{_what_runs(path, text)}\0".encode())
    return digest.hexdigest()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def source_changed(record: Path, paths: list[str], root: Path = REPO_ROOT) -> bool | None:
    """Whether ``paths`` (repository-relative files) differ now from the commit that last
    changed ``record`` (a run's ``run.json``), notebooks by their code cells only: for runs
    made before the runner recorded ``source_sha256``. ``None`` when ``record`` is not
    committed or there is no git history."""
    done = _git(root, "log", "-1", "--format=%H", "--", str(record.relative_to(root)))
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    commit = done.stdout.strip()
    for path in paths:
        then = _git(root, "show", f"{commit}:{path}")
        now = root / path
        if then is None or then.returncode != 0 or not now.is_file():
            return True                                  # added or removed since
        if _what_runs(path, then.stdout) != _what_runs(path, now.read_text()):
            return True
    return False


def _outcome(run: dict) -> str:
    if not run:
        return "pending"
    failed = (run.get("failed") or "").splitlines()
    if failed:
        claim = failed[0]
        for prefix in ("CheckFailed: ", "expected: ", "stopped: "):
            claim = claim.removeprefix(prefix)
        claim = claim.split("  [")[0]
        return "stopped: " + (claim if len(claim) <= 90 else claim[:89] + "…")
    checks = run.get("checks") or []
    return f"all {len(checks)} checks held" if checks else "ok"


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


def _committed_on(record: Path, root: Path) -> str:
    """The date (``YYYY-MM-DD``) of the commit that added ``record``; ``""`` if unknown."""
    done = _git(root, "log", "--diff-filter=A", "-1", "--format=%cs", "--",
                str(record.relative_to(root)))
    return done.stdout.strip() if done is not None and done.returncode == 0 else ""


def profiles(root: Path = REFERENCE_ROOT) -> list[str]:
    """The profile folders under ``root`` (``h100-80g``, ``h200``), in name order."""
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def standing(item: Item, profile: str, root: Path = REFERENCE_ROOT,
             repo: Path = REPO_ROOT) -> Standing:
    """Where ``item`` stands on ``profile``: its ``run.json`` under ``root/profile/item.dest``,
    else (a lab) its calibration files from before the runner, else a comparison's
    ``merged.txt``, else its record in :data:`EARLIER`, else pending."""
    folder = root / profile / item.dest
    run = _last_run(folder)
    if run:
        record, measured, outcome = folder / "run.json", run.get("measured", ""), _outcome(run)
    elif item.kind == "lab" and (old := _calibrated(folder, item.id)):
        record, outcome = old
        measured = _committed_on(record, repo)      # the files hold no date: when they landed
    elif (folder / "merged.txt").is_file():         # a comparison run over several calls
        record, outcome = folder / "merged.txt", "ok: merged.txt joins several calls' repeats"
        measured = _committed_on(record, repo)
    elif (profile, item.id) in EARLIER and (root / profile / EARLIER[profile, item.id]).is_file():
        record = root / profile / EARLIER[profile, item.id]
        outcome = f"before the runner: {EARLIER[profile, item.id]}"
        measured = _committed_on(record, repo)
    else:
        return Standing(item.id, profile, "", "pending", None)
    if run.get("source_sha256"):                     # recorded by the runner: exact
        changed = source_digest(item, repo) != run["source_sha256"]
    else:                                            # older runs: the commit that added them
        changed = source_changed(record, sources(item), repo)
    return Standing(item.id, profile, measured, outcome, changed)


def standings(items: list[Item], root: Path = REFERENCE_ROOT,
              repo: Path = REPO_ROOT) -> list[Standing]:
    """One :class:`Standing` per item and profile folder, items in the order given."""
    return [standing(item, profile, root, repo) for item in items for profile in profiles(root)]


def describe(rows: list[Standing]) -> str:
    """The standings for a person: one line per item and profile, then per profile the runs to
    redo (stopped, or their item changed since) and those pending."""
    lines = []
    for row in rows:
        note = {None: "", False: "", True: "  CHANGED since: rerun"}[row.changed]
        lines.append(f"{row.item:<14} {row.profile:<9} {row.measured or '-':<10}  "
                     f"{row.outcome}{note}")
    for profile in sorted({r.profile for r in rows}):
        mine = [r for r in rows if r.profile == profile]
        redo = [r.item for r in mine if r.redo]
        pending = [r.item for r in mine if r.outcome == "pending"]
        lines.append(f"{profile}: {len(mine) - len(pending)} of {len(mine)} run; to redo: "
                     f"{' '.join(redo) or 'none'}; pending: {' '.join(pending) or 'none'}")
    return "\n".join(lines)

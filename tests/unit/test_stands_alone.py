"""The repository stands alone: a learner clones it without the project's private notes, so no
tracked file may point outside it or to notes that are not in it."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the project's private design notes: cited by name they would send a learner to files they lack
PRIVATE_NOTES = ("DESIGN.md", "vllm_facts.md", "metrics_reference.md", "workload_stats.md",
                 "nbgrader_notes.md", "CLIENT.md", "LAYOUT.md", "STYLE.md")


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = [ROOT / p for p in out.decode().split("\0") if p]
    return [f for f in files if f.suffix not in {".png", ".ipynb", ".jsonl", ".csv", ".gz"}
            and f.is_file() and f.name != Path(__file__).name]


def test_nothing_points_outside_the_repository() -> None:
    hits = []
    for f in _tracked_text_files():
        text = f.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if "../shared" in line or any(note in line for note in PRIVATE_NOTES):
                hits.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert hits == []


def test_the_curriculum_is_in_the_repository() -> None:
    text = (ROOT / "chapters" / "README.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln[2:4].isdigit()]
    assert [ln[2:4] for ln in rows] == [f"{i:02d}" for i in range(1, 31)]
    labs = [ln for ln in text.splitlines() if ln.startswith("| lab0")]
    assert len(labs) == 8
    # a status per item, and "available" only for what is really here
    for ln in rows:
        status = ln.rstrip(" |").rsplit("|", 1)[1].strip()
        assert status in {"available", "in progress"}, ln
        if status == "available":
            assert list((ROOT / "chapters").glob(f"{ln[2:4]}_*.ipynb")), ln


def _prose_files() -> list[Path]:
    """The files a learner reads: Markdown, chapter sources, the course's docstrings."""
    return [f for f in _tracked_text_files()
            if f.suffix == ".md" or (f.suffix == ".py" and f.parts[len(ROOT.parts)] in
                                     ("chapters", "src", "scripts", "benchmarks"))]


def _resolves(dotted: str) -> bool:
    """Whether ``vllm_course.a.b`` names a module of the package or an attribute of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):     # a pydantic field, or an instance attribute a
                return inspect.isclass(obj) and (  # class sets in a method
                    name in getattr(obj, "model_fields", {})
                    or bool(re.search(rf"\bself\.{name}\b", inspect.getsource(obj))))
            obj = getattr(obj, name)
        return True
    return False


def test_the_course_modules_and_files_the_text_names_exist() -> None:
    """A module (``vllm_course.workload.prefix``) or a source file (``src/vllm_course/x.py``)
    named in prose exists: modules move, and a learner sent to an old name finds nothing."""
    missing = []
    for f in _prose_files():
        text = f.read_text(errors="replace")
        for m in re.finditer(r"\bvllm_course(?:\.[A-Za-z_]\w*)+", text):
            name = m.group(0).rstrip(".")
            if not _resolves(name):
                missing.append(f"{f.relative_to(ROOT)}: {name}")
        for m in re.finditer(r"`(src/vllm_course/[\w./-]+)`", text):
            if not (ROOT / m.group(1)).exists():
                missing.append(f"{f.relative_to(ROOT)}: {m.group(1)}")
    assert sorted(set(missing)) == []

"""The repository stands alone: a learner clones it without the project's private notes, so no
tracked file may point outside it or to notes that are not in it."""

from __future__ import annotations

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

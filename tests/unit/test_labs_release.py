"""The learner versions in labs/release/ are what nbgrader generates from labs/source/ today, and
leak neither a solution nor a hidden test (no server: nbgrader only rewrites the notebooks)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_course.grading import LAB_IDS

LABS = Path(__file__).resolve().parents[2] / "labs"
SOURCES = sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir())


def test_every_lab_has_a_source_and_a_release():
    assert SOURCES == sorted(LAB_IDS)
    assert sorted(p.name for p in (LABS / "release").iterdir() if p.is_dir()) == SOURCES


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A copy of the course root with every lab generated afresh."""
    root = tmp_path_factory.mktemp("labs")
    shutil.copy(LABS / "nbgrader_config.py", root)
    shutil.copytree(LABS / "source", root / "source")
    bindir = str(Path(sys.executable).parent)      # nbgrader runs alembic from the same env
    for lab in SOURCES:
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", lab,
                               "--force", "--log-level=WARN"], cwd=root, capture_output=True,
                              text=True, timeout=120,
                              env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(root)})
        assert done.returncode == 0, f"generate_assignment {lab}:\n{done.stdout}\n{done.stderr}"
    return root / "release"


@pytest.mark.parametrize("lab", SOURCES)
def test_the_committed_release_equals_a_fresh_generation(lab, generated):
    for fresh in sorted((generated / lab).rglob("*")):
        committed = LABS / "release" / lab / fresh.relative_to(generated / lab)
        assert committed.exists(), f"{committed} is missing: run `make release` and commit it"
        if fresh.is_file():
            assert json.loads(committed.read_text()) == json.loads(fresh.read_text()), (
                f"{committed} is not what nbgrader generates from labs/source/{lab}: run "
                "`make release` and commit labs/release/")
    extra = {p.relative_to(LABS / "release" / lab) for p in (LABS / "release" / lab).rglob("*")}
    assert extra == {p.relative_to(generated / lab) for p in (generated / lab).rglob("*")}


@pytest.mark.parametrize("lab", SOURCES)
def test_the_release_leaks_no_solution_and_no_hidden_test(lab):
    source = json.loads((LABS / "source" / lab / f"{lab}.ipynb").read_text())
    release = (LABS / "release" / lab / f"{lab}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in release
    hidden = []
    for cell in source["cells"]:
        text = "".join(cell["source"])
        for start, end in (("### BEGIN SOLUTION", "### END SOLUTION"),
                           ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")):
            while start in text:
                inner, text = text.split(start, 1)[1].split(end, 1)
                hidden += [ln.strip() for ln in inner.splitlines() if len(ln.strip()) > 12]
    assert hidden, f"{lab}'s source has no solution or hidden test to check"
    leaked = [ln for ln in hidden if ln in release]
    assert not leaked, f"labs/release/{lab} shows lines of the solution or hidden tests: {leaked}"

"""Each lab, autograded by nbgrader as an instructor grades it (``make autograde``), on the
detected profile (cpu-tiny in CI): the solution as a submission earns every point, the
unmodified release earns none, and a submission that writes its own ``results/<lab>.json``
earns none. The solution's run is the lab's validation: the one execution of the lab in CI
(the release and the forgery stop before a server starts).

Each lab's wall time goes to ``$COURSE_NOTEBOOK_TIMINGS`` as ``labs/<lab>`` for the time table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from vllm_course import env

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
SOURCES = sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir())
OUT = ROOT / "results" / "labs"

# what a learner who fakes the run writes: the file the tests read, with numbers that would
# score, but a nonce this kernel never issued (the run cell then starts nothing: lab01's
# functions still raise NotImplementedError, lab02's SERVER_FLAGS is not defined)
FORGERY = '''
import json, pathlib
pathlib.Path("results").mkdir(exist_ok=True)
pathlib.Path("results/{lab}.json").write_text(json.dumps({{
    "lab": "{lab}", "nonce": "0123456789abcdef0123456789abcdef",
    "server_counters": {{"generation_tokens": 1}}, "client_totals": {{"output_tokens": 1}},
    "metrics": {{"output_tok_s": 1e9, "output_tok_s_vs_baseline": 9.9, "p99_ttft_ms": 1.0,
                 "preemptions": 0, "p99_ttft_ms_vs_slo": 0.1, "p99_tpot_ms_vs_slo": 0.1,
                 "slo_attainment": 1.0}},
    "reference": {{"ttft_ms": [1.0]}}, "answers": {{"ttft_ms": [1.0]}}}}))
'''


def _submission(notebook: dict, root: Path, student: str, lab: str) -> None:
    folder = root / "submitted" / student / lab
    folder.mkdir(parents=True)
    (folder / f"{lab}.ipynb").write_text(json.dumps(notebook, indent=1))


def _forged(release: dict, lab: str) -> dict:
    """The release with a cell of the learner's own, just after the answer cell, that writes a
    fabricated results file before the run cell (a cell of its own: a release's answer cell may
    stop at its ``raise NotImplementedError()``)."""
    forged = json.loads(json.dumps(release))
    at = next(i for i, c in enumerate(forged["cells"])
              if c["metadata"].get("nbgrader", {}).get("solution"))
    forged["cells"].insert(at + 1, {"cell_type": "code", "execution_count": None, "metadata": {},
                                    "outputs": [], "source": FORGERY.format(lab=lab)})
    return forged


@pytest.mark.parametrize("lab", SOURCES)
def test_solution_scores_full_marks_release_and_forgery_score_nothing(lab, tmp_path,
                                                                     record_time):
    if env.vllm_version() is None:
        pytest.fail("vLLM is not installed: run `make setup` (labs run real servers)")
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(LABS / "nbgrader_config.py", root)
    shutil.copytree(LABS / "source" / lab, root / "source" / lab)
    source = json.loads((LABS / "source" / lab / f"{lab}.ipynb").read_text())
    release = json.loads((LABS / "release" / lab / f"{lab}.ipynb").read_text())
    _submission(source, root, "solution_bot", lab)
    _submission(release, root, "blank_bot", lab)
    _submission(_forged(release, lab), root, "forger", lab)

    # nbgrader runs alembic from the environment it runs in; the kernel (python3) is that
    # environment's Python; no broker: a graded run always starts its own server
    environ = {k: v for k, v in os.environ.items() if k != "VLLM_COURSE_POOL"}
    environ["PATH"] = f"{Path(sys.executable).parent}:{environ.get('PATH', '')}"
    t0 = time.monotonic()
    for step in (["generate_assignment", lab, "--force"], ["autograde", lab, "--force"]):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *step, "--log-level=WARN"],
                              cwd=root, env=environ, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"nbgrader {' '.join(step)}:\n{done.stdout}\n{done.stderr}"
    secs = time.monotonic() - t0
    record_time(f"labs/{lab}", secs)
    OUT.mkdir(parents=True, exist_ok=True)       # the graded notebooks, for reading a failure
    for student in ("solution_bot", "blank_bot", "forger"):
        graded = root / "autograded" / student / lab / f"{lab}.ipynb"
        shutil.copy(graded, OUT / f"{lab}-{student}.ipynb")

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission(lab, s) for s in ("solution_bot", "blank_bot", "forger")}
        got = {s: (round(sub.score, 2), sub.max_score) for s, sub in scores.items()}
    print(f"{lab}: {secs:.0f} s; scores {got}")
    total = got["solution_bot"][1]
    assert total > 0 and got["solution_bot"][0] == total, (
        f"the solution earned {got['solution_bot'][0]} of {total}: see "
        f"results/labs/{lab}-solution_bot.ipynb")
    assert got["blank_bot"][0] == 0, "the unmodified release earned points"
    assert got["forger"][0] == 0, "a fabricated results file earned points"


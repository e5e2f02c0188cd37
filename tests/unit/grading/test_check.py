"""``vllm-course lab check``: a lab notebook run as the autograder runs it, its test cells scored
with nbgrader's own rule; and ``vllm-course lab time``."""

from __future__ import annotations

import nbformat
from click.testing import CliRunner
from nbformat.v4 import new_code_cell, new_notebook

from vllm_course.cli import main
from vllm_course.grading.check import execute, score


def graded_cell(gid: str, source: str, points: float):
    cell = new_code_cell(source)
    cell.metadata = {"nbgrader": {"grade": True, "grade_id": gid, "locked": False,
                                  "points": points, "schema_version": 3, "solution": False}}
    return cell


def lab_notebook(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell("open('written-here.txt', 'w').write('x')\nraise RuntimeError('a bug')"),
        graded_cell("partial", "print('half of it')\n1.5", 2),
        graded_cell("fails", "assert 1 == 2, 'not equal'", 1),
        graded_cell("stderr", "import sys\nprint('a warning', file=sys.stderr)", 1),
        graded_cell("passes", "print('fine')", 2),
        graded_cell("hidden", "# hidden tests: they run when the instructor grades\n", 2),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}})
    path = tmp_path / "lab99.ipynb"
    nbformat.write(nb, path)
    return path


def test_each_test_cell_scores_as_nbgrader_scores_it(tmp_path):
    outcomes = {o.grade_id: o for o in score(execute(lab_notebook(tmp_path)))}
    # every cell ran after the first one raised, in the notebook's own folder
    assert (tmp_path / "written-here.txt").exists()
    assert (outcomes["partial"].earned, outcomes["partial"].why) == (1.5, "half of it")
    assert outcomes["fails"].earned == 0 and "not equal" in outcomes["fails"].why
    assert outcomes["stderr"].earned == 0 and "stderr" in outcomes["stderr"].why
    assert (outcomes["passes"].earned, outcomes["passes"].points) == (2, 2)
    # a release's cell of hidden tests holds only a comment: nbgrader would pass it
    assert outcomes["hidden"].hidden and outcomes["hidden"].earned == 0


def test_the_command_prints_the_points_and_fails_unless_all_were_earned(tmp_path):
    out = CliRunner().invoke(main, ["lab", "check", str(lab_notebook(tmp_path))])
    assert out.exit_code == 1, out.output
    assert "partial           1.50 / 2   half of it" in out.output
    assert "total             3.50 / 6   (and 2 points of hidden tests)" in out.output
    assert "hidden               - / 2   hidden tests" in out.output
    # the error of a cell that is not a test (a lab's run cell) is shown before the points
    assert out.output.splitlines()[1] == ("the notebook raised an error outside its tests, in "
                                          "cell 1: RuntimeError: a bug")
    missing = CliRunner().invoke(main, ["lab", "check", str(tmp_path / "nope.ipynb")])
    assert missing.exit_code == 2 and "no such notebook" in missing.output


def test_grading_time_is_learners_times_one_submission(monkeypatch):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    out = CliRunner().invoke(main, ["lab", "time", "lab02", "--learners", "30"])
    assert out.exit_code == 0, out.output
    assert "30 x 82 s = 41 min (0.7 h)" in out.output
    monkeypatch.setenv("PROFILE", "h200")
    out = CliRunner().invoke(main, ["lab", "time", "lab02", "--learners", "30"])
    assert out.exit_code == 2 and "not measured on profile h200" in out.output

"""A learner's self-check: run a lab notebook the way nbgrader's autograder does, without the
gradebook, and report each test cell's points (``vllm-course lab check``); a cell that holds
only hidden tests (no code in the learner's copy) is reported as such, not scored.

The notebook is executed top to bottom in its own folder, every cell even after an error (as
``nbgrader autograde`` does), so the run cell writes ``results/<lab>.json`` there. Each cell
marked as an autograded test then scores with nbgrader's own ``determine_grade``
(nbgrader/utils.py): 0 if it raised or wrote to stderr; else the number it ended on, if it ended
on one (partial credit); else all its points. Hidden tests are not in
a learner's copy, so only the visible tests run; the instructor's grading runs them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestOutcome:
    """One autograded test cell after the run.

    Attributes:
        grade_id: the cell's nbgrader id, e.g. ``"throughput"``.
        points: what the cell is worth.
        earned: what it earned (0 to ``points``).
        why: the cell's printed lines, or the error that zeroed it.
        hidden: the cell holds no code in the learner's copy (only hidden tests, removed from
            the release, which run when the instructor grades): not scored here.
    """

    grade_id: str
    points: float
    earned: float
    why: str
    hidden: bool = False


def _no_code(source: str) -> bool:
    """Whether ``source`` has no statement (blank, or comments only)."""
    import ast

    try:
        return not ast.parse(source).body
    except SyntaxError:
        return False


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    return ""


def _score(cell) -> TestOutcome:
    """Score a test cell with nbgrader's own rule (``nbgrader.utils.determine_grade``)."""
    from nbgrader.utils import determine_grade

    meta = cell.metadata["nbgrader"]
    if _no_code(cell.source):       # nbgrader would count it as passed: it raised nothing
        return TestOutcome(meta["grade_id"], float(meta.get("points", 0)), 0.0,
                           "hidden tests: they run when the instructor grades", hidden=True)
    outputs = cell.get("outputs", [])
    printed = "".join(_text(o) for o in outputs if o.get("name") != "stderr").strip()
    try:
        earned, points = determine_grade(cell)
    except ValueError as exc:      # a number above the cell's points
        return TestOutcome(meta["grade_id"], float(meta.get("points", 0)), 0.0, str(exc))
    if earned is None:
        return TestOutcome(meta["grade_id"], points, 0.0, "graded by the instructor")
    error = next((o for o in outputs if o.get("output_type") == "error"), None)
    if error is not None:
        printed = _text(error)
    elif earned == 0 and any(o.get("name") == "stderr" for o in outputs):
        printed = "wrote to stderr (nbgrader gives such a cell 0 points): " + printed
    return TestOutcome(meta["grade_id"], points, float(earned), printed)


def execute(notebook: Path | str, timeout_s: int = 1200):
    """``notebook`` executed top to bottom in its folder, every cell even after an error (as
    ``nbgrader autograde`` runs it); returns the executed ``nbformat`` notebook, for
    :func:`score` and :func:`first_error`.

    Args:
        notebook: a lab notebook (a learner's copy of ``labs/release/labNN/labNN.ipynb``).
        timeout_s: the most one cell may run (s), as ``c.Execute.timeout`` in
            ``labs/nbgrader_config.py``.

    Raises:
        FileNotFoundError: no such notebook.
        nbformat.reader.NotJSONError: the file is not a notebook.
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(notebook)
    nb = nbformat.read(path, as_version=4)
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    NotebookClient(nb, timeout=timeout_s, kernel_name=kernel, allow_errors=True,
                   resources={"metadata": {"path": str(path.resolve().parent)}}).execute()
    return nb


def score(nb) -> list[TestOutcome]:
    """One :class:`TestOutcome` per autograded test cell of the executed notebook ``nb``, in
    notebook order (empty if it has none: not a lab notebook)."""
    return [_score(c) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


def first_error(nb) -> str | None:
    """The first error of an executed notebook ``nb`` raised outside its test cells (the run
    cell, an answer cell), as ``"cell N: Name: message"`` (N counts code cells from 1), or
    ``None``: the tests after it usually fail only because of it."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    for n, cell in enumerate(code, start=1):
        if cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"),
                     None)
        if error is not None:
            return f"cell {n}: {_text(error)}"
    return None

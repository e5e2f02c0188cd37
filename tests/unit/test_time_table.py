"""scripts/time_table.py: CI's time table against .ci/budget.toml."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("time_table", ROOT / "scripts" / "time_table.py")
tt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tt)


def test_the_budget_file_has_the_course_budget() -> None:
    b = tt.load_budget()
    assert b["suites"] == {"setup": 180, "unit": 120, "integration": 600, "notebooks": 2100,
                           "labs": 720, "total": 3600}
    assert b["notebooks"] == {"chapter_mean": 75, "chapter_max": 180, "lab_max": 90,
                              "notebook_ceiling": 300}


def test_over_budget_lines_are_marked() -> None:
    budget = {"suites": {"unit": 120, "integration": 600},
              "notebooks": {"chapter_mean": 75, "chapter_max": 180, "lab_max": 90}}
    lines = tt.table({"unit": 50.0, "integration": 612.5},
                     {"chapters/01_a.ipynb": 60.0, "chapters/02_b.ipynb": 200.0,
                      "labs/lab01/lab01.ipynb": 80.0}, budget)
    by_name = {ln.split()[0]: ln for ln in lines if ln and not ln.startswith(("-", "suite"))}
    assert not by_name["unit"].endswith("OVER")
    assert by_name["integration"].split() == ["integration", "612.5", "600", "OVER"]
    assert by_name["chapters/02_b.ipynb"].endswith("OVER")
    assert not by_name["chapters/01_a.ipynb"].endswith("OVER")
    assert not by_name["labs/lab01/lab01.ipynb"].endswith("OVER")
    mean = next(ln for ln in lines if ln.startswith("mean of 2 chapters"))
    assert mean.split()[-2:] == ["75", "OVER"] and "130.0" in mean
    # one chapter (make notebook NB=...): no mean row to read as a failure
    one = tt.table({}, {"chapters/01_a.ipynb": 108.4}, budget)
    assert not any(ln.startswith("mean of") for ln in one)


def test_command_line(tmp_path, capsys) -> None:
    timings = tmp_path / "t.json"
    timings.write_text(json.dumps({"chapters/01_a.ipynb": 10.0}))
    assert tt.main(["unit=1.5", "integration=2", "--notebooks", str(timings)]) == 0
    out = capsys.readouterr().out
    assert "chapters/01_a.ipynb" in out and "unit" in out
    assert tt.main(["unit=1.5", "--notebooks", str(tmp_path / "none.json")]) == 0

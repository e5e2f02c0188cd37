"""Every grading test reads calibration files from a folder of its own, never from the course
home of the machine running the tests (an instructor's calibration would change the targets)."""

import pytest

from vllm_course.grading import targets


@pytest.fixture(autouse=True)
def calibration_root(tmp_path, monkeypatch):
    root = tmp_path / "calibration"
    monkeypatch.setattr(targets, "calibration_root", lambda: root)
    return root

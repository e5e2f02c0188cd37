"""Shared by every suite: the notebook time table's recorder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _record_time(name: str, secs: float) -> None:
    """Add ``name``'s wall time (s) to ``$COURSE_NOTEBOOK_TIMINGS`` (JSON), if that is set:
    ``scripts/test`` prints it against ``.ci/budget.toml``."""
    target = os.environ.get("COURSE_NOTEBOOK_TIMINGS")
    if not target:
        return
    path = Path(target) if Path(target).is_absolute() else ROOT / target
    path.parent.mkdir(parents=True, exist_ok=True)
    times = json.loads(path.read_text()) if path.exists() else {}
    times[name] = round(secs, 1)
    path.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


@pytest.fixture
def record_time():
    """``record_time(name, secs)``: a notebook's or lab's wall time, for the time table."""
    return _record_time

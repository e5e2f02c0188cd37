"""``ruff check`` over the repository, with the project's settings (pyproject.toml): CI runs it as
part of the unit suite, so a lint error fails the build like a failed test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")   # the one `make setup` installed (.[dev])
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: run make setup (it installs the dev extras)")
    return found


def test_ruff_check_passes():
    out = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_finds_an_unused_import(tmp_path):
    # the check is live: the same command fails on a file that breaks a selected rule
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    out = subprocess.run([_ruff(), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"),
                          str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "F401" in out.stdout

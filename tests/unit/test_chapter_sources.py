"""Chapter notebooks are paired with their reviewed jupytext sources and carry no outputs."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.config import load_jupytext_config

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))


def test_every_notebook_has_a_source_and_back():
    notebooks = {p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")}
    assert notebooks == {p.stem for p in SOURCES}


def test_pairing_is_the_repositorys_for_chapters_only():
    config = load_jupytext_config(str(ROOT / "chapters" / "01_welcome.ipynb"))
    assert config is not None, "no jupytext.toml at the repository root"
    assert config.default_formats(str(ROOT / "chapters" / "01_welcome.ipynb")) == (
        "chapters///ipynb,chapters///py:percent")
    assert config.default_formats(str(ROOT / "labs" / "lab01" / "lab01.ipynb")) is None


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_matches_its_source(source):
    text = source.read_text()
    assert "formats:" not in text.split("# ---", 2)[1], (
        f"{source.name}: pairing belongs in jupytext.toml, not in the notebook")
    assert "name: vllm-course" in text, f"{source.name}: not on the course's Jupyter kernel"
    from_py = jupytext.reads(text, fmt="py:percent")
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    ours = [(c.cell_type, c.source.strip()) for c in from_py.cells]
    theirs = [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert ours == theirs, (f"{source.stem}.ipynb differs from {source.name}: run "
                            f"`jupytext --sync chapters/{source.name}`")


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_committed_notebook_has_no_outputs(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{source.stem}.ipynb has outputs in cells {dirty}: clear them"

"""Every chapter executes top to bottom on the detected profile (cpu-tiny in CI), with its
"what you should see" checks (``nb.check``) passing."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
OUT = ROOT / "results" / "notebooks"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_executes_and_its_checks_hold(path, chapter_env):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.monotonic()
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name} failed:\n{exc}", pytrace=False)
    finally:
        OUT.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, OUT / path.name)   # the executed copy, for reading a failure
    print(f"{path.name}: {time.monotonic() - t0:.0f} s")
    checks = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("name") == "stdout" and "ok: " in o.get("text", "")]
    assert checks, f"{path.name} asserted none of its 'what you should see' claims (nb.check)"

"""Every chapter executes top to bottom on the detected profile (cpu-tiny in CI), with its
"what you should see" checks (``nb.check``) passing.

Each notebook's wall time goes to ``$COURSE_NOTEBOOK_TIMINGS`` (JSON, for ``scripts/test``'s time
table); a notebook still running after ``notebook_ceiling`` seconds (``.ci/budget.toml``) is
stopped and fails, so one runaway cannot eat CI's limit. One chapter the way CI runs it:
``make notebook NB=03_kv_cache``."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
import tomllib
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
CEILING_S = tomllib.loads((ROOT / ".ci" / "budget.toml").read_text())["notebooks"][
    "notebook_ceiling"]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
OUT = ROOT / "results" / "notebooks"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_executes_and_its_checks_hold(path, chapter_env, record_time):
    nb = nbformat.read(path, as_version=4)
    t0 = time.monotonic()
    client = NotebookClient(nb, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}},
                            timeout_func=lambda cell: _left_s(t0))
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(_failure(path, exc), pytrace=False)
    except TimeoutError:
        pytest.fail(f"{path.name} still ran after the {CEILING_S} s ceiling "
                    "(.ci/budget.toml notebook_ceiling): stopped", pytrace=False)
    finally:
        secs = time.monotonic() - t0
        record_time(path.relative_to(ROOT).as_posix(), secs)
        OUT.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, OUT / path.name)   # the executed copy, for reading a failure
    print(f"{path.name}: {secs:.0f} s")
    checks = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("name") == "stdout" and "ok: " in o.get("text", "")]
    assert checks, f"{path.name} asserted none of its 'what you should see' claims (nb.check)"


def _failure(path: Path, exc: CellExecutionError) -> str:
    """What failed, shortest first: the error line (for ``nb.check``, the claim and its evidence),
    then the failing cell's printed lines, then the cell and traceback. CI shows only a part of a
    long log, and the failing claim must be in that part."""
    out = str(exc)
    printed = out.split("----- stdout -----", 1)[1].split("------------------", 1)[0].strip() \
        if "----- stdout -----" in out else ""
    return (f"{path.name} failed: {exc.ename}: {exc.evalue}\n"
            f"the cell printed before it:\n{printed[-3000:]}\n\n"
            f"the executed copy: {(OUT / path.name).relative_to(ROOT)}; the cell and traceback:\n"
            f"{out[-6000:]}")


def _left_s(t0: float) -> int:
    """Seconds a cell may still run before the notebook passes its ceiling (at least 1)."""
    return max(1, int(CEILING_S - (time.monotonic() - t0)))


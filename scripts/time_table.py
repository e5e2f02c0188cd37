"""Print CI's time table: each suite's and each notebook's seconds beside the budget.

    python scripts/time_table.py unit=49.4 integration=512.0 [--notebooks results/timings.json]

The budget is ``.ci/budget.toml``; an over-budget line ends in ``OVER``. Notebook times come from
the JSON the notebook suites write (``{"chapters/01_welcome.ipynb": 61.2, ...}``). The table is a
report: it never changes the exit status (the notebooks' hard ceiling is enforced where they run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
BUDGET = ROOT / ".ci" / "budget.toml"


def load_budget(path: Path = BUDGET) -> dict:
    """The budget file as a dict (``suites`` and ``notebooks`` tables, seconds)."""
    with path.open("rb") as f:
        return tomllib.load(f)


def _line(name: str, secs: float, budget: float | None, note: str = "") -> str:
    limit = "" if budget is None else f"{budget:9.0f}"
    over = "  OVER" if budget is not None and secs > budget else ""
    return f"{name:<40} {secs:9.1f} {limit:>9}{over}{note}"


def table(suites: dict[str, float], notebooks: dict[str, float], budget: dict) -> list[str]:
    """The table's lines: suites, then notebooks (chapters, labs) with their mean and max."""
    sb, nb = budget.get("suites", {}), budget.get("notebooks", {})
    lines = [f"{'suite':<40} {'seconds':>9} {'budget':>9}", "-" * 60]
    for name, secs in suites.items():
        lines.append(_line(name, secs, sb.get(name)))
    chapters = {k: v for k, v in notebooks.items() if "chapters/" in k}
    labs = {k: v for k, v in notebooks.items() if "chapters/" not in k}
    for title, group, per_max in (("chapter", chapters, nb.get("chapter_max")),
                                  ("lab", labs, nb.get("lab_max"))):
        if not group:
            continue
        lines += ["", f"{title + ' notebook':<40} {'seconds':>9} {'budget':>9}", "-" * 60]
        for name, secs in sorted(group.items()):
            lines.append(_line(name, secs, per_max))
        mean = sum(group.values()) / len(group)
        if title == "chapter" and len(group) > 1:    # one chapter's own line says it already
            lines.append(_line(f"mean of {len(group)} chapters", mean, nb.get("chapter_mean")))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="*", help="NAME=SECONDS, in the order to print")
    ap.add_argument("--notebooks", type=Path, help="JSON of notebook path -> seconds")
    args = ap.parse_args(argv)
    suites = {}
    for item in args.suites:
        name, _, secs = item.partition("=")
        try:
            suites[name] = float(secs)
        except ValueError:
            ap.error(f"expected NAME=SECONDS, got {item!r}")
    notebooks = {}
    if args.notebooks is not None and args.notebooks.exists():
        notebooks = json.loads(args.notebooks.read_text())
    print("\n".join(table(suites, notebooks, load_budget())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

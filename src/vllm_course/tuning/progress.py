"""Progress of a sweep, an SLO search or a compare: events, an ETA, and a rich progress bar.

The run functions call a ``progress(step)`` callback with a :class:`Step`. Without one they use
:func:`print_steps`: the plan (server starts, points, estimated time), each server start, each
point with its number and the ETA, notes and the end, printed to stdout. :class:`ProgressBar`
renders the steps with rich, with a bar and an ETA (the CLI uses it; a notebook may too, outside
graded cells: nbgrader zeroes a cell that writes to stderr, and rich writes to stderr here)::

    with ProgressBar() as bar:
        result = await sweep(spec, progress=bar)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

StepKind = Literal["plan", "server", "point", "requests", "note", "done"]


@dataclass(frozen=True)
class Step:
    """One progress event.

    Attributes:
        kind: ``plan`` (what will run, before anything starts), ``server`` (a server start),
            ``point`` (a point finished or was read from the cache), ``requests`` (requests of
            the running point), ``note`` (a sentence worth showing, e.g. a warning) or ``done``.
        message: a sentence for a person.
        done: points finished so far (requests for ``kind="requests"``).
        total: points in all (requests of the point for ``kind="requests"``); ``None`` when
            not known in advance (an SLO search).
        eta_s: estimated seconds until everything is done, or ``None``.
    """

    kind: StepKind
    message: str = ""
    done: int = 0
    total: int | None = None
    eta_s: float | None = None


StepFn = Callable[[Step], None]


class Eta:
    """Remaining time from per-item estimates, rescaled by how long finished items really took.

    Args:
        estimates_s: the estimated seconds of each item still to run.
    """

    def __init__(self, estimates_s: Sequence[float]):
        self._left = list(estimates_s)
        self._estimated_done = 0.0
        self._actual_done = 0.0

    def finish(self, actual_s: float) -> None:
        """Mark the next item finished after ``actual_s`` seconds."""
        if self._left:
            self._estimated_done += self._left.pop(0)
            self._actual_done += actual_s

    def skip(self) -> None:
        """Drop the next item without running it (it takes no time and says nothing about
        the estimates' scale)."""
        if self._left:
            self._left.pop(0)

    @property
    def scale(self) -> float:
        """Measured time over estimated time so far (1.0 before anything finished)."""
        if self._estimated_done <= 0:
            return 1.0
        return self._actual_done / self._estimated_done

    def remaining_s(self) -> float:
        """Estimated seconds left, in seconds."""
        return sum(self._left) * self.scale


def print_steps(step: Step) -> None:
    """Print a step's sentence to stdout: what a notebook cell shows when no ``progress``
    callback is given. Points are numbered and carry the ETA (``[3/12] ... ETA 40 s``);
    per-request steps are not printed."""
    if step.kind == "requests" or not step.message:
        return
    if step.kind == "point":
        eta = f", ETA {format_duration(step.eta_s)}" if step.eta_s else ""
        of = f"/{step.total}" if step.total is not None else ""
        print(f"[{step.done}{of}] {step.message}{eta}", flush=True)
    else:
        print(step.message, flush=True)


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"3.5 min"`` or ``"1.2 h"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class ProgressBar:
    """Renders :class:`Step` events with rich: sentences above a bar of points (with the ETA
    the run function estimates) and a bar of the running point's requests.

    Args:
        console: a ``rich.console.Console`` (default: one on stderr).
    """

    def __init__(self, console: Any = None):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self._progress: Any = None
        self._points: Any = None
        self._requests: Any = None

    def __enter__(self) -> ProgressBar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[eta]}"), console=self.console, transient=False,
        )
        self._progress.start()
        self._points = self._progress.add_task("points", total=None, eta="")
        self._requests = self._progress.add_task("requests", total=None, eta="", visible=False)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, step: Step) -> None:
        if self._progress is None:
            raise RuntimeError("use ProgressBar as a context manager: with ProgressBar() as bar")
        if step.kind != "requests" and step.message:
            self._progress.console.print(step.message, markup=False, highlight=False)
        eta = "" if step.eta_s is None else f"ETA {format_duration(step.eta_s)}"
        if step.kind == "requests":
            self._progress.update(self._requests, completed=step.done, total=step.total,
                                  visible=True)
        elif step.kind in ("plan", "point", "done"):
            self._progress.update(self._points, completed=step.done, total=step.total, eta=eta)
            if step.kind == "point":
                self._progress.update(self._requests, visible=False, completed=0)

"""Which layer limited a run: client, KV cache, batch limits, prefill interference, compute.

``rules`` holds the thresholds and one small function per bottleneck, checked in order over a
saved run (:func:`diagnose`); ``report`` holds what they find (:class:`Finding`,
:class:`Diagnosis`).

May import: ``records``, ``results``, ``metrics``, ``prom`` and ``loadgen.selfcheck`` (it reads a
saved run; it never starts a server or sends a request).
"""

from __future__ import annotations

from vllm_course import results
from vllm_course.diagnosis.report import Diagnosis, Finding
from vllm_course.diagnosis.rules import RULES, diagnose

__all__ = ["RULES", "Diagnosis", "Finding", "diagnose"]


def _html_row(result: results.RunResult) -> tuple[str, str] | None:
    """A saved run's HTML table names its diagnosis (see :data:`results.HTML_ROWS`)."""
    if result.path is None or result.summary is None:
        return None
    return "diagnosis", diagnose(result).primary.title


results.HTML_ROWS.append(_html_row)

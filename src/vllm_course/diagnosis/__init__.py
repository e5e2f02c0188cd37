"""Which layer limited a run: client, KV cache, batch limits, prefill interference, compute.

``rules`` holds the thresholds and one small function per bottleneck, checked in order over a
saved run (:func:`diagnose`); ``report`` holds what they find (:class:`Finding`,
:class:`Diagnosis`).

May import: ``records``, ``results``, ``metrics``, ``prom`` and ``loadgen.selfcheck`` (it reads a
saved run; it never starts a server or sends a request).
"""

from vllm_course.diagnosis.report import Diagnosis, Finding
from vllm_course.diagnosis.rules import RULES, diagnose

__all__ = ["RULES", "Diagnosis", "Finding", "diagnose"]

"""What a diagnosis says: :class:`Finding` (one bottleneck, its evidence numbers and the knobs to
try) and :class:`Diagnosis` (the findings, most limiting first), shown as text or HTML."""

from __future__ import annotations

import html

from pydantic import BaseModel, ConfigDict, Field


class Finding(BaseModel):
    """One bottleneck rule that fired.

    Attributes:
        key: stable identifier, e.g. ``kv_cache_exhausted``.
        title: what a person reads, e.g. ``KV cache exhausted``.
        layer: ``memory``, ``scheduling``, ``compute``, ``client`` or ``none``.
        rule: the condition that fired, with its thresholds.
        evidence: the numbers that made it fire (and a few that put them in context).
        knobs: what to try, most promising first.
    """

    model_config = ConfigDict(frozen=True)
    key: str
    title: str
    layer: str
    rule: str
    evidence: list[str] = Field(default_factory=list)
    knobs: list[str] = Field(default_factory=list)


class Diagnosis(BaseModel):
    """The findings of one run, most limiting first (``findings[0]`` is the diagnosis)."""

    model_config = ConfigDict(frozen=True)
    run: str
    path: str | None = None
    findings: list[Finding]

    @property
    def primary(self) -> Finding:
        """The most limiting finding."""
        return self.findings[0]

    def report(self) -> str:
        """A short plain-text report: the diagnosis, its evidence and knobs, other findings."""
        first, *rest = self.findings
        lines = [f"Diagnosis of {self.run}" + (f"  ({self.path})" if self.path else ""),
                 f"  limiting layer: {first.layer} -- {first.title}",
                 f"  rule: {first.rule}", "  evidence:"]
        lines += [f"    - {e}" for e in first.evidence]
        if first.knobs:
            lines.append("  try:")
            lines += [f"    - {k}" for k in first.knobs]
        for f in rest:
            lines.append(f"  also: {f.title} ({f.layer}): {'; '.join(f.evidence[:2])}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        first, *rest = self.findings
        items = "".join(f"<li>{html.escape(e)}</li>" for e in first.evidence)
        knobs = "".join(f"<li>{html.escape(k)}</li>" for k in first.knobs)
        also = "".join(f"<li>{html.escape(f.title)} ({html.escape(f.layer)})</li>" for f in rest)
        return (
            f"<b>{html.escape(first.title)}</b> (layer: {html.escape(first.layer)})"
            f"<br><small>{html.escape(first.rule)}</small><ul>{items}</ul>"
            + (f"Try:<ul>{knobs}</ul>" if knobs else "")
            + (f"Also:<ul>{also}</ul>" if also else "")
        )

"""Token-length distributions of request sets: fixed, uniform, normal, lognormal, empirical.

Each distribution is a frozen pydantic model with a ``kind`` discriminator, so a YAML spec names it
in one line, e.g. ``{kind: lognormal, median: 128, sigma: 0.8, min: 4, max: 1024}``; a bare integer
means ``{kind: fixed, value: N}``. ``sample(n, rng)`` is pure: the same generator state gives the
same lengths, always integers >= 1, clipped to ``[min, max]`` where the model has those bounds.

Parametrisations:

* ``fixed``: ``value``.
* ``uniform``: integers in ``[low, high]``, both ends included.
* ``normal``: ``round(mean + std * Z)``, clipped to ``[min, max]``.
* ``lognormal``: ``round(median * exp(sigma * Z))`` with ``Z ~ N(0, 1)``, clipped to
  ``[min, max]``. ``sigma`` is the standard deviation of ``ln(length)``. Give either ``median``
  or ``mean`` (before clipping, ``mean = median * exp(sigma**2 / 2)``): a published mean is fitted
  by giving it directly.
* ``empirical``: a histogram: ``edges`` (increasing, ``len(weights) + 1`` of them) and
  ``weights`` (normalised here). A bin is picked by weight, then a point uniformly inside
  ``[edges[i], edges[i+1])`` and floored, so bins ``[1, 2), [2, 3)`` give exactly 1 and 2, and
  published percentiles used as edges are reproduced. Clipped to ``[min, max]`` if given.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


class _Dist(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integer lengths (int64, all >= 1) drawn with ``rng``."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        raw = np.asarray(self._draw(n, rng), dtype=float)
        lo = getattr(self, "min", 1) or 1
        hi = getattr(self, "max", None)
        return np.clip(raw, lo, hi if hi is not None else np.inf).astype(np.int64)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


class _Bounded(_Dist):
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _bounds(self):
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def _bounds_text(self) -> str:
        return f" in [{self.min}, {self.max if self.max is not None else 'inf'}]"


class Fixed(_Dist):
    """Always ``value`` tokens."""

    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1)

    def _draw(self, n, rng):
        return np.full(n, self.value)

    def describe(self) -> str:
        """One line for a data card."""
        return f"fixed {self.value}"


class Uniform(_Dist):
    """Integers uniform in ``[low, high]`` (both included)."""

    kind: Literal["uniform"] = "uniform"
    low: int = Field(ge=1)
    high: int = Field(ge=1)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def _draw(self, n, rng):
        return rng.integers(self.low, self.high + 1, size=n)

    def describe(self) -> str:
        """One line for a data card."""
        return f"uniform integer in [{self.low}, {self.high}]"


class Normal(_Bounded):
    """``round(mean + std * Z)``, clipped to ``[min, max]``."""

    kind: Literal["normal"] = "normal"
    mean: float
    std: float = Field(ge=0)

    def _draw(self, n, rng):
        return np.rint(rng.normal(self.mean, self.std, size=n))

    def describe(self) -> str:
        """One line for a data card."""
        return f"normal(mean {self.mean:g}, std {self.std:g}) rounded,{self._bounds_text()}"


class LogNormal(_Bounded):
    """``round(median * exp(sigma * Z))``, clipped; give ``median`` or ``mean`` (not both)."""

    kind: Literal["lognormal"] = "lognormal"
    median: float | None = Field(None, gt=0)
    mean: float | None = Field(None, gt=0)
    sigma: float = Field(ge=0)

    @model_validator(mode="after")
    def _one_location(self):
        if (self.median is None) == (self.mean is None):
            raise ValueError("give exactly one of 'median' or 'mean'")
        return self

    @property
    def scale(self) -> float:
        """The median before clipping (``mean * exp(-sigma**2 / 2)`` when ``mean`` is given)."""
        if self.median is not None:
            return self.median
        return self.mean * math.exp(-self.sigma**2 / 2)

    def _draw(self, n, rng):
        return np.rint(self.scale * np.exp(self.sigma * rng.standard_normal(n)))

    def describe(self) -> str:
        """One line for a data card."""
        loc = f"median {self.median:g}" if self.median is not None else f"mean {self.mean:g}"
        return f"lognormal({loc}, sigma {self.sigma:g}) rounded,{self._bounds_text()}"


class Empirical(_Dist):
    """A histogram: bin ``i`` is ``[edges[i], edges[i+1])`` with probability ``weights[i]``."""

    kind: Literal["empirical"] = "empirical"
    edges: tuple[float, ...] = Field(min_length=2)
    weights: tuple[float, ...] = Field(min_length=1)
    min: int | None = Field(None, ge=1)
    max: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _histogram(self):
        if len(self.edges) != len(self.weights) + 1:
            raise ValueError(f"{len(self.weights)} weights need {len(self.weights) + 1} edges, "
                             f"got {len(self.edges)}")
        if self.edges[0] < 1 or any(b <= a for a, b in itertools.pairwise(self.edges)):
            raise ValueError("edges must be increasing and start at >= 1")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        return self

    def _draw(self, n, rng):
        p = np.asarray(self.weights, dtype=float)
        bins = rng.choice(len(p), size=n, p=p / p.sum())
        edges = np.asarray(self.edges, dtype=float)
        lo, hi = edges[bins], edges[bins + 1]
        return np.floor(lo + (hi - lo) * rng.random(n))

    def describe(self) -> str:
        """One line for a data card."""
        clip = "" if self.min is None and self.max is None else (
            f", clipped to [{self.min or 1}, {self.max if self.max is not None else 'inf'}]")
        span = f"[{self.edges[0]:g}, {self.edges[-1]:g})"
        return f"histogram with {len(self.weights)} bins on {span}{clip}"


def _int_is_fixed(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


LengthDist = Annotated[
    Fixed | Uniform | Normal | LogNormal | Empirical,
    Field(discriminator="kind"),
    BeforeValidator(_int_is_fixed),
]
"""Any length distribution (a bare integer in YAML means ``fixed``)."""

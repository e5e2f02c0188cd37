"""Hardware profiles: the model card, default server flags and workload sizes per machine kind.

Profiles live as YAML next to this module (``profiles/<name>.yaml``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from vllm_course.config import Scalar

PROFILE_DIR = Path(__file__).parent / "profiles"


class DemoSettings(BaseModel):
    """What ``vllm-course demo`` runs on this profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    dataset: str
    rate_rps: float = math.inf
    burstiness: float = 1.0
    num_warmups: int = 4
    num_requests: int | None = None
    slo: dict[str, float] | None = None


class Sizing(BaseModel):
    """One row of a generic profile's sizing table: what to run on a GPU with at least
    ``min_memory_gib`` GiB of memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    min_memory_gib: float = Field(ge=0)
    model: str
    server_args: dict[str, Scalar] = Field(default_factory=dict)
    why: str


class Profile(BaseModel):
    """One hardware profile.

    Attributes:
        name: profile name (file stem).
        description: one line for people.
        status: ``measured`` (the course's numbers were measured on this hardware), ``estimate``
            (scaled from a measured profile, not yet measured here) or ``generic`` (any GPU, sized
            from its memory by :attr:`sizing`).
        device: ``cpu`` or ``cuda``.
        model: the model card (or hub id) used by default.
        server_args: flags every server on this profile gets unless the config sets them.
        max_live_servers: how many servers one owner may keep running at once.
        demo: what ``vllm-course demo`` runs.
        sizing: for a generic profile, rows tried from the largest ``min_memory_gib`` down; the
            first the GPU's memory reaches replaces :attr:`model` and adds its server flags.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    description: str
    status: Literal["measured", "estimate", "generic"] = "measured"
    device: str
    model: str
    server_args: dict[str, Scalar] = Field(default_factory=dict)
    max_live_servers: int = 1
    demo: DemoSettings
    sizing: list[Sizing] = Field(default_factory=list)

    def sized(self, memory_gib: float | None) -> Profile:
        """This profile with its :attr:`sizing` row for a GPU of ``memory_gib`` GiB applied (the
        smallest row when the memory is unknown); the profile itself when it has no sizing."""
        if not self.sizing:
            return self
        rows = sorted(self.sizing, key=lambda r: r.min_memory_gib, reverse=True)
        row = next((r for r in rows if memory_gib is not None and memory_gib >= r.min_memory_gib),
                   rows[-1])
        memory = "unknown memory" if memory_gib is None else f"{memory_gib:.1f} GiB"
        return self.model_copy(update={
            "model": row.model,
            "server_args": {**self.server_args, **row.server_args},
            "description": f"{self.description}; sized for {memory}: {row.model} ({row.why})",
            "sizing": [],
        })


def profile_names() -> list[str]:
    """Names of the bundled profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name: str, gpu_memory_gib: float | None = None) -> Profile:
    """Load a bundled profile by name.

    Args:
        name: the profile name (a file stem in ``profiles/``).
        gpu_memory_gib: GPU 0's memory (GiB), which sizes a generic profile (see
            :meth:`Profile.sized`); ignored by the others.

    Raises:
        ValueError: for an unknown name; the message lists the known ones.
    """
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown profile {name!r}; known profiles: {', '.join(profile_names())}")
    profile = Profile.model_validate({"name": name, **yaml.safe_load(path.read_text())})
    return profile.sized(gpu_memory_gib)

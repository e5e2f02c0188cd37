"""Hardware profiles: the model card, default server flags and workload sizes per machine kind.

Profiles live as YAML next to this module (``profiles/<name>.yaml``).
"""

from __future__ import annotations

import math
from pathlib import Path

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


class Profile(BaseModel):
    """One hardware profile.

    Attributes:
        name: profile name (file stem).
        description: one line for people.
        device: ``cpu`` or ``cuda``.
        model: the model card (or hub id) used by default.
        server_args: flags every server on this profile gets unless the config sets them.
        max_live_servers: how many servers one owner may keep running at once.
        demo: what ``vllm-course demo`` runs.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    description: str
    device: str
    model: str
    server_args: dict[str, Scalar] = Field(default_factory=dict)
    max_live_servers: int = 1
    demo: DemoSettings


def profile_names() -> list[str]:
    """Names of the bundled profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name: str) -> Profile:
    """Load a bundled profile by name.

    Raises:
        ValueError: for an unknown name; the message lists the known ones.
    """
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown profile {name!r}; known profiles: {', '.join(profile_names())}")
    return Profile.model_validate({"name": name, **yaml.safe_load(path.read_text())})

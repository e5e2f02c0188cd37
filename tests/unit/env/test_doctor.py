"""Tests of ``vllm-course doctor`` against the installed environment (no server is started)."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.env import doctor
from vllm_course.env import machine as env


def _vllm_version_from_file() -> str:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None, "vLLM is not installed: run make setup"
    return runpy.run_path(str(Path(spec.origin).parent / "_version.py"))["__version__"]


def test_all_checks_pass_in_this_environment() -> None:
    report = doctor.diagnose()
    assert report.ok, [c.message for c in report.failures]
    assert {c.name for c in report.checks} >= {"vllm", "cpu-build-packages", "tokenizer"}
    assert report.vllm_version == _vllm_version_from_file()
    assert report.short().startswith("doctor: ok:")


def test_broken_packages_fail_with_uninstall_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    monkeypatch.setattr(env, "broken_packages", lambda: ["torchvision"])
    report = doctor.diagnose()
    assert not report.ok
    failed = next(c for c in report.checks if c.name == "cpu-build-packages")
    assert not failed.ok
    assert "torchvision" in failed.message
    assert "pip uninstall -y torchvision torchaudio torchcodec" in failed.message
    assert report.short().startswith("doctor: FAIL")


def test_missing_vllm_says_run_make_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_version", lambda: None)
    monkeypatch.setattr(env, "vllm_build", lambda: None)
    report = doctor.diagnose()
    failed = next(c for c in report.checks if c.name == "vllm")
    assert not failed.ok
    assert "make setup" in failed.message
    assert "vLLM not installed" in report.short()


def test_cli_doctor_exit_code_and_version() -> None:
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert _vllm_version_from_file() in result.output
    short = CliRunner().invoke(main, ["doctor", "--short"])
    assert short.exit_code == 0, short.output
    assert len(short.output.strip().splitlines()) == 1


def test_cli_doctor_exits_1_on_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    monkeypatch.setattr(env, "broken_packages", lambda: ["torchaudio"])
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "pip uninstall -y" in result.output

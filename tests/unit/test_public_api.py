"""The curated public API (as httpx tests its exported members) and import hygiene."""

from __future__ import annotations

import subprocess
import sys

import vllm_course


def test_exported_members_exist_and_are_sorted():
    assert vllm_course.__all__ == sorted(vllm_course.__all__, key=str)
    for name in vllm_course.__all__:
        member = getattr(vllm_course, name)
        assert getattr(member, "__module__", "vllm_course").startswith("vllm_course"), name


def test_importing_the_course_does_not_import_vllm():
    code = "import sys, vllm_course, vllm_course.cli; print('vllm' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

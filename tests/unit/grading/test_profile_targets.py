"""Targets measured on one profile (``Scenario.profile_targets``): lab02 brings the H200's,
set by the course's rule from the committed H200 calibration runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_course.grading import session
from vllm_course.grading.spec import SCENARIOS, Scenario, Target
from vllm_course.grading.targets import judge, lenient, local_calibration

REPO = Path(__file__).resolve().parents[3]
H200_LAB02 = REPO / "reference" / "h200" / "labs" / "lab02-calibration.json"


def test_lab02_on_the_h200_grades_with_the_h200s_throughput_target_and_nowhere_else():
    h200 = {t.id: t for t in SCENARIOS["lab02"].on("h200").targets}
    cpu = {t.id: t for t in SCENARIOS["lab02"].on("cpu-tiny").targets}
    assert (h200["throughput"].value, h200["throughput"].zero_at) == (0.18, 0.14)
    assert (cpu["throughput"].value, cpu["throughput"].zero_at) == (0.45, 0.36)
    assert h200["no_preemption"] == cpu["no_preemption"]           # not replaced
    assert h200["throughput"].only_if == ("no_preemption",)
    assert list(h200) == list(cpu)                                   # same targets, same order
    assert [t.id for t in session.scenario("lab02", "h200").targets] == list(cpu)
    assert session.scenario("lab02", "h200").target("throughput").value == 0.18


def test_the_h200_targets_are_what_the_rule_makes_of_the_committed_h200_runs():
    data = json.loads(H200_LAB02.read_text())
    assert (data["lab"], data["profile"], data["valid"]) == ("lab02", "h200", True)
    runs = {t["id"]: t for t in data["targets"]}
    sc = SCENARIOS["lab02"].on("h200")
    judged = {t.id: judge(t, runs[t.id]["answer"], runs[t.id]["baseline"]) for t in sc.targets}
    for t in sc.targets:
        assert t.value == lenient(judged[t.id].proposed, t.op)       # 0 and 0.187 -> 0.18
        assert all(t.met(v) for v in runs[t.id]["answer"])           # the solution: 3 of 3
    # valid: the defaults miss the preemption target by more than its margin in every run
    assert judged["no_preemption"].baseline_misses
    assert min(runs["no_preemption"]["baseline"]) > 0


def test_a_calibration_file_of_this_machine_does_not_apply_where_the_lab_brings_measured_ones():
    assert local_calibration("lab02", "h200", SCENARIOS["lab02"]) is None


def _target(id_: str, value: float) -> Target:
    return Target(id=id_, metric="output_tok_s_vs_baseline", op=">=", value=value, points=1)


def test_profile_targets_must_name_the_labs_targets_and_say_how_they_were_measured():
    base = SCENARIOS["lab03"]
    with pytest.raises(ValueError, match="names speed, not among the lab's targets"):
        Scenario(**{**base.model_dump(), "profile_targets": {"h200": (_target("speed", 1),)},
                    "calibrated": {"h200": "3 runs"}})
    with pytest.raises(ValueError, match=r"needs calibrated\['h200'\]"):
        Scenario(**{**base.model_dump(), "calibrated": {},
                    "profile_targets": {"h200": (_target("throughput", 1.5),)}})


def test_the_set_up_cell_on_the_h200_prints_the_h200s_targets_and_how_they_were_set(
        monkeypatch, capsys):
    from vllm_course import grading

    monkeypatch.setenv("PROFILE", "h200")
    grading.setup("lab02")
    out = capsys.readouterr().out
    assert "targets set by 3 solution runs on one NVIDIA H200, vLLM 0.26.0, 2026-12-02" in out
    assert "0.18 x the vLLM defaults'" in out and "0.45" not in out

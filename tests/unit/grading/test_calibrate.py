"""Calibration of a performance lab's targets (worst run moved by 3 standard deviations, the lab
valid only if the baseline misses by more than that), a scenario's per-profile rate and SLO, and
the SLO metrics a results file carries."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from vllm_course import grading
from vllm_course.config import SLO, LoadSpec, SyntheticWorkload
from vllm_course.grading import session
from vllm_course.grading.calibrate import judge, report
from vllm_course.grading.spec import ProfileLoad, Scenario, Target
from vllm_course.metrics import Dist

UP = Target(id="throughput", metric="output_tok_s_vs_baseline", op=">=", value=3.5, points=6)
DOWN = Target(id="tpot", metric="p99_tpot_ms_vs_slo", op="<=", value=1.0, points=2)


def test_a_target_is_the_worst_run_moved_by_three_standard_deviations():
    # lab03's calibration on cpu-tiny (2026-12-02): sample sd 0.24576 of the three ratios
    got = judge(UP, [4.66, 4.28, 4.74], [1.0, 1.0, 1.0])
    assert got.margin == pytest.approx(3 * 0.24576, rel=1e-4)
    assert got.proposed == pytest.approx(4.28 - got.margin)            # 3.543
    assert got.current_ok                                                # 3.5 is more lenient
    assert got.baseline_misses                                           # 1 < 3.542 - 0.737
    strict = judge(UP.model_copy(update={"value": 3.6}), [4.66, 4.28, 4.74], [1.0])
    assert not strict.current_ok


def test_a_lab_is_valid_only_if_the_baseline_misses_by_more_than_the_margin():
    answer = [0.5, 0.6, 0.7]                                 # sd 0.1: proposed 1.0, margin 0.3
    assert judge(DOWN, answer, [1.2, 1.9]).proposed == pytest.approx(1.0)
    assert not judge(DOWN, answer, [1.2, 1.9]).baseline_misses   # best 1.2 within 1.0 + 0.3
    assert judge(DOWN, answer, [1.31, 1.9]).baseline_misses
    assert not judge(DOWN, answer, []).baseline_misses           # no baseline: cannot tell
    with pytest.raises(ValueError, match="at least 2"):
        judge(DOWN, [0.5], [2.0])


def test_the_report_says_what_to_change():
    result = {"lab": "lab03", "profile": "cpu-tiny", "flags": {}, "runs": [{}, {}, {}],
              "targets": [vars(judge(UP, [4.66, 4.28, 4.74], [1.0, 1.0, 1.0]))],
              "valid": True, "current_ok": True}
    text = report(result)
    assert ("proposed >= 3.543 (margin 0.737); the lab's own >= 3.5: ok; calibrated >= 3.5; "
            "the baseline misses it") in text
    assert "valid: yes" in text
    assert "grading lab03 on this machine" not in text       # no "applies": a report only


LAB = Scenario(
    workload=SyntheticWorkload(num_requests=8, input_len=64, output_len=8),
    load=LoadSpec(rate_rps=1.0, seed=4),
    per_profile={"cpu-tiny": ProfileLoad(rate_rps=3.0, slo=SLO(ttft_ms=400, tpot_ms=40),
                                         how="measured")},
)


def test_a_scenario_takes_its_rate_and_slo_from_the_profile(monkeypatch):
    on = LAB.on("cpu-tiny")
    assert on.load.rate_rps == 3.0 and on.load.seed == 4
    assert on.slo == SLO(ttft_ms=400, tpot_ms=40)
    with pytest.raises(KeyError, match="none for h200; it has cpu-tiny"):
        LAB.on("h200")
    plain = LAB.model_copy(update={"per_profile": {}})
    assert plain.on("h200") is plain                         # one load everywhere
    monkeypatch.setitem(session.SCENARIOS, "labxx", LAB)
    with pytest.raises(grading.LabError, match="^labxx: this lab sets its arrival rate"):
        grading.scenario("labxx", "l4")


CHAT = SLO(ttft_ms=400, tpot_ms=40)


def _summary(ttft_p99, tpot_p99, good, n=20, slo=CHAT):
    return SimpleNamespace(slo=slo, good_requests=good, num_requests=n,
                           ttft_ms=Dist(n=n, p99=ttft_p99), tpot_ms=Dist(n=n, p99=tpot_p99))


def test_slo_metrics_are_ratios_to_the_limits_and_the_share_of_good_requests():
    got = session._slo_metrics(_summary(300.0, 50.0, 19))
    assert got == {"slo_attainment": 0.95, "p99_ttft_ms_vs_slo": 0.75, "p99_tpot_ms_vs_slo": 1.25}
    assert session._slo_metrics(_summary(300.0, 50.0, None, slo=None)) == {}
    only_ttft = session._slo_metrics(_summary(800.0, None, 0, slo=SLO(ttft_ms=400)))
    assert only_ttft == {"slo_attainment": 0.0, "p99_ttft_ms_vs_slo": 2.0}
    none_done = session._slo_metrics(_summary(None, None, 0))
    assert none_done["p99_ttft_ms_vs_slo"] is None and not math.isnan(none_done["slo_attainment"])


def test_the_command_reads_the_solution_writes_the_runs_and_fails_an_invalid_lab(
        tmp_path, monkeypatch):
    from pathlib import Path

    from click.testing import CliRunner

    from vllm_course.cli import main
    from vllm_course.grading import calibrate as module

    seen = {}

    async def fake(lab, flags, runs=3, echo=print, load=None, job=None, **_):
        seen.update(lab=lab, flags=flags, runs=runs, load=load)
        judged = vars(judge(UP, [4.66, 4.28, 4.74], [1.0, 1.0, 1.0]))
        return {"lab": lab, "profile": "cpu-tiny", "flags": flags, "runs": [{}] * runs,
                "targets": [judged], "valid": flags == {}, "current_ok": True,
                "applies": False}

    monkeypatch.setattr(module, "calibrate", fake)
    monkeypatch.chdir(Path(__file__).resolve().parents[3])       # the repository's root
    out = tmp_path / "lab02.json"
    got = CliRunner().invoke(main, ["calibrate", "lab02", "--out", str(out)])
    assert seen == {"lab": "lab02", "flags": {"max-num-seqs": 8}, "runs": 3,   # its solution
                    "load": None}
    assert got.exit_code == 1 and "valid: NO" in got.output               # fake: only {} valid
    assert json.loads(out.read_text())["flags"] == {"max-num-seqs": 8}
    got = CliRunner().invoke(main, ["calibrate", "lab03", "--flags", "{}", "--runs", "4",
                                    "--out", str(out)])
    assert got.exit_code == 0, got.output
    assert seen["runs"] == 4 and f"wrote {out}" in got.output
    two = CliRunner().invoke(main, ["calibrate", "lab03", "--flags", "{}", "--runs", "2"])
    assert two.exit_code == 2 and "--runs" in two.output                  # the design's 3
    bad = CliRunner().invoke(main, ["calibrate", "lab03", "--flags", "{max-num-seqs: 8}"])
    assert bad.exit_code == 2 and "--flags is not JSON" in bad.output
    monkeypatch.chdir(tmp_path)
    lost = CliRunner().invoke(main, ["calibrate", "lab03"])
    assert lost.exit_code == 2 and "no --flags and no labs/source/lab03/lab03.ipynb" in lost.output

"""Targets an instructor calibrated on this machine: read back from ``vllm-course calibrate``'s
file on a profile the lab brings no measured targets for, never stricter than the lab's own,
applied only while the starting configuration still misses, and graded against."""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict

import pytest
from click.testing import CliRunner

from vllm_course import grading
from vllm_course.grading import results, targets
from vllm_course.grading.targets import judge, lenient

LAB03 = grading.scenario("lab03")
THROUGHPUT = LAB03.target("throughput")                  # >= 2.0, partial credit from 1.6


def test_a_proposal_is_rounded_to_two_digits_towards_leniency():
    assert lenient(3.5431, ">=") == 3.5 and lenient(3.5431, "<=") == 3.6
    assert lenient(0.3712, "<=") == 0.38 and lenient(0.3712, ">=") == 0.37
    assert lenient(1234.0, ">=") == 1200.0 and lenient(2.0, "<=") == 2.0
    assert lenient(0.0, ">=") == 0.0 and lenient(-0.123, ">=") == -0.13


def test_a_calibration_relaxes_a_target_the_solution_cannot_reach_and_never_tightens_one():
    # a slower machine: the solution reaches 1.9-2.1 x, sd 0.1, so worst - 3 sd = 1.6
    slow = judge(THROUGHPUT, [1.9, 2.0, 2.1], [1.0, 1.0, 1.0])
    assert slow.proposed == pytest.approx(1.6) and slow.applied == pytest.approx(1.6)
    assert not slow.current_ok and slow.baseline_misses            # 1.0 < 1.6 - 0.3
    # a faster one: 12 x proposes 11.7; the lab's 2.0 is more lenient and stays
    fast = judge(THROUGHPUT, [12.0, 12.1, 12.2], [1.0, 1.0, 1.0])
    assert fast.applied == THROUGHPUT.value == 2.0 and fast.current_ok
    # a latency target goes the other way: 1.2-1.4 x the SLO proposes 1.7, the lab says 1.0
    p99 = grading.scenario("lab04").target("p99_ttft")
    assert judge(p99, [1.2, 1.3, 1.4], [18.0]).applied == pytest.approx(1.7)
    assert judge(p99, [0.2, 0.25, 0.3], [18.0]).applied == 1.0


def _write(root, lab, profile, answers: dict, baseline: dict, load=None, flags=None):
    sc = grading.scenario(lab)
    judged = [asdict(judge(t, answers[t.id], baseline[t.id])) for t in sc.targets]
    path = root / profile / f"{lab}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "lab": lab, "profile": profile, "flags": flags or {"max-num-seqs": 64}, "load": load,
        "runs": [{"created_at": "2026-12-03T13:00:00+0000"}] * 3, "targets": judged,
        "valid": True, "current_ok": False, "applies": True}))
    return path


def test_a_valid_calibration_sets_the_targets_on_its_profile_only(calibration_root, capsys,
                                                                   monkeypatch):
    _write(calibration_root, "lab03", "l4", {"throughput": [1.9, 2.0, 2.1]},
           {"throughput": [1.0, 1.0, 1.0]})
    _write(calibration_root, "lab03", "cpu-tiny", {"throughput": [1.9, 2.0, 2.1]},
           {"throughput": [1.0, 1.0, 1.0]})
    on_l4 = grading.scenario("lab03", "l4").target("throughput")
    assert on_l4.value == pytest.approx(1.6)
    assert on_l4.zero_at == pytest.approx(1.6 * 1.6 / 2.0)         # the same proportion
    assert "calibrated on this machine: >= 1.6" in on_l4.about
    # cpu-tiny's targets were measured with the lab: a file of this machine never changes them
    assert grading.scenario("lab03", "cpu-tiny").target("throughput") == THROUGHPUT
    assert grading.scenario("lab03", "a100-80g").target("throughput") == THROUGHPUT   # no file
    monkeypatch.setenv("PROFILE", "l4")
    grading.setup("lab03")
    out = capsys.readouterr().out
    assert "targets set by vllm-course calibrate on this machine (3 runs of" in out
    assert "sets the targets (relaxed: throughput >= 1.6)" in out


def test_a_calibration_the_starting_configuration_passes_sets_nothing(calibration_root, capsys,
                                                                      monkeypatch):
    # a starting configuration that already holds lab04's SLO on this machine: nothing to tune
    _write(calibration_root, "lab04", "l4",
           {"p99_ttft": [0.2, 0.3, 0.4], "p99_tpot": [0.5, 0.6, 0.7],
            "goodput": [1.0, 1.0, 1.0]},
           {"p99_ttft": [0.9], "p99_tpot": [0.8], "goodput": [0.95]})
    assert grading.scenario("lab04", "l4") == grading.scenario("lab04").on("l4")
    monkeypatch.setenv("PROFILE", "l4")
    grading.setup("lab04")
    out = capsys.readouterr().out
    assert "not valid (the starting configuration misses no target" in out
    assert "targets are estimates on this profile" in out


def test_a_lab_at_a_poisson_rate_takes_the_calibrated_rate_and_slo(calibration_root):
    load = {"rate_rps": 4.0, "slo": {"ttft_ms": 300.0, "tpot_ms": 30.0}}
    _write(calibration_root, "lab04", "gpu",
           {"p99_ttft": [0.2, 0.3, 0.4], "p99_tpot": [0.5, 0.6, 0.7],
            "goodput": [1.0, 1.0, 1.0]},
           {"p99_ttft": [9.0, 12.0], "p99_tpot": [0.4, 0.5], "goodput": [0.1, 0.2]}, load=load)
    on = grading.scenario("lab04", "gpu")
    assert on.load.rate_rps == 4.0 and on.slo.ttft_ms == 300.0 and on.slo.tpot_ms == 30.0
    assert [t.value for t in on.targets] == [t.value for t in grading.scenario("lab04").targets]
    assert on.per_profile["gpu"].vs_start is None


def test_a_calibration_at_a_relative_rate_keeps_it_relative(calibration_root):
    load = {"rate_rps": 4.0, "slo": {"ttft_ms": 300.0, "tpot_ms": 30.0}, "vs_start": 1.4}
    _write(calibration_root, "lab04", "gpu",
           {"p99_ttft": [0.2, 0.3, 0.4], "p99_tpot": [0.5, 0.6, 0.7],
            "goodput": [1.0, 1.0, 1.0]},
           {"p99_ttft": [9.0, 12.0], "p99_tpot": [0.4, 0.5], "goodput": [0.1, 0.2]}, load=load)
    assert grading.scenario("lab04", "gpu").per_profile["gpu"].vs_start == 1.4


def test_a_broken_calibration_file_is_named_with_what_to_do(calibration_root):
    path = calibration_root / "l4" / "lab03.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"lab": "lab03", "profile": "l4", "targets": [')
    with pytest.raises(grading.LabError, match=f"{path} is not a calibration file of lab03 .*"
                                               "calibrate lab03` again or delete it"):
        grading.scenario("lab03", "l4")
    _write(calibration_root, "lab02", "l4", {"no_preemption": [0, 0, 0],
                                             "throughput": [1.0, 1.1, 1.2]},
           {"no_preemption": [3, 4, 5], "throughput": [1.0, 1.0, 1.0]})
    path.write_text((calibration_root / "l4" / "lab02.json").read_text())
    with pytest.raises(grading.LabError, match="is a calibration of lab02 on l4, not of lab03"):
        grading.scenario("lab03", "l4")


TOTALS = {"requests": 64, "completed": 64, "output_tokens": 4096, "failed_max_tokens": 0,
          "prompt_tokens": 8192}


def test_grading_uses_the_targets_of_the_profile_the_run_was_on(calibration_root, tmp_path,
                                                                capsys):
    _write(calibration_root, "lab03", "l4", {"throughput": [1.9, 2.0, 2.1]},
           {"throughput": [1.0, 1.0, 1.0]})
    counters = {"generation_tokens": 4096.0}
    for profile, points in (("l4", 6.0), ("a100-80g", 6 * (1.8 - 1.6) / (2.0 - 1.6))):
        result = {"lab": "lab03", "nonce": secrets.token_hex(16), "profile": profile,
                  "metrics": {"output_tok_s_vs_baseline": 1.8}, "server_counters": counters,
                  "client_totals": TOTALS,
                  "baseline": {"metrics": {"output_tok_s": 10.0}, "server_counters": counters,
                               "client_totals": TOTALS}}
        results.issue("lab03", result, tmp_path / profile)
        assert grading.score_target("lab03", "throughput", tmp_path / profile) == pytest.approx(
            max(0.0, round(points, 2)))
    assert "target >= 1.6 -> 6 / 6 points" in capsys.readouterr().out


def test_the_command_takes_a_rate_only_for_a_lab_at_a_poisson_rate(monkeypatch, tmp_path):
    from pathlib import Path

    from vllm_course.cli import main
    from vllm_course.grading import calibrate as module

    seen = {}

    async def fake(lab, flags, runs=3, echo=print, load=None, job=None, **_):
        seen.update(lab=lab, load=load)
        return {"lab": lab, "profile": "cpu-tiny", "flags": flags, "load": None,
                "runs": [{}] * runs, "targets": [], "valid": True, "current_ok": True,
                "applies": False}

    monkeypatch.setattr(module, "calibrate", fake)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    monkeypatch.chdir(Path(__file__).resolve().parents[3])       # the repository's root
    out = str(tmp_path / "x.json")
    bad = CliRunner().invoke(main, ["calibrate", "lab03", "--rate", "4", "--out", out])
    assert bad.exit_code == 2 and "lab03 sends its requests at no per-profile rate" in bad.output
    assert seen == {}                                            # nothing ran
    got = CliRunner().invoke(main, ["calibrate", "lab04", "--rate", "4", "--out", out])
    assert got.exit_code == 0, got.output
    assert seen["load"].rate_rps == 4.0
    assert seen["load"].slo == grading.scenario("lab04", "cpu-tiny").slo      # the profile's
    assert seen["load"].vs_start is None                  # a fixed rate replaces a relative one
    cpu = grading.scenario("lab04").per_profile["cpu-tiny"]
    got = CliRunner().invoke(main, ["calibrate", "lab04", "--slo-tpot-ms", "60", "--out", out])
    assert seen["load"].slo.tpot_ms == 60.0 and seen["load"].vs_start == cpu.vs_start
    got = CliRunner().invoke(main, ["calibrate", "lab04", "--vs-start", "1.2", "--out", out])
    assert got.exit_code == 0, got.output
    assert seen["load"].vs_start == 1.2 and seen["load"].slo == cpu.slo
    seen.clear()
    both = CliRunner().invoke(main, ["calibrate", "lab04", "--rate", "4", "--vs-start", "1.2"])
    assert both.exit_code == 2 and "not both" in both.output and seen == {}
    nolab = CliRunner().invoke(main, ["calibrate", "lab99"])
    assert nolab.exit_code == 2 and "unknown lab 'lab99'" in nolab.output
    assert targets.calibration_path("lab04", "gpu").parts[-2:] == ("gpu", "lab04.json")
    # an --out that cannot be written fails before the runs, not after them
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    nowhere = CliRunner().invoke(main, ["calibrate", "lab04", "--out", str(blocked / "x.json")])
    assert nowhere.exit_code == 2 and f"--out {blocked}: cannot write there" in nowhere.output
    assert seen == {}


def test_a_flag_vllm_rejects_is_one_line_from_calibrate(monkeypatch, tmp_path):
    from vllm_course.cli import main
    from vllm_course.grading import calibrate as module
    from vllm_course.server.failures import UnknownFlagError

    async def fake(lab, flags, runs=3, echo=print, load=None, job=None, **_):
        raise UnknownFlagError("vLLM 0.32.0 has no flag --max-num-seq; did you mean "
                               "--max-num-seqs? (nothing was launched)", cause="bad_flag")

    monkeypatch.setattr(module, "calibrate", fake)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    got = CliRunner().invoke(main, ["calibrate", "lab03", "--flags", '{"max-num-seq": 8}',
                                    "--out", str(tmp_path / "x.json")])
    assert got.exit_code == 2, got.output
    assert "no flag --max-num-seq; did you mean --max-num-seqs?" in got.output
    assert "Traceback" not in got.output and not (tmp_path / "x.json").exists()


def test_a_multiple_given_to_calibrate_shows_no_rate_it_has_not_measured(monkeypatch, tmp_path,
                                                                          capsys):
    from vllm_course.cli.labs import _calibration_load
    from vllm_course.grading.session import calibrating
    from vllm_course.grading.spec import ProfileLoad

    monkeypatch.setenv("PROFILE", "l4")              # lab04 there: a fixed 1.5 requests/s
    load = _calibration_load("lab04", None, 1.3, 500.0, 40.0)
    assert (load.rate_rps, load.vs_start, load.slo.ttft_ms) == (None, 1.3, 500.0)
    with calibrating("lab04", load):
        grading.setup("lab04")
        on = grading.scenario("lab04", "l4")
    out = capsys.readouterr().out
    assert "at 1.3 x the requests/s the starting configuration serves" in out
    assert "requests/s on the machine where the targets were set" not in out   # none measured
    assert on.load.rate_rps == grading.scenario("lab04").load.rate_rps   # replaced by the run
    # only the SLO given: the profile's fixed rate stays
    slo_only = _calibration_load("lab04", None, None, None, 60.0)
    assert (slo_only.rate_rps, slo_only.vs_start, slo_only.slo.tpot_ms) == (1.5, None, 60.0)
    # on cpu-tiny, relative already, the measured "about" rate is kept with its multiple
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    kept = _calibration_load("lab04", None, None, None, 60.0)
    cpu = grading.scenario("lab04").per_profile["cpu-tiny"]
    assert (kept.rate_rps, kept.vs_start) == (cpu.rate_rps, cpu.vs_start)
    with pytest.raises(ValueError, match="needs rate_rps .* or vs_start"):
        ProfileLoad(slo=cpu.slo, how="x")

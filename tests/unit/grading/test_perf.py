"""The performance labs' grading without a server (lab02 on): targets, partial credit, the
condition a throughput target depends on, and the KV cache a scenario fixes per profile."""

from __future__ import annotations

import secrets

import pytest

from vllm_course import env, grading
from vllm_course.grading import results, session
from vllm_course.grading.spec import Target
from vllm_course.models import CARDS

TOTALS = {"requests": 24, "completed": 24, "output_tokens": 3072, "failed_max_tokens": 0,
          "prompt_tokens": 6144}


def issued(tmp_path, metrics: dict, generated: float = 3072.0) -> None:
    """A lab02 results file as the run cell writes it (nonce kept in this process)."""
    counters = {"generation_tokens": generated}
    result = {"lab": "lab02", "nonce": secrets.token_hex(16), "profile": "cpu-tiny",
              "metrics": metrics, "server_counters": counters, "client_totals": TOTALS,
              "baseline": {"metrics": {"output_tok_s": 100.0, "preemptions": 14.0},
                           "server_counters": counters, "client_totals": TOTALS}}
    results.issue("lab02", result, tmp_path)


def test_a_target_earns_all_some_or_none_of_its_points():
    t = Target(id="t", metric="output_tok_s_vs_baseline", op=">=", value=0.9, zero_at=0.72,
               points=3)
    assert t.credit(0.95) == 1.0 and t.credit(0.9) == 1.0
    assert t.credit(0.81) == pytest.approx(0.5)          # halfway from 0.72 to 0.9
    assert t.credit(0.5) == 0.0
    low = Target(id="p99", metric="p99_ttft_ms", op="<=", value=200, zero_at=250, points=2)
    assert low.credit(190) == 1.0 and low.credit(225) == pytest.approx(0.5)
    assert low.credit(300) == 0.0
    strict = Target(id="none", metric="preemptions", op="<=", value=0, points=3)
    assert strict.credit(0) == 1.0 and strict.credit(1) == 0.0


def test_lab02_scores_the_measured_run_against_its_targets(tmp_path, capsys):
    issued(tmp_path, {"preemptions": 0.0, "output_tok_s": 95.0, "output_tok_s_vs_baseline": 0.95})
    assert grading.score_target("lab02", "no_preemption", tmp_path) == 3.0
    assert grading.score_target("lab02", "throughput", tmp_path) == 3.0
    out = capsys.readouterr().out
    assert "output_tok_s_vs_baseline 0.95, target >= 0.45 -> 3 / 3 points" in out
    # partial credit: halfway from 0.36 to 0.45
    issued(tmp_path, {"preemptions": 0.0, "output_tok_s": 40.5, "output_tok_s_vs_baseline": 0.405})
    assert grading.score_target("lab02", "throughput", tmp_path) == 1.5


def test_throughput_counts_only_in_a_run_without_preemption(tmp_path, capsys):
    issued(tmp_path, {"preemptions": 12.0, "output_tok_s": 101.0, "output_tok_s_vs_baseline": 1.01})
    assert grading.score_target("lab02", "no_preemption", tmp_path) == 0.0
    assert grading.score_target("lab02", "throughput", tmp_path) == 0.0
    assert "scores only in a run that meets no_preemption" in capsys.readouterr().out


def test_a_missing_measurement_or_an_untrusted_file_scores_nothing(tmp_path):
    issued(tmp_path, {"preemptions": None, "output_tok_s_vs_baseline": None})
    assert grading.score_target("lab02", "no_preemption", tmp_path) == 0.0
    # the defaults' run must be trustworthy too: its server counted tokens nobody received
    issued(tmp_path, {"preemptions": 0.0, "output_tok_s_vs_baseline": 1.0})
    path = results.results_path("lab02", tmp_path)
    path.write_text(path.read_text().replace('"output_tok_s": 100.0', '"output_tok_s": 10.0'))
    with pytest.raises(grading.LabError, match="changed after the run cell"):
        grading.score_target("lab02", "throughput", tmp_path)
    with pytest.raises(KeyError, match="no_preemption, throughput"):
        grading.scenario("lab02").target("p99")


def test_the_kv_cache_is_fixed_in_tokens_on_every_profile():
    for name in ("cpu-tiny", "h200"):
        profile = env.load_profile(name)
        args = grading.scenario_args("lab02", profile)
        assert args["kv-cache-memory-bytes"] == 26 * 128 * CARDS[profile.model].kv_bytes_per_token
        assert args["max-model-len"] == 1024
    for flag, why in (("kv-cache-memory-bytes", "KV cache"), ("max-model-len", "scenario"),
                      ("num-gpu-blocks-override", "KV cache")):
        with pytest.raises(grading.LabError, match=why):
            session.check_flags("lab02", {flag: 1})
    assert session.check_flags("lab02", {"max_num_seqs": 8}) == {"max-num-seqs": 8}


def test_flags_that_undo_the_scenario_the_profile_or_the_kv_cache_size_are_refused():
    cpu = env.load_profile("cpu-tiny")
    for lab, flags, why in (
            # vLLM's --no-X turns X off: the scenario's --enforce-eager stays on
            ("lab03", {"no-enforce-eager": True}, "it turns off --enforce-eager.*part of lab03"),
            ("lab03", {"no_enforce_eager": True}, "part of lab03's scenario"),
            # a YAML file of flags could set anything the check refuses
            ("lab03", {"config": "tuning.yaml"}, "would change the model"),
            # the profile's flags are the baseline's too
            ("lab03", {"dtype": "bfloat16"}, "set by profile cpu-tiny for every server"),
            # lab02's KV cache is fixed in tokens of the model's dtype on one GPU
            ("lab02", {"kv-cache-dtype": "fp8"}, "how many tokens lab02's KV cache holds"),
            ("lab02", {"tensor-parallel-size": 2}, "how many tokens lab02's KV cache holds"),
            ("lab02", {"MAX_NUM_SEQS": 8}, "in lower case")):
        with pytest.raises(grading.LabError, match=why):
            session.check_flags(lab, flags, cpu)
    # what the labs are about stays open, --no-X of a flag nobody fixed too
    assert session.check_flags("lab03", {"max-num-seqs": 64, "no-enable-prefix-caching": True},
                               cpu) == {"max-num-seqs": 64, "no-enable-prefix-caching": True}
    assert session.check_flags("lab03", {"kv-cache-dtype": "fp8"}, cpu) == {
        "kv-cache-dtype": "fp8"}                 # lab03's KV cache is not fixed in tokens


def test_a_run_that_dropped_requests_meets_no_target(tmp_path, capsys):
    # --max-num-queued-reqs 8 answers HTTP 503 beyond 8 requests: the 16 rejected ones would
    # leave the throughput and the percentiles, so the run scores nothing however fast it was
    issued(tmp_path, {"preemptions": 0.0, "output_tok_s": 95.0, "output_tok_s_vs_baseline": 0.95,
                      "requests": 24, "completed": 8})
    assert grading.score_target("lab02", "throughput", tmp_path) == 0.0
    assert grading.score_target("lab02", "no_preemption", tmp_path) == 0.0
    assert "your server completed 8 of 24 requests" in capsys.readouterr().out
    issued(tmp_path, {"preemptions": 0.0, "output_tok_s": 95.0, "output_tok_s_vs_baseline": 0.95,
                      "requests": 24, "completed": 24})
    assert grading.score_target("lab02", "throughput", tmp_path) == 3.0


def test_the_set_up_cell_prints_the_targets_and_whether_they_are_estimates(capsys, monkeypatch):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab02")
    out = capsys.readouterr().out
    assert "--kv-cache-memory-bytes 13631488" in out
    assert "target no_preemption (3 points)" in out and "target throughput (3 points)" in out
    calibrated = grading.scenario("lab02").calibrated
    assert ("targets set by" in out) == ("cpu-tiny" in calibrated)


def test_lab03s_baseline_is_the_starting_configuration(capsys, monkeypatch):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab03")
    out = capsys.readouterr().out
    assert ("baseline, run first on the same requests: --max-num-seqs 2 "
            "--max-num-batched-tokens 512") in out
    assert grading.scenario("lab02").baseline_args == {}        # vLLM's defaults
    assert grading.scenario("lab01").baseline_args is None      # no baseline run
    # the learner's flags are the whole configuration: any of them, the scenario's fixed aside
    assert session.check_flags("lab03", {"max-num-seqs": 64}) == {"max-num-seqs": 64}
    with pytest.raises(grading.LabError, match="part of lab03's scenario"):
        session.check_flags("lab03", {"enforce-eager": False})


def test_lab04_grades_p99s_and_goodput_against_each_profiles_slo(tmp_path, capsys, monkeypatch):
    # every bundled profile has a rate and SLO for lab04; on each, the starting configuration is
    # the cap of 4 and the targets are ratios to that profile's SLO limits
    lab04 = grading.scenario("lab04")
    for name in env.profile_names():
        on = grading.scenario("lab04", name)
        assert on.slo == lab04.per_profile[name].slo
        entry = lab04.per_profile[name]
        assert on.load.rate_rps == (entry.rate_rps or lab04.load.rate_rps)
        assert entry.rate_rps is not None or entry.vs_start is not None
    assert lab04.baseline_args == {"max-num-seqs": 4}
    assert grading.scenario("lab04", "l4").load.rate_rps == 1.5    # an estimated fixed rate
    # estimates beside the H200: its measured rule, its SLO scaled by memory bandwidth
    assert lab04.per_profile["h100-80g"].vs_start == 1.3
    assert grading.scenario("lab04", "h100-80g").slo.tpot_ms == 60.0
    # measured on the course's H200 (2026-12-05): relative to the machine, a stricter P99 TPOT
    # target there by the calibration rule, the other two the lab's own
    h200 = grading.scenario("lab04", "h200")
    assert (h200.load.rate_rps, lab04.per_profile["h200"].vs_start) == (2.7, 1.3)
    assert (h200.slo.ttft_ms, h200.slo.tpot_ms) == (500.0, 40.0)
    assert [(t.id, t.value, t.zero_at) for t in h200.targets] == [
        ("p99_ttft", 1.0, 2.0), ("p99_tpot", 1.4, 1.75), ("goodput", 0.9, 0.7)]
    assert "h200" in lab04.calibrated
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab04")
    out = capsys.readouterr().out
    assert "x the requests/s the starting configuration serves on this machine" in out
    assert "ttft_ms <= 1000, tpot_ms <= 90" in out
    assert "baseline, run first on the same requests: --max-num-seqs 4" in out

    metrics = {"p99_ttft_ms_vs_slo": 0.4, "p99_tpot_ms_vs_slo": 1.125, "slo_attainment": 0.8}
    counters = {"generation_tokens": 3072.0}
    result = {"lab": "lab04", "nonce": secrets.token_hex(16), "profile": "cpu-tiny",
              "metrics": metrics, "server_counters": counters, "client_totals": TOTALS,
              "baseline": {"metrics": {"p99_ttft_ms_vs_slo": 18.0}, "server_counters": counters,
                           "client_totals": TOTALS}}
    results.issue("lab04", result, tmp_path)
    points = {t.id: t.points for t in lab04.targets}
    assert grading.score_target("lab04", "p99_ttft", tmp_path) == points["p99_ttft"]
    # a P99 above its target earns the share of the way from zero_at down to the target
    tpot, good = lab04.target("p99_tpot"), lab04.target("goodput")
    assert 0 < tpot.credit(1.125) < 1 and 0 < good.credit(0.8) < 1
    assert grading.score_target("lab04", "p99_tpot", tmp_path) == pytest.approx(
        round(tpot.credit(1.125) * tpot.points, 2))
    assert grading.score_target("lab04", "goodput", tmp_path) == pytest.approx(
        round(good.credit(0.8) * good.points, 2))
    # the starting configuration's run (P99 TTFT 18 x the limit) would score no TTFT point
    assert lab04.target("p99_ttft").credit(18.0) == 0.0

"""lab04's rate relative to the machine: the run cell measures the starting configuration's
capacity on the baseline server first, then sends both runs at ``vs_start`` times it (the
run itself is exercised against real servers in tests/labs; here, its arithmetic and order)."""

from __future__ import annotations

import asyncio

import pytest

from vllm_course import env, grading
from vllm_course.config import SLO
from vllm_course.grading import session
from vllm_course.grading.spec import PROBE_REQUESTS, ProfileLoad


def test_the_rate_is_vs_start_times_the_starting_configurations_measured_capacity(
        fake_runs, tmp_path, capsys):
    calls = fake_runs(served_tok_s=480.0)
    profile = env.load_profile("cpu-tiny")
    sc = grading.scenario("lab04", "cpu-tiny")
    entry = sc.per_profile["cpu-tiny"]
    out = asyncio.run(session._run_once("lab04", profile, {"max-num-seqs": 24}, tmp_path))

    probe, base, yours = calls
    # the probe: the baseline's flags, the scenario's request shape with the next seed, at once
    assert probe.name == "lab04-start-capacity" and probe.server == base.server
    assert probe.server.args["max-num-seqs"] == 4
    assert probe.workload.num_requests == PROBE_REQUESTS
    assert probe.workload.seed == sc.workload.seed + 1
    assert probe.workload.output_len == sc.workload.output_len == 96
    assert probe.load.rate_rps == float("inf")
    # 480 tok/s over a mean of 96 output tokens: 5 requests/s; both runs at vs_start x that
    rate = entry.vs_start * 480.0 / 96
    assert base.load.rate_rps == yours.load.rate_rps == pytest.approx(rate)
    assert base.workload == yours.workload == sc.workload
    assert yours.server.args["max-num-seqs"] == 24
    assert out["load"]["rate_rps"] == pytest.approx(rate)
    assert out["load"]["vs_start"] == entry.vs_start
    assert out["load"]["start_capacity"]["rps"] == pytest.approx(5.0)
    assert f"{rate:.2f} requests/s" in capsys.readouterr().out


def test_a_fixed_rate_measures_nothing_first(fake_runs, tmp_path):
    calls = fake_runs(served_tok_s=480.0)
    fixed = ProfileLoad(rate_rps=4.0, slo=SLO(ttft_ms=1000.0, tpot_ms=90.0), how="test")
    with session.calibrating("lab04", fixed):
        out = asyncio.run(session._run_once("lab04", env.load_profile("cpu-tiny"), {},
                                            tmp_path))
    assert [c.name for c in calls] == ["lab04-baseline", "lab04-yours"]
    assert all(c.load.rate_rps == 4.0 for c in calls)
    assert out["load"] == {"rate_rps": 4.0, "vs_start": None, "start_capacity": None}


def test_a_probe_that_does_not_complete_stops_the_run_before_anything_is_measured(
        fake_runs, tmp_path):
    calls = fake_runs(served_tok_s=480.0, completed=PROBE_REQUESTS - 1)
    with pytest.raises(grading.LabError, match=f"{PROBE_REQUESTS - 1} of {PROBE_REQUESTS} "
                                               "requests completed"):
        asyncio.run(session._run_once("lab04", env.load_profile("cpu-tiny"), {}, tmp_path))
    assert [c.name for c in calls] == ["lab04-start-capacity"]


def test_a_relative_rate_needs_a_configuration_to_measure():
    lab04 = grading.scenario("lab04")
    with pytest.raises(ValueError, match="needs baseline_args"):
        lab04.model_validate({**lab04.model_dump(), "baseline_args": None})


def test_the_set_up_cell_says_the_rate_is_measured_and_what_it_came_to(monkeypatch, capsys):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab04")
    out = capsys.readouterr().out
    entry = grading.scenario("lab04").per_profile["cpu-tiny"]
    assert (f"Poisson, at {entry.vs_start:g} x the requests/s the starting configuration "
            "serves on this machine, which the run cell measures first") in out
    assert f"({entry.rate_rps:g} requests/s on the machine where the targets were set)" in out

"""A lab's job sized for a profile (``Scenario.profile_jobs``): its number of requests and its
starting configuration there, and ``vllm-course calibrate --requests/--baseline-flags``, which
tries one out before it is written into the lab (the runs themselves are exercised against real
servers in tests/labs; here, what each run is given)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_course import env, grading
from vllm_course.grading import session, targets
from vllm_course.grading.spec import SCENARIOS, ProfileJob
from vllm_course.grading.targets import judge

LAB03 = SCENARIOS["lab03"]
GPU_JOB = ProfileJob(num_requests=512, baseline_args={"max-num-seqs": 16},
                     how="an example, not measured")


def test_a_profile_job_replaces_the_number_of_requests_and_the_start_on_that_profile_only():
    sc = LAB03.model_copy(update={"profile_jobs": {"l4": GPU_JOB}})
    on = sc.on("l4")
    assert on.workload.num_requests == 512 and on.baseline_args == {"max-num-seqs": 16}
    assert on.workload.model_copy(update={"num_requests": 64}) == LAB03.workload  # same lengths
    assert on.targets == LAB03.targets and on.fixed_args == LAB03.fixed_args
    cpu = sc.on("cpu-tiny")                                      # other profiles: the lab's
    assert (cpu.workload, cpu.baseline_args) == (LAB03.workload, LAB03.baseline_args)
    only_more = sc.model_copy(update={"profile_jobs": {"l4": ProfileJob(
        num_requests=256, how="x")}}).on("l4")
    assert only_more.workload.num_requests == 256 and only_more.baseline_args == LAB03.baseline_args
    # the job measured on the course's H200 (2026-12-05), with the target measured with it
    h200 = grading.scenario("lab03", "h200")
    assert h200.workload.num_requests == 512
    assert h200.baseline_args == {"max-num-seqs": 16, "max-num-batched-tokens": 512}
    assert (h200.target("throughput").value, h200.target("throughput").zero_at) == (4.8, 3.8)


def test_a_profile_cannot_give_a_starting_configuration_to_a_lab_that_runs_none():
    with pytest.raises(ValueError, match=r"profile_jobs\['h200'\] sets baseline_args"):
        type(LAB03)(**{**SCENARIOS["lab01"].model_dump(), "profile_jobs": {"h200": GPU_JOB}})


def test_a_calibration_run_with_a_job_sends_its_requests_to_its_starting_configuration(
        fake_runs, monkeypatch, tmp_path, capsys):
    calls = fake_runs(served_tok_s=480.0)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    with session.calibrating("lab03", job=GPU_JOB):
        session.setup("lab03")
        asyncio.run(session._run_once("lab03", env.load_profile("cpu-tiny"),
                                      {"max-num-seqs": 64}, tmp_path))
    base, yours = calls
    assert base.workload.num_requests == yours.workload.num_requests == 512
    assert base.server.args["max-num-seqs"] == 16 and "max-num-batched-tokens" not in \
        base.server.args                        # the job's start replaces the lab's, not added
    assert yours.server.args["max-num-seqs"] == 64 and yours.server.args["enforce-eager"]
    out = capsys.readouterr().out
    assert "on this profile the job is 512 requests, not 64" in out
    assert "baseline, run first on the same requests: --max-num-seqs 16" in out
    # outside the block the lab's own job again
    assert grading.scenario("lab03", "cpu-tiny").workload.num_requests == 64


def test_a_misspelled_flag_is_refused_before_the_baselines_server_starts(
        fake_runs, monkeypatch, tmp_path):
    from vllm_course.server import flags
    from vllm_course.server.failures import UnknownFlagError

    calls = fake_runs(served_tok_s=480.0)
    known = ["--max-num-seqs", "--enforce-eager", "--max-num-batched-tokens", "--dtype",
             "--kv-cache-memory-bytes", "--max-model-len"]
    monkeypatch.setattr("vllm_course.server.check_config", lambda config, profile_args:
                        flags.check_flags([f"--{k}" for k in {**profile_args, **config.args}],
                                          flags=known))
    made = []
    monkeypatch.setattr("vllm_course.server.ServerPool",
                        lambda **kw: made.append(kw) or pytest.fail("a pool was made"))
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    session.setup("lab03")
    with pytest.raises(UnknownFlagError, match="no flag --max-num-seq; did you mean "
                                               "--max-num-seqs"):
        asyncio.run(session._run_once("lab03", env.load_profile("cpu-tiny"),
                                      {"max-num-seq": 64}, tmp_path))
    assert made == [] and calls == []


def test_a_calibration_file_with_a_job_grades_that_job_on_this_machine(calibration_root):
    path = calibration_root / "l4" / "lab03.json"
    path.parent.mkdir(parents=True)
    t = LAB03.target("throughput")
    path.write_text(json.dumps({
        "lab": "lab03", "profile": "l4", "flags": {}, "load": None,
        "job": {"num_requests": 512, "baseline_args": {"max-num-seqs": 16}, "how": "--requests"},
        "runs": [{"created_at": "2026-12-04T13:00:00+0000"}] * 3,
        "targets": [{**judge(t, [9.9, 10.0, 10.1], [1.0, 1.0, 1.0]).__dict__}]}))
    local = targets.local_calibration("lab03", "l4", LAB03)
    assert local.valid, local.note
    on = grading.scenario("lab03", "l4")
    assert on.workload.num_requests == 512 and on.baseline_args == {"max-num-seqs": 16}
    assert grading.scenario("lab03", "a100-80g").workload.num_requests == 64   # no file there


def test_the_command_takes_a_job_and_refuses_a_start_for_a_lab_without_one(monkeypatch, tmp_path):
    from vllm_course.cli import main
    from vllm_course.grading import calibrate as module

    seen = {}

    async def fake(lab, flags, runs=3, echo=print, load=None, job=None, **_):
        seen.update(lab=lab, job=job)
        return {"lab": lab, "profile": "cpu-tiny", "flags": flags, "load": None,
                "job": None if job is None else job.model_dump(), "runs": [{}] * runs,
                "targets": [], "valid": True, "current_ok": True, "applies": False}

    monkeypatch.setattr(module, "calibrate", fake)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    monkeypatch.chdir(Path(__file__).resolve().parents[3])       # the repository's root
    out = str(tmp_path / "x.json")
    got = CliRunner().invoke(main, ["calibrate", "lab03", "--requests", "512", "--baseline-flags",
                                    '{"max-num-seqs": 16}', "--out", out])
    assert got.exit_code == 0, got.output
    assert seen["job"].num_requests == 512 and seen["job"].baseline_args == {"max-num-seqs": 16}
    assert "job: 512 requests, starting configuration {\"max-num-seqs\": 16}" in got.output
    assert json.loads(Path(out).read_text())["job"]["num_requests"] == 512
    seen.clear()
    bad = CliRunner().invoke(main, ["calibrate", "lab03", "--baseline-flags", "max-num-seqs=16"])
    assert bad.exit_code == 2 and "--baseline-flags is not JSON" in bad.output and seen == {}
    none = CliRunner().invoke(main, ["calibrate", "lab01", "--flags", "{}", "--baseline-flags", "{}"])
    assert none.exit_code == 2 and "lab01 runs no starting configuration" in none.output
    zero = CliRunner().invoke(main, ["calibrate", "lab03", "--requests", "0"])
    assert zero.exit_code == 2 and seen == {}

"""The committed GPU calibration runs (reference/h200/labs/, and reference/h100-80g/labs/ for
lab02 and lab04) against the targets the labs bring on those profiles: the course's rule
(labs/README.md) that the solution passes every target in each of its runs while the starting
configuration misses one by more than the margin, checked on the data that set those targets;
and the set-up cell showing the H200 runs on every machine."""

from __future__ import annotations

import json

import pytest

from vllm_course import grading
from vllm_course.grading.spec import SCENARIOS
from vllm_course.grading.targets import H200_RUNS, h200_runs, judge
from vllm_course.models import REPO_ROOT

MEASURED_ON_H200 = [lab for lab, sc in SCENARIOS.items() if "h200" in sc.calibrated]


def test_every_lab_measured_on_the_h200_brings_the_runs_that_set_its_targets():
    assert set(MEASURED_ON_H200) == set(H200_RUNS) == {"lab02", "lab03", "lab04"}
    assert h200_runs("lab01") is None                   # graded on definitions: no targets


MEASURED_ON_OTHER_GPUS = {("h100-80g", "lab02"): "reference/h100-80g/labs/lab02-calibration.json",
                         ("h100-80g", "lab04"): "reference/h100-80g/labs/lab04-vs-start.json"}
"""Labs whose targets a GPU profile other than ``h200`` brings measured: the committed runs."""


def test_every_lab_measured_on_another_gpu_brings_its_runs():
    measured = {(profile, lab) for lab, sc in SCENARIOS.items() for profile in sc.calibrated
                if profile not in ("cpu-tiny", "h200")}
    assert measured == set(MEASURED_ON_OTHER_GPUS)


def _runs(profile: str, lab: str) -> dict:
    if profile == "h200":
        return h200_runs(lab)
    return json.loads((REPO_ROOT / MEASURED_ON_OTHER_GPUS[profile, lab]).read_text())


@pytest.mark.parametrize(("profile", "lab"), [("h200", lab) for lab in MEASURED_ON_H200]
                         + sorted(MEASURED_ON_OTHER_GPUS))
def test_the_solution_passed_every_gpu_target_in_every_run_and_the_start_missed_one(profile, lab):
    data = _runs(profile, lab)
    sc = grading.scenario(lab, profile)
    assert data["lab"] == lab and data["profile"] == profile and len(data["runs"]) >= 3
    assert {r["vllm_version"] for r in data["runs"]} == {"0.26.0"}
    measured = {t["id"]: t for t in data["targets"]}
    assert set(measured) == {t.id for t in sc.targets}
    judged = []
    for target in sc.targets:
        runs = measured[target.id]
        assert runs["metric"] == target.metric
        assert all(target.met(v) for v in runs["answer"]), (target.id, runs["answer"])
        judged.append(judge(target, runs["answer"], runs["baseline"]))
        assert judged[-1].current_ok, (target.id, judged[-1].proposed)   # as lenient as the rule
    assert any(j.baseline_misses for j in judged), [(j.id, j.margin) for j in judged]
    # the runs were made with the job and load the profile now grades with
    if data.get("job"):
        assert sc.workload.num_requests == data["job"]["num_requests"]
        assert sc.baseline_args == data["job"]["baseline_args"]
    if data.get("load"):
        entry = SCENARIOS[lab].per_profile[profile]
        assert entry.vs_start == data["load"]["vs_start"]
        assert sc.slo.model_dump() == data["load"]["slo"]


def test_the_set_up_cell_shows_the_h200_runs_on_any_machine_without_the_answer(capsys,
                                                                              monkeypatch):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab02")
    out = capsys.readouterr().out
    assert "on the course's H200 (vLLM 0.26.0, 2026-12-02; reference/h200/labs/" in out
    assert "no_preemption (preemptions): the solution 0, 0, 0; vLLM's defaults 6, 6, 6" in out
    assert "max-num-seqs" not in out                     # the solution's flags stay hidden
    grading.setup("lab04")
    out = capsys.readouterr().out
    assert "at 1.3 x the starting configuration's capacity (2.26, 2.72, 2.98 requests/s), " \
           "SLO ttft_ms <= 500, tpot_ms <= 40" in out
    assert "p99_ttft (p99_ttft_ms_vs_slo): the solution 0.178, 0.132, 0.214" in out
    assert '"max-num-seqs": 24' not in out
    grading.setup("lab01")                              # no targets: its solution notebook's run
    assert ("on the course's H200 (vLLM 0.26.0, 2026-12-07; reference/h200/labs/lab01/): the "
            "solution notebook ran: every cell ran and every hidden test passed; this lab "
            "grades definitions, so it sets no target") in capsys.readouterr().out


@pytest.mark.parametrize("lab", ["lab02", "lab03", "lab04"])
def test_no_set_up_cell_prints_the_solutions_flags_on_any_profile(lab, capsys, monkeypatch):
    from vllm_course import env
    from vllm_course.cli.labs import _solution_flags

    monkeypatch.chdir(REPO_ROOT)
    answer = _solution_flags(lab)
    for profile in env.profile_names():
        monkeypatch.setenv("PROFILE", profile)
        grading.setup(lab)
        out = capsys.readouterr().out
        for k, v in answer.items():
            for written in (f"'{k}': {v}", f'"{k}": {v}', f"--{k} {v}\n", f"--{k} {v} "):
                assert written not in out, (profile, written)


def test_a_checkout_without_the_h200_runs_still_sets_up_the_lab(capsys, monkeypatch, tmp_path):
    import vllm_course.models

    monkeypatch.setattr(vllm_course.models, "REPO_ROOT", tmp_path)     # no reference/ there
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    grading.setup("lab03")
    out = capsys.readouterr().out
    assert ("on the course's H200: reference/h200/labs/lab03-job512.json of the course's "
            "repository could not be read here (FileNotFoundError)") in out
    grading.setup("lab01")
    assert "on the course's H200: pending (the solution notebook" in capsys.readouterr().out
    run = tmp_path / "reference/h200/labs/lab01/run.json"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps({"measured": "2026-12-08", "vllm_version": "0.26.0",
                               "failed": "CellTimeoutError: the call's time ran out\n..."}))
    grading.setup("lab01")
    assert ("on the course's H200 (vLLM 0.26.0, 2026-12-08; reference/h200/labs/lab01/): the "
            "solution notebook ran: stopped: CellTimeoutError: the call's time ran out\n"
            ) in capsys.readouterr().out

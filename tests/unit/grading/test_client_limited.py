"""A lab's run cell says when the client, not the server, limited a run: its results file keeps
the self-checks' reasons per run, and the cell prints a line for each such run."""

from __future__ import annotations

import asyncio

import fake_runs as runs

from vllm_course import env, experiment
from vllm_course.config import LoadSpec, RunConfig, ServerConfig, SyntheticWorkload
from vllm_course.grading import session


def _result(monkeypatch, tmp_path, limited: bool):
    runs.install(monkeypatch, runs.constant(), client_limited=lambda c: limited)
    config = RunConfig(name="lab02-yours", server=ServerConfig(),
                       workload=SyntheticWorkload(num_requests=4, input_len=16, output_len=4),
                       load=LoadSpec(max_concurrency=2))
    result = asyncio.run(experiment.run_experiment(config, tmp_path, pool=runs.FakePool()))
    return session._measured(result, env.load_profile("cpu-tiny"))


def test_a_run_whose_client_kept_up_has_no_reasons_and_no_note(monkeypatch, tmp_path):
    part = _result(monkeypatch, tmp_path, limited=False)
    assert part["client_limited"] == [] and part["metrics"]["completed"] == 4
    assert session.client_notes(part) == []


def test_a_run_whose_client_limited_it_is_named_with_its_reasons(monkeypatch, tmp_path):
    part = _result(monkeypatch, tmp_path, limited=True)
    assert part["client_limited"] == ["92% of inter-token gaps were 0"]
    note = ("the client, not the server, limited {} (92% of inter-token gaps were 0): its "
            "latencies include the client's delay; close other busy programs and run this cell "
            "again")
    assert session.client_notes(part) == [note.format("your run")]
    both = {**part, "baseline": part}
    assert session.client_notes(both) == [note.format("your run"),
                                          note.format("the baseline's run")]

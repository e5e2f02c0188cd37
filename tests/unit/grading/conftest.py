"""Every grading test reads calibration files from a folder of its own, never from the course
home of the machine running the tests (an instructor's calibration would change the targets);
``fake_runs`` stands in for the servers of a lab's run cell."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_course import env
from vllm_course.grading import session, targets
from vllm_course.grading.spec import PROBE_REQUESTS


@pytest.fixture(autouse=True)
def calibration_root(tmp_path, monkeypatch):
    root = tmp_path / "calibration"
    monkeypatch.setattr(targets, "calibration_root", lambda: root)
    return root


class _Pool:
    """Stands in for the run's own ServerPool: nothing starts."""

    def __init__(self, **_: object) -> None:
        self.prestarted: list = []

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def prestart(self, configs: list) -> None:
        self.prestarted = configs


@pytest.fixture
def fake_runs(monkeypatch):
    """``fake_runs(served_tok_s, completed=PROBE_REQUESTS)`` makes a lab's run cell start no
    server: each run returns a summary with those numbers (``duration_s`` 4.0); returns the list
    that receives each run's ``RunConfig`` in order."""
    def install(served_tok_s: float, completed: int = PROBE_REQUESTS) -> list:
        calls = []

        async def run_experiment(config, results_root, pool):
            calls.append(config)
            summary = SimpleNamespace(completed=completed, duration_s=4.0,
                                      output_throughput_tok_s=served_tok_s)
            return SimpleNamespace(summary=summary, path=f"/runs/{config.name}", config=config)

        from vllm_course import experiment, server
        monkeypatch.setattr(server, "check_config", lambda config, profile_args: None)
        monkeypatch.setattr(experiment, "run_experiment", run_experiment)
        monkeypatch.setattr(server, "ServerPool", _Pool)
        monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
        monkeypatch.setattr(session, "_measured",
                            lambda result, profile: {"metrics": {"output_tok_s": 500.0}})
        return calls
    return install

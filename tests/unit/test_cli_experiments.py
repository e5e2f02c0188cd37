"""``vllm-course sweep|compare|slo --config FILE`` with a fake runner (no server)."""

from __future__ import annotations

from pathlib import Path

import fake_runs
import pytest
from click.testing import CliRunner

from vllm_course import experiment, server, workload
from vllm_course.cli import main
from vllm_course.server.startup import StartupFacts
from vllm_course.tuning import comparison as compare_mod
from vllm_course.tuning import grid
from vllm_course.tuning import points as point

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(monkeypatch):
    pools = []

    def make_pool(max_live: int = 1):
        pools.append(fake_runs.FakePool(max_live=max_live))
        return pools[-1]

    for module in (point, grid, compare_mod):
        monkeypatch.setattr(module, "own_pool", make_pool)
    calls = fake_runs.install(monkeypatch, lambda c: [(0.02 * (1 + c.server.args.get(
        "max-num-seqs", 64) ** -1), 0.005)] * c.workload.num_requests)
    return calls, pools


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


SWEEP = """
name: s
servers: {a: {}, b: {args: {max-num-seqs: 2}}}
max_concurrency: [1, 4]
workload: {num_requests: 6, input_len: 16, output_len: 4}
"""


def test_sweep_command_runs_then_reads_the_cache(fake, tmp_path):
    calls, pools = fake
    spec = _write(tmp_path, SWEEP)
    args = ["sweep", "--config", spec, "--results", str(tmp_path / "r")]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "2 server start(s), 4 point(s): 4 to run, 0 from the cache" in out.output
    assert "output_throughput_tok_s" in out.output and "sweep.json" in out.output
    assert len(calls) == 4 and pools[0].closed
    plan = CliRunner().invoke(main, args + ["--plan"])
    assert plan.output.startswith("0 server start(s), 4 point(s): 0 to run, 4 from the cache")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and len(calls) == 4
    nocache = CliRunner().invoke(main, args + ["--no-cache"])
    assert nocache.exit_code == 0 and len(calls) == 8


def test_sweep_plan_of_the_example_starts_nothing(tmp_path):
    out = CliRunner().invoke(main, ["sweep", "--config", str(REPO / "examples" / "sweep.yaml"),
                                    "--plan", "--results", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("3 server start(s), 12 point(s): 12 to run, 0 from the cache")


def test_a_bad_spec_names_the_field(tmp_path):
    spec = _write(tmp_path, SWEEP + "rate_rps: [1]\n")
    out = CliRunner().invoke(main, ["sweep", "--config", spec])
    assert out.exit_code == 2 and "exactly one non-empty list of load levels" in out.output
    typo = _write(tmp_path, "servers: {a: {}}\nmax_concurency: [1]\n")
    out = CliRunner().invoke(main, ["sweep", "--config", typo])
    assert out.exit_code == 2 and "max_concurency" in out.output


COMPARE = """
name: c
servers: {a: {}, b: {args: {max-num-seqs: 2}}}
metrics: [output_throughput_tok_s]
workload: {num_requests: 6, input_len: 16, output_len: 4}
load: {max_concurrency: 2}
"""

SLO_SPEC = """
name: s
start: 2
slo: {ttft_ms: 500}
workload: {num_requests: 300, input_len: 16, output_len: 4}
"""


def test_compare_command_prints_the_method_and_verdicts(fake, tmp_path):
    calls, pools = fake
    out = CliRunner().invoke(main, ["compare", "--config", _write(tmp_path, COMPARE),
                                    "--results", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert len(calls) == 6 and pools[0].closed
    assert "compare c: Welch's t-test on log values" in out.output
    assert "significant:" in out.output and "compare.json and compare.png" in out.output
    assert next((tmp_path / "r").glob("c-*/compare.png")).stat().st_size > 0


def test_slo_command_prints_the_answer(fake, tmp_path, monkeypatch):
    from vllm_course.tuning import slo

    monkeypatch.setattr(slo, "own_pool", lambda max_live=1: fake_runs.FakePool())
    fake_runs.install(monkeypatch, lambda c: [(0.05 if c.load.rate_rps <= 5 else 2.0, 0.005)]
                      * c.workload.num_requests)
    out = CliRunner().invoke(main, ["slo", "--config", _write(tmp_path, SLO_SPEC),
                                    "--results", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert "highest load meeting P99 TTFT <= 500 ms: 5 req/s (5.5 req/s failed)" in out.output
    assert next((tmp_path / "r").glob("s-*/slo.png")).stat().st_size > 0


def test_slo_spec_with_too_few_requests_says_why(tmp_path):
    spec = _write(tmp_path, SLO_SPEC.replace("num_requests: 300", "num_requests: 50"))
    out = CliRunner().invoke(main, ["slo", "--config", spec])
    assert out.exit_code == 2 and "needs at least 300" in out.output


class _ServedPool(fake_runs.FakePool):
    """A FakePool whose servers look started (facts, log) and which the CLI may use as a
    context manager, as it does a ServerPool."""

    def acquire(self, config, log_path=None):
        s = super().acquire(config, log_path)
        s.facts, s.log_path = StartupFacts(ready_s=fake_runs.READY_S), "server.log"
        return s

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_run_reads_the_workload_once(tmp_path, monkeypatch):
    # `vllm-course run` checks the workload before starting a server (a bad file fails at once)
    # and hands the requests it read to the run, which does not read the file again
    fake_runs.install(monkeypatch, fake_runs.constant())
    handed = []
    fake = experiment.run_experiment

    async def run(config, results_root, *, requests=None, **kw):
        handed.append(requests)
        return await fake(config, results_root, **kw)

    reads = []
    real_load = workload.load_requests

    def load(*args, **kw):
        reads.append(args[0])
        return real_load(*args, **kw)

    monkeypatch.setattr(experiment, "run_experiment", run)
    monkeypatch.setattr(workload, "load_requests", load)
    monkeypatch.setattr(server, "ServerPool", _ServedPool)
    config = _write(tmp_path, "name: once\nserver: {model: tiny-mistral}\n"
                              "workload: {num_requests: 5, input_len: 16, output_len: 4}\n"
                              "load: {rate_rps: 10}\n")
    out = CliRunner().invoke(main, ["run", "--config", config, "--results", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert len(reads) == 1
    assert [len(r) for r in handed] == [5]

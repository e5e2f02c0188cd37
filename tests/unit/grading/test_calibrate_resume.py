"""A calibration that stops early keeps its finished runs (``LAB.partial.json``), and
``vllm-course calibrate --resume`` runs only the rest: a lab's calibration can take longer than
one device call (lab04 on an H100: 632 s)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.grading import calibrate as module
from vllm_course.grading.calibrate import judge

ROOT = Path(__file__).resolve().parents[3]


def _data(ratio: float) -> dict:
    """A lab03 results file's content as the run cell returns it (the parts calibrate keeps)."""
    return {"metrics": {"output_tok_s_vs_baseline": ratio, "output_tok_s": 100 * ratio,
                        "duration_s": 10.0},
            "baseline": {"metrics": {"output_tok_s": 100.0, "duration_s": 30.0}},
            "load": None, "hardware": {"gpu": None}, "vllm_version": "0.26.0",
            "created_at": f"run {ratio}"}


def test_calibrate_runs_only_what_is_not_kept_and_judges_every_run(monkeypatch):
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    ratios = iter([4.5, 4.7])
    calls: list[int] = []

    async def fake_run(lab, flags, results_dir):
        calls.append(1)
        return _data(next(ratios))

    monkeypatch.setattr(module, "run", fake_run)
    kept = [module._run_record(_data(4.2))]
    saved: list[list[dict]] = []
    result = asyncio.run(module.calibrate("lab03", {}, runs=3, echo=lambda _: None,
                                          resume=kept, on_run=saved.append))
    assert len(calls) == 2                                         # 3 wanted, 1 kept
    assert [len(s) for s in saved] == [2, 3]                       # saved after each run
    assert saved[-1] == result["runs"]
    assert [r["metrics"]["output_tok_s_vs_baseline"] for r in result["runs"]] == [4.2, 4.5, 4.7]
    assert result["runs"][0]["created_at"] == "run 4.2"            # the kept run, unchanged
    throughput = next(t for t in result["targets"] if t["id"] == "throughput")
    expect = judge(module.SCENARIOS["lab03"].target("throughput"), [4.2, 4.5, 4.7], [1.0] * 3)
    assert throughput["proposed"] == pytest.approx(expect.proposed)
    with pytest.raises(ValueError, match="3 runs are kept, more than the 2"):
        asyncio.run(module.calibrate("lab03", {}, runs=2, resume=[kept[0]] * 3))


def _fake_calibrate(seen: dict, stop_after: int | None = None):
    """A calibrate that records its arguments, 'runs' what is not kept (ratio 4 + run index)
    through on_run, and is stopped (KeyboardInterrupt, as Ctrl-C or SIGTERM) after
    ``stop_after`` new runs."""
    async def fake(lab, flags, runs=3, echo=print, load=None, job=None, resume=(), on_run=None):
        seen.update(lab=lab, flags=flags, runs=runs, resume=list(resume))
        records = list(resume)
        for i in range(len(records), runs):
            if stop_after is not None and i - len(resume) == stop_after:
                raise KeyboardInterrupt
            records.append(module._run_record(_data(4.0 + i)))
            on_run(list(records))
        judged = vars(judge(module.SCENARIOS["lab03"].target("throughput"),
                            [r["metrics"]["output_tok_s_vs_baseline"] for r in records],
                            [1.0] * len(records)))
        return {"lab": lab, "profile": "cpu-tiny", "flags": flags, "runs": records,
                "targets": [judged], "valid": True, "current_ok": True, "applies": True}
    return fake


def _calibrate(*args: str):
    return CliRunner().invoke(main, ["calibrate", "lab03", *args])


@pytest.fixture
def files(monkeypatch, tmp_path) -> tuple[Path, Path]:
    """(--out, its partial file) in ``tmp_path``, run from the repository's root on cpu-tiny."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    return tmp_path / "lab03.json", tmp_path / "lab03.partial.json"


def test_a_stopped_calibration_keeps_its_runs_and_resume_runs_the_rest(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=2))
    got = _calibrate("--flags", "{}", "--runs", "4", "--out", str(out))
    assert got.exit_code == 1 and not out.exists()
    assert f"stopped; 2 of 4 runs are kept in {partial}" in got.output
    kept = json.loads(partial.read_text())
    assert kept["runs_wanted"] == 4 and kept["flags"] == {} and kept["profile"] == "cpu-tiny"
    assert [r["metrics"]["output_tok_s_vs_baseline"] for r in kept["runs"]] == [4.0, 5.0]
    assert not list(out.parent.glob("*.tmp"))                        # written whole, then renamed

    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))
    got = _calibrate("--flags", "{}", "--resume", "--out", str(out))
    assert got.exit_code == 0, got.output
    assert "2 of 4 runs kept from" in got.output
    assert seen["runs"] == 4 and seen["resume"] == kept["runs"]    # --runs carried over
    assert [r["metrics"]["output_tok_s_vs_baseline"]
            for r in json.loads(out.read_text())["runs"]] == [4.0, 5.0, 6.0, 7.0]
    assert not partial.exists()                                    # done: nothing to resume


def test_resume_refuses_runs_of_another_kind_before_anything_runs(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=1))
    _calibrate("--flags", "{}", "--out", str(out))
    before = partial.read_text()
    seen.clear()
    other = _calibrate("--flags", '{"max-num-seqs": 8}', "--resume", "--out", str(out))
    assert other.exit_code == 2 and not seen
    assert ('was run with flags={}; this one with flags={"max-num-seqs": 8}'
            in " ".join(other.output.split()))
    assert "runs are kept" not in other.output          # refused: not this run's to report
    job = _calibrate("--flags", "{}", "--requests", "32", "--resume", "--out", str(out))
    assert job.exit_code == 2 and "was run with job=null" in job.output
    assert partial.read_text() == before                           # nothing lost
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))
    same = _calibrate("--flags", "{}", "--resume", "--out", str(out))
    assert same.exit_code == 0 and len(seen["resume"]) == 1 and seen["runs"] == 3


def test_a_damaged_or_missing_partial_file_is_one_line(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))
    none = _calibrate("--flags", "{}", "--resume", "--out", str(out))
    assert none.exit_code == 2 and "nothing was kept to resume" in none.output and not seen
    for text in ("{not json", "[]", '{"runs": [1, 2]}', '{"runs": []}'):
        partial.write_text(text)
        bad = _calibrate("--flags", "{}", "--resume", "--out", str(out))
        assert bad.exit_code == 2, text
        assert "is not a partial calibration" in bad.output and "Traceback" not in bad.output
        assert not seen


def test_more_kept_runs_than_asked_for_is_refused(monkeypatch, files):
    out, _ = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=4))
    _calibrate("--flags", "{}", "--runs", "5", "--out", str(out))
    seen.clear()
    got = _calibrate("--flags", "{}", "--runs", "3", "--resume", "--out", str(out))
    assert got.exit_code == 2 and "keeps 4 runs, more than --runs 3" in got.output and not seen


def test_without_resume_an_old_partial_file_is_named_then_replaced(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=2))
    _calibrate("--flags", "{}", "--out", str(out))
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=1))
    got = _calibrate("--flags", "{}", "--out", str(out))
    assert f"{partial} holds runs of a calibration that stopped" in " ".join(got.output.split())
    assert seen["resume"] == []                                    # a fresh start
    assert len(json.loads(partial.read_text())["runs"]) == 1       # replaced by this one's
    assert "1 of 3 runs are kept" in got.output


def test_resume_compares_as_json_and_checks_the_model_and_vllm(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=1))
    _calibrate("--flags", '{"enforce-eager": true, "max-num-seqs": 8}', "--out", str(out))
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))
    seen.clear()
    one = _calibrate("--flags", '{"enforce-eager": 1, "max-num-seqs": 8}', "--resume",
                     "--out", str(out))                    # --enforce-eager 1: another flag
    assert one.exit_code == 2 and not seen and "this one with flags=" in one.output
    reordered = _calibrate("--flags", '{"max-num-seqs": 8, "enforce-eager": true}',
                           "--resume", "--out", str(out))
    assert reordered.exit_code == 0 and len(seen["resume"]) == 1
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=1))
    _calibrate("--flags", "{}", "--out", str(out))
    kept = json.loads(partial.read_text())
    assert kept["model"] and "vllm_version" in kept
    for key, other in (("model", "another-model"), ("vllm_version", "0.1.0")):
        partial.write_text(json.dumps({**kept, key: other}))
        seen.clear()
        got = _calibrate("--flags", "{}", "--resume", "--out", str(out))
        assert got.exit_code == 2 and not seen and f'was run with {key}="{other}"' in got.output


def test_a_partial_file_with_bad_run_counts_or_runs_is_refused(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen, stop_after=1))
    _calibrate("--flags", "{}", "--out", str(out))
    kept = json.loads(partial.read_text())
    bad = [{**kept, "runs_wanted": v} for v in (True, 2, -1, "3")]
    bad.append({**kept, "runs": [{**kept["runs"][0], "baseline": 5}]})
    for data in bad:
        partial.write_text(json.dumps(data))
        seen.clear()
        got = _calibrate("--flags", "{}", "--resume", "--out", str(out))
        assert got.exit_code == 2 and "is not a partial calibration" in got.output, data
        assert not seen
    plain = _calibrate("--flags", "{}", "--out", str(out))      # without --resume: a notice
    assert "is not a partial calibration; this one replaces it" in " ".join(plain.output.split())


def test_a_run_that_cannot_be_saved_goes_on_and_a_folder_is_refused(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))

    def no_room(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", no_room)
    got = _calibrate("--flags", "{}", "--out", str(out))
    assert got.exit_code == 0 and len(json.loads(out.read_text())["runs"]) == 3
    assert "cannot save the finished runs" in got.output and "No space left" in got.output
    assert not partial.exists() and not list(out.parent.glob("*.tmp"))
    monkeypatch.undo()
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PROFILE", "cpu-tiny")
    monkeypatch.setattr(module, "calibrate", _fake_calibrate(seen))
    partial.mkdir()
    seen.clear()
    folder = _calibrate("--flags", "{}", "--out", str(out))
    assert folder.exit_code == 2 and f"{partial} is a folder" in folder.output and not seen


def test_runs_all_kept_but_not_judged_say_so(monkeypatch, files):
    out, partial = files
    seen: dict = {}
    fake = _fake_calibrate(seen)

    async def judged_none(*args, **kwargs):
        await fake(*args, **kwargs)
        raise ValueError("throughput: 0 run(s) with a value")

    monkeypatch.setattr(module, "calibrate", judged_none)
    got = _calibrate("--flags", "{}", "--out", str(out))
    assert "all 3 runs are kept" in got.output and "--resume --runs 4 adds a run" in got.output
    assert "3 of 3" not in got.output


def test_the_reference_runner_looks_for_the_file_calibrate_writes():
    from vllm_course.cli.labs import _partial_path
    from vllm_course.reference.catalog import CALIBRATION, KEPT_RUNS

    assert _partial_path(Path("/x") / CALIBRATION) == Path("/x") / KEPT_RUNS

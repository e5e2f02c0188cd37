"""``vllm_course.reference``: items, their plan into device calls, what a call writes and packs.

Nothing here starts vLLM: commands are stand-ins (a Python one-liner), notebooks are built in
memory. The device runs themselves are the reference results under ``reference/h200/``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

from vllm_course.reference import catalog, plan, select
from vllm_course.reference import run as runmod
from vllm_course.reference.catalog import CHAPTER_PARTS, DEFAULT_S, REPO_ROOT, UNMEASURED_LABS, Item
from vllm_course.reference.catalog import _item as catalog_item
from vllm_course.reference.plan import Call, describe, grouped
from vllm_course.server import registry


def _item(id_: str, seconds: int, servers: tuple[str, ...] = (), kind: str = "chapter") -> Item:
    return Item(id_, kind, f"chapters/{id_}.ipynb", f"chapters/{id_}", seconds, "test", servers)


# -- the catalog -----------------------------------------------------------------------------


def test_the_catalog_has_every_chapter_lab_and_comparison_with_estimates():
    items = catalog("h200")
    ids = [i.id for i in items]
    chapters = sorted(REPO_ROOT.glob("chapters/[0-9][0-9]_*.ipynb"))
    assert ids[0] == "demo"
    wholes = [i for i in ids if i.startswith("ch") and "." not in i]
    assert wholes == [f"ch{p.name[:2]}" for p in chapters]
    # chapter 15's GPU run needs more server starts than one device call: it also has parts,
    # right after it, each running the same notebook with COURSE_PARTS set
    assert ids[ids.index("ch15") + 1:ids.index("ch15") + 3] == ["ch15.fp8", "ch15.int4"]
    int4 = next(i for i in items if i.id == "ch15.int4")
    assert (int4.source, int4.dest, int4.parts) == (
        "chapters/15_quantization.ipynb", "chapters/15_quantization.int4", "int4")
    assert ids[ids.index("ch18") + 1:ids.index("ch18") + 4] == [
        "ch18.replicas", "ch18.layouts-a", "ch18.layouts-b"]
    assert {"lab01", "lab04", "bench-poisson", "bench-burst"} <= set(ids)
    ch01 = next(i for i in items if i.id == "ch01")
    # chapter 01's committed H200 run took 137 s (reference/h200/chapters/01_welcome/run.json)
    recorded = json.loads((REPO_ROOT / "reference/h200/chapters/01_welcome/run.json").read_text())
    assert ch01.estimate_s == recorded["wall_s"] and "last run" in ch01.estimate_from
    # nothing run on a profile: each item's longest run on the committed ones, else the default
    unmeasured = {i.id: i for i in catalog("no-such-profile")}
    assert unmeasured["ch01"].estimate_s == recorded["wall_s"]
    assert unmeasured["ch01"].estimate_from.startswith("not run on no-such-profile yet: its h200")
    assert unmeasured["ch18.layouts-b"].estimate_s == DEFAULT_S["chapter"]   # two GPUs: never run
    assert unmeasured["ch18.layouts-b"].estimate_from == "not run yet: the default for a chapter"


def test_an_item_not_run_on_this_profile_is_estimated_by_its_longest_run_elsewhere(tmp_path):
    def ran(profile: str, wall_s: object, measured: str = "2026-12-06") -> None:
        folder = tmp_path / profile / "chapters" / "15_quantization.fp8"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.json").write_text(json.dumps({"wall_s": wall_s, "measured": measured,
                                                     "servers": ["k"]}))

    def item() -> Item:
        return catalog_item("ch15.fp8", "chapter", "chapters/15_quantization.ipynb",
                            "chapters/15_quantization.fp8", "h200", root=tmp_path, parts="fp8")

    assert item().estimate_s == DEFAULT_S["chapter"]                 # nowhere yet
    ran("h100-80g", 388)
    ran("a100-80g", 512, "2026-11-30")
    ran("l4", "?")                                                   # not timed: ignored
    (tmp_path / "README.md").write_text("not a profile")
    got = item()
    assert (got.estimate_s, got.servers) == (512, ())   # the longest; servers are per profile
    assert got.estimate_from == "not run on h200 yet: its a100-80g run took 512 s on 2026-11-30"
    ran("h200", 300)                                                 # its own run comes first
    assert (item().estimate_s, item().servers) == (300, ("k",))


def test_every_part_is_one_the_chapter_asks_for():
    # a part's name reaches nb.part() in the chapter, literally or from a table of parts
    for chapter, parts in CHAPTER_PARTS.items():
        (source,) = REPO_ROOT.glob(f"chapters/{chapter[2:]}_*.py")
        text = source.read_text()
        assert "nb.part(" in text
        assert all(f'"{p}"' in text for p in parts), chapter


def test_select_ids_ranges_and_groups_in_catalog_order():
    items = catalog("h200")
    assert [i.id for i in select(["lab03", "ch03-ch05", "demo"], items)] == \
        ["demo", "ch03", "ch04", "ch05", "lab03"]
    assert [i.id for i in select(["bench", "ch02", "CH02"], items)] == \
        ["ch02", "bench-poisson", "bench-burst"]
    assert len(select(["all"], items)) == len(items) - 5      # not ch15's and ch18's parts
    assert {i.kind for i in select(["labs"], items)} == {"lab"}
    assert [i.id for i in select(["chapters"], items)][14:16] == ["ch15", "ch16"]
    assert [i.id for i in select(["ch14-ch16"], items)] == ["ch14", "ch15", "ch16"]
    assert [i.id for i in select(["ch15.int4", "ch15.fp8"], items)] == ["ch15.fp8", "ch15.int4"]


def test_a_backwards_range_is_turned_round_in_the_message():
    with pytest.raises(ValueError, match="runs backwards.*ch01-ch03"):
        select(["ch03-ch01"], catalog("h200"))


@pytest.mark.parametrize("word", ["ch99", "lab", "ch01-lab02", "ch40-ch50", "burst",
                                  "ch\u0661-ch\u0663", "ch1-ch" + "9" * 5000])
def test_select_names_what_exists_when_a_word_names_nothing(word):
    with pytest.raises(ValueError, match="ch01"):
        select([word], catalog("h200"))


def test_commands_write_into_the_folder_given(tmp_path):
    items = {i.id: i for i in catalog("h200")}
    lab = items["lab02"].argv("mistral-7b-v0.3", "h200", tmp_path)
    assert lab[1:5] == ["-m", "vllm_course", "calibrate", "lab02"]
    assert lab[-2:] == ["--out", str(tmp_path / "calibration.json")] and "h200" in lab
    bench = items["bench-burst"].argv("mistral-7b-v0.3", "h200", tmp_path)
    assert bench[1].endswith("benchmarks/compare_vllm_bench.py")
    assert bench[bench.index("--rate") + 1] == "inf" and bench[-1] == str(tmp_path)
    assert items["ch01"].argv("m", "h200", tmp_path) == []
    # lab01 has no performance target to calibrate ("calibrate lab01" exits 2 on the H200):
    # its reference run executes the solution notebook in a kernel, as a chapter's does
    assert items["lab01"].source == "labs/source/lab01/lab01.ipynb"
    assert (REPO_ROOT / items["lab01"].source).is_file()
    assert items["lab01"].argv("mistral-7b-v0.3", "h200", tmp_path) == []
    from vllm_course.grading.spec import SCENARIOS

    assert UNMEASURED_LABS == tuple(k for k, sc in SCENARIOS.items() if not sc.targets)


# -- the plan ---------------------------------------------------------------------------------


def test_items_sharing_a_server_stand_together_others_keep_their_place():
    items = [_item("a", 10, ("s1",)), _item("b", 10), _item("c", 10, ("s2",)),
             _item("d", 10, ("s1", "s2")), _item("e", 10, ("s2",))]
    assert [i.id for i in grouped(items)] == ["a", "d", "b", "c", "e"]


def test_calls_fill_up_to_the_limit_and_a_long_item_gets_a_call_of_its_own():
    items = [_item("a", 200), _item("b", 300), _item("c", 100), _item("d", 700), _item("e", 50)]
    calls = plan(items, call_s=540)
    assert [[i.id for i in c.items] for c in calls] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert [c.estimate_s for c in calls] == [500, 100, 700, 50]
    assert [c.over for c in calls] == [False, False, True, False]
    text = describe(calls)
    assert "call 3: ~700 s of 540 s  OVER the limit" in text
    assert "4 call(s), ~24.5 device minutes" in text     # (1350 + 120 s of staging) / 60


def test_an_item_whose_last_run_ran_out_of_its_call_gets_a_call_of_its_own(tmp_path):
    def bench() -> Item:
        return catalog_item("bench-burst", "bench", "benchmarks/compare_vllm_bench.py",
                            "bench/bench-burst", "h100-80g", root=tmp_path)

    folder = tmp_path / "h100-80g" / "bench" / "bench-burst"
    folder.mkdir(parents=True)
    stopped = {"wall_s": 531, "measured": "2026-12-07",
               "failed": "stopped: the call's time ran out"}
    # a comparison other calls finished: the runner's record kept beside merged.txt
    (folder / "first-call-run.json").write_text(json.dumps(stopped))
    (folder / "merged.txt").write_text("merged")
    got = bench()
    assert (got.estimate_s, got.ran_out) == (531, True)
    assert got.estimate_from == ("its last run ran out of its call after 531 s on 2026-12-07: "
                                 "it needs more")
    # a notebook stopped by its kernel's timeout, and a record written by hand before the runner
    for failed in ("stopped: TimeoutError (the call's time ran out?)",
                   "stopped at the call's 540 s deadline during section 6"):
        (folder / "run.json").write_text(json.dumps({**stopped, "wall_s": 400, "failed": failed}))
        assert (bench().estimate_s, bench().ran_out) == (400, True)
    # a run that finished, or failed otherwise, is an estimate like any other
    for failed in (None, "exit status 1", "CheckFailed: the pool holds the burst"):
        (folder / "run.json").write_text(json.dumps({**stopped, "failed": failed}))
        assert (bench().estimate_s, bench().ran_out) == (531, False)

    ran_out = dataclasses.replace(got, estimate_s=300)               # short, yet alone
    calls = plan([_item("a", 100), ran_out, _item("b", 100)], call_s=540)
    assert [[i.id for i in c.items] for c in calls] == [["a"], ["bench-burst"], ["b"]]
    assert [(c.over, c.ran_out) for c in calls] == [(False, False), (False, True),
                                                     (False, False)]
    assert "call 2: ~300 s of 540 s  RAN OUT of a call before" in describe(calls)


@pytest.mark.parametrize("items, call_s", [([], 540), ([_item("a", 1)], 0)])
def test_a_plan_of_nothing_or_of_no_time_is_refused(items, call_s):
    with pytest.raises(ValueError):
        plan(items, call_s=call_s)


# -- what a call writes -----------------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG fake").decode()


def test_a_notebooks_printed_text_figures_and_checks_are_read_in_order():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("x")]
    nb.cells[1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="ok: a claim  [1 -> 2]\nplain\n"),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Fig>"}),
        nbformat.v4.new_output("execute_result", data={"text/plain": "42"}, execution_count=1),
        nbformat.v4.new_output("error", ename="CheckFailed", evalue="expected: b", traceback=[]),
    ]
    text, pngs, checks = runmod.notebook_outputs(nb)
    assert text == "ok: a claim  [1 -> 2]\nplain\n42\nCheckFailed: expected: b\n"
    assert pngs == [b"\x89PNG fake"]
    assert checks == ["ok: a claim  [1 -> 2]"]


def test_only_small_new_files_worth_keeping_are_copied(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "run-1").mkdir(parents=True)
    (src / "vllm-cache/123/inductor").mkdir(parents=True)    # chapter 14's compile cache
    old = src / "old.json"
    old.write_text("{}")
    since = time.time() + 1
    for name, size in [("run-1/summary.json", 10), ("run-1/requests.jsonl", 10),
                       ("run-1/server.log", 10), ("run-1/big.json", runmod.MAX_FILE_BYTES + 1),
                       ("plot.png", 10), ("vllm-cache/123/inductor/triton_.json", 10)]:
        (src / name).write_bytes(b"x" * size)
    for p in src.rglob("*"):
        if p.is_file() and p != old:
            import os
            os.utime(p, (since + 1, since + 1))
    left_out = runmod.copy_small_files(src, dest, since=since)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == \
        ["plot.png", "run-1/summary.json"]
    assert left_out == ["run-1/big.json (2.0 MiB)"]


def test_a_command_past_the_calls_end_is_stopped_with_its_output_kept(tmp_path, monkeypatch):
    code = ("import pathlib, sys, time; out = pathlib.Path(sys.argv[1])\n"
            "(out / 'calibration.json').write_text('{}'); print('started', flush=True)\n"
            "time.sleep(60)")
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", code, str(out)])
    dest = tmp_path / "labs" / "lab02"
    dest.mkdir(parents=True)
    t = time.monotonic()
    got = runmod.run_command(_item("lab02", 1, kind="lab"), dest, "m", "p", t + 2)
    assert time.monotonic() - t < 20
    assert got["exit"] is None and got["failed"].startswith("stopped")
    assert (dest / "calibration.json").read_text() == "{}"
    assert (dest / "log.txt").read_text() == "started\n"
    assert not dest.with_name("lab02.work").exists()


def test_a_lab_stopped_in_an_earlier_call_resumes_from_the_runs_it_kept(tmp_path, monkeypatch):
    # call 1 stops lab02's calibration after 2 runs: its kept runs come back in the item's
    # folder and are unpacked under reference/<profile>/; the next call's run resumes them
    code = ("import pathlib, sys; out = pathlib.Path(sys.argv[1])\n"
            "kept = out / 'calibration.partial.json'\n"
            "print(sys.argv[2:], kept.read_text() if kept.exists() else None)\n"
            "kept.unlink(missing_ok=True); (out / 'calibration.json').write_text('{}')")
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", code, str(out)])
    root = tmp_path / "reference"
    item = _item("lab02", 1, kind="lab")
    fresh = tmp_path / "call1" / item.dest
    fresh.mkdir(parents=True)
    got = runmod.run_command(item, fresh, "m", "p", time.monotonic() + 30, root=root)
    assert (fresh / "log.txt").read_text() == "[] None\n" and "resumed_from" not in got
    (root / "p" / item.dest).mkdir(parents=True)
    (root / "p" / item.dest / "calibration.partial.json").write_text('{"runs": [1, 2]}')
    dest = tmp_path / "call2" / item.dest
    dest.mkdir(parents=True)
    got = runmod.run_command(item, dest, "m", "p", time.monotonic() + 30, root=root)
    assert got["exit"] == 0, (dest / "log.txt").read_text()
    assert (dest / "log.txt").read_text() == "['--resume'] {\"runs\": [1, 2]}\n"
    assert got["resumed_from"] == "reference/p/chapters/lab02/calibration.partial.json"
    assert got["how"].endswith("--resume")
    assert sorted(p.name for p in dest.iterdir()) == ["calibration.json", "log.txt"]
    assert got["runs_made"] is None                     # the stand-in's '{}' holds no runs
    bench = _item("bench-x", 1, kind="bench")                  # only a lab calibration resumes
    (root / "p" / bench.dest).mkdir(parents=True)
    (root / "p" / bench.dest / "calibration.partial.json").write_text("{}")
    other = tmp_path / "call2" / bench.dest
    other.mkdir(parents=True)
    assert "resumed_from" not in runmod.run_command(bench, other, "m", "p",
                                                    time.monotonic() + 30, root=root)


def test_kept_runs_a_resume_refuses_are_dropped_and_a_call_that_skips_them_keeps_them(
        tmp_path, monkeypatch):
    # calibrate --resume exits 2 on kept runs of another answer, model or vLLM: packing them
    # back would make every later call fail the same way
    code = ("import pathlib, sys; out = pathlib.Path(sys.argv[1])\n"
            "print('refused', flush=True); raise SystemExit(2)")
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", code, str(out)])
    root = tmp_path / "reference"
    item = _item("lab02", 1, kind="lab")
    (root / "p" / item.dest).mkdir(parents=True)
    kept = root / "p" / item.dest / "calibration.partial.json"
    kept.write_text(json.dumps({"runs": [{}, {}], "runs_wanted": 3}))
    dest = tmp_path / "call" / item.dest
    dest.mkdir(parents=True)
    got = runmod.run_command(item, dest, "m", "p", time.monotonic() + 30, root=root)
    assert got["exit"] == 2 and "resumed_from" not in got
    assert got["resume_refused"] == "reference/p/chapters/lab02/calibration.partial.json"
    assert got["runs_made"] is None
    assert not (dest / "calibration.partial.json").exists()
    # a call with too little time left does not start the item: its kept runs stay with it
    skipped = tmp_path / "call2" / item.dest
    skipped.mkdir(parents=True)
    runmod.carry_kept_runs(item, skipped, "p", root=root)
    assert (skipped / "calibration.partial.json").read_text() == kept.read_text()


def test_the_plan_estimates_a_resumed_lab_by_the_runs_left(tmp_path):
    folder = tmp_path / "h200" / "labs" / "lab04"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"wall_s": 500, "measured": "2026-12-05"}))
    assert catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200",
                         root=tmp_path).estimate_s == 500
    (folder / "calibration.partial.json").write_text(json.dumps({"runs": [{}, {}],
                                                                 "runs_wanted": 3}))
    item = catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200", root=tmp_path)
    assert item.estimate_s == 250                           # 1 run left at 250 s a run
    assert item.estimate_from.startswith("resumes 2 of 3 runs kept, ~250 s a run")
    # a second call made 1 run in 600 s and was stopped again at 3 of 5: by its own run
    (folder / "run.json").write_text(json.dumps({"wall_s": 600, "runs_made": 1}))
    (folder / "calibration.partial.json").write_text(json.dumps({"runs": [{}] * 3,
                                                                 "runs_wanted": 5}))
    assert catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200",
                        root=tmp_path).estimate_s == 1200
    (folder / "run.json").write_text(json.dumps({"wall_s": 3, "runs_made": 0}))   # refused
    assert catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200",
                        root=tmp_path).estimate_s == DEFAULT_S["lab"]
    (folder / "calibration.partial.json").write_text("{damaged")
    assert catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200",
                        root=tmp_path).estimate_s == 3
    notebook = tmp_path / "h200" / "labs" / "lab01"                 # never resumed
    notebook.mkdir(parents=True)
    (notebook / "run.json").write_text(json.dumps({"wall_s": 400}))
    (notebook / "calibration.partial.json").write_text(json.dumps({"runs": [{}],
                                                                   "runs_wanted": 3}))
    assert catalog_item("lab01", "lab", "labs/source/lab01/lab01.ipynb", "labs/lab01", "h200",
                        root=tmp_path).estimate_s == 400


def test_a_killed_command_leaves_no_server_behind(tmp_path, monkeypatch):
    # the command registers a server of its own (a stand-in with a vLLM command line, leading
    # its own process group, as VLLMServer starts it), then is stopped at the call's end before
    # it could stop that server: the call stops it
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path / "home"))
    code = ("import subprocess, sys, time\n"
            "from vllm_course.server import registry\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)',\n"
            "                      'vllm.entrypoints.openai.api_server'], start_new_session=True)\n"
            "registry.register(p.pid, host='127.0.0.1', port=8000, model='m', log_path='x.log',\n"
            "                  args={})\n"
            "print(p.pid, flush=True); time.sleep(60)")
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", code])
    dest = tmp_path / "d"
    dest.mkdir()
    got = runmod.run_command(_item("x", 1, kind="bench"), dest, "m", "p", time.monotonic() + 3)
    assert got["failed"].startswith("stopped")
    server_pid = int((dest / "log.txt").read_text().split()[0])
    assert not registry._alive(server_pid)
    assert registry.entries() == []


def test_a_command_that_fails_says_its_exit_status(tmp_path, monkeypatch):
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", "raise SystemExit(3)"])
    dest = tmp_path / "d"
    dest.mkdir()
    got = runmod.run_command(_item("x", 1, kind="bench"), dest, "m", "p", time.monotonic() + 30)
    assert got["exit"] == 3 and got["failed"] == "exit status 3"


# -- packing ----------------------------------------------------------------------------------


def _call_folder(root: Path) -> Path:
    folder = root / "call-1"
    for dest, files in {"chapters/11_max_num_seqs": {"run.json": "{}", "runs/a/summary.json": "1"},
                        "labs/lab02": {"run.json": "{}", "calibration.json": "2"}}.items():
        for name, text in files.items():
            (folder / dest / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / dest / name).write_text(text)
    (folder / runmod.MANIFEST).write_text(json.dumps({"ch11": "chapters/11_max_num_seqs",
                                                      "lab02": "labs/lab02"}))
    return folder


def test_pack_and_unpack_put_each_item_in_its_place_replacing_the_old(tmp_path):
    parts = runmod.pack(_call_folder(tmp_path), tmp_path / "out", "reference-call-1")
    assert [p.name for p in parts] == ["reference-call-1.tgz.00"]
    root = tmp_path / "reference"
    stale = root / "h200" / "chapters" / "11_max_num_seqs" / "old.png"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier run")
    written = runmod.unpack(parts, "h200", root)
    assert written == ["h200/chapters/11_max_num_seqs", "h200/labs/lab02"]
    assert not stale.exists()
    assert (root / "h200/chapters/11_max_num_seqs/runs/a/summary.json").read_text() == "1"
    assert (root / "h200/labs/lab02/calibration.json").read_text() == "2"


def test_a_big_call_is_split_into_parts_and_joined_again(tmp_path, monkeypatch):
    folder = _call_folder(tmp_path)
    (folder / "labs/lab02/noise.json").write_bytes(bytes(range(256)) * 2)
    whole = runmod.pack(folder, tmp_path / "whole", "p")[0].stat().st_size
    monkeypatch.setattr(runmod, "PART_BYTES", whole // 3 + 1)
    parts = runmod.pack(folder, tmp_path / "out", "p")
    assert len(parts) == 3
    assert all(p.stat().st_size <= whole // 3 + 1 for p in parts)
    runmod.unpack(list(reversed(parts)), "h200", tmp_path / "ref")
    assert (tmp_path / "ref/h200/labs/lab02/noise.json").read_bytes() == bytes(range(256)) * 2
    monkeypatch.setattr(runmod, "PART_BYTES", 10)
    with pytest.raises(ValueError, match="more than 8 parts"):
        runmod.pack(folder, tmp_path / "out2", "p")


def test_unpack_puts_runs_under_the_profile_they_record_and_refuses_another(tmp_path):
    """The H100 runs of 2026-12-05/06 had to be unpacked with --profile h100-80g: without it
    they would have gone to reference/h200/ (the default then). Now the runs' own record
    decides, and a wrong --profile writes nothing."""
    folder = _call_folder(tmp_path)
    for dest in ("chapters/11_max_num_seqs", "labs/lab02"):
        (folder / dest / "run.json").write_text(json.dumps({"profile": "h100-80g"}))
    parts = runmod.pack(folder, tmp_path / "out", "p")
    root = tmp_path / "ref"
    with pytest.raises(ValueError, match="chapters/11_max_num_seqs was run on profile h100-80g .*"
                                         "not h200; pass --profile h100-80g"):
        runmod.unpack(parts, "h200", root)
    assert not root.exists()
    assert runmod.unpack(parts, root=root) == ["h100-80g/chapters/11_max_num_seqs", "h100-80g/labs/lab02"]
    assert (root / "h100-80g/labs/lab02/calibration.json").read_text() == "2"
    (folder / "labs/lab02/run.json").write_text(json.dumps({"profile": "h200"}))
    mixed = runmod.pack(folder, tmp_path / "out2", "p")
    with pytest.raises(ValueError, match="record profiles h100-80g, h200: name the folder"):
        runmod.unpack(mixed, root=root)
    unrecorded = runmod.pack(_call_folder(tmp_path / "old"), tmp_path / "out3", "p")
    with pytest.raises(ValueError, match="record no profile"):
        runmod.unpack(unrecorded, root=root)
    assert runmod.unpack(unrecorded, "h200", root) == ["h200/chapters/11_max_num_seqs", "h200/labs/lab02"]


def test_unpack_refuses_a_pack_without_its_manifest(tmp_path):
    folder = _call_folder(tmp_path)
    (folder / runmod.MANIFEST).unlink()
    parts = runmod.pack(folder, tmp_path / "out", "p")
    with pytest.raises(ValueError, match="items.json"):
        runmod.unpack(parts, "h200", tmp_path / "ref")


def _pack_of(tmp_path: Path, manifest, files: dict[str, bytes], name: str = "p") -> list[Path]:
    """A pack built by hand: ``manifest`` as items.json beside ``files`` (path -> bytes)."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in {runmod.MANIFEST: json.dumps(manifest).encode(), **files}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / f"{name}.tgz.00"
    out.write_bytes(buf.getvalue())
    return [out]


RUN = json.dumps({"profile": "h200"}).encode()


@pytest.mark.parametrize(("manifest", "says"), [
    ({"x": "../../../victim"}, "names 'x', not an item of the course"),
    ({"ch01": "/tmp/victim"}, "puts ch01 in '/tmp/victim', not in its folder"),
    ({"ch01": "../../src"}, "puts ch01 in '../../src'"),
    ({"ch01": ""}, "puts ch01 in ''"),
    ({"ch01": "chapters"}, "puts ch01 in 'chapters'"),
    ({"ch02": "chapters/02_how_vllm_serves"}, "holds no chapters/02_how_vllm_serves/run.json"),
    ({}, "lists no items"),
    (["ch01"], "lists no items"),
    (None, "lists no items"),
])
def test_unpack_writes_only_the_course_folders_of_items_it_holds(tmp_path, manifest, says):
    """A damaged or crafted items.json once deleted folders outside reference/ (rmtree of
    ``root/profile/dest`` for any dest) and wiped folders the pack held nothing for."""
    victim = tmp_path / "victim" / "keep.txt"
    victim.parent.mkdir()
    victim.write_text("keep")
    root = tmp_path / "reference"
    old = root / "h200/chapters/02_how_vllm_serves/run.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    parts = _pack_of(tmp_path, manifest, {"chapters/01_welcome/run.json": RUN})
    with pytest.raises(ValueError, match=re.escape(says)):
        runmod.unpack(parts, "h200", root)
    assert victim.read_text() == "keep" and old.read_text() == "{}"
    assert sorted(p.name for p in root.iterdir()) == ["h200"]


@pytest.mark.parametrize("profile", ["../../../victim", "", "H200", "bogus", 5, ["h200"]])
def test_unpack_takes_only_a_course_profile(tmp_path, profile):
    root = tmp_path / "a" / "b" / "reference"       # ../../../victim: tmp_path/victim
    run = json.dumps({"profile": profile}).encode()
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": run})
    given = profile if isinstance(profile, str) and profile else None
    with pytest.raises(ValueError, match="not one of the course's GPU profiles|record no profile"):
        runmod.unpack(parts, given, root)
    assert not root.exists() or not any(root.rglob("*.json"))
    assert not (tmp_path / "victim").exists()


def test_unpack_refuses_members_that_leave_the_pack_even_behind_dot_slash(tmp_path):
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": RUN, ".//tmp/evil": b"x"})
    with pytest.raises(ValueError, match="not a plain file inside the pack"):
        runmod.unpack(parts, "h200", tmp_path / "reference")


def test_unpack_replaces_nothing_unless_every_folder_was_written(tmp_path):
    """A file ``x`` beside ``x/y`` in the second item failed mid-way, after the first item's
    folder had been replaced and the second's deleted."""
    root = tmp_path / "reference"
    for dest in ("chapters/01_welcome", "chapters/02_how_vllm_serves"):
        (root / "h200" / dest).mkdir(parents=True)
        (root / "h200" / dest / "run.json").write_text("old")
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome",
                                "ch02": "chapters/02_how_vllm_serves"},
                     {"chapters/01_welcome/run.json": RUN,
                      "chapters/02_how_vllm_serves/run.json": RUN,
                      "chapters/02_how_vllm_serves/x": b"1",
                      "chapters/02_how_vllm_serves/x/y": b"2"})
    with pytest.raises(OSError):
        runmod.unpack(parts, "h200", root)
    assert [(root / "h200" / d / "run.json").read_text() for d in
            ("chapters/01_welcome", "chapters/02_how_vllm_serves")] == ["old", "old"]
    assert sorted(p.name for p in root.iterdir()) == ["h200"]       # no staging folder left


def test_unpack_says_in_one_line_when_the_parts_are_not_one_pack(tmp_path):
    whole = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": RUN,
                      "chapters/01_welcome/noise": os.urandom(4000)})[0].read_bytes()
    first, second = tmp_path / "c.tgz.00", tmp_path / "c.tgz.01"
    first.write_bytes(whole[:2000])
    second.write_bytes(whole[2000:])
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    empty = tmp_path / "empty.tgz.00"
    empty.write_bytes(b"")
    for parts in ([first], [second], [text], [empty], [first, first, second]):
        with pytest.raises(ValueError, match="do not join into a pack .* each once|given twice"):
            runmod.unpack(parts, "h200", tmp_path / "reference")
    assert runmod.unpack([second, first], "h200", tmp_path / "reference") == \
        ["h200/chapters/01_welcome"]


def test_unpack_leaves_a_symlinked_folder_alone(tmp_path):
    root = tmp_path / "reference"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep")
    (root / "h200/chapters").mkdir(parents=True)
    (root / "h200/chapters/01_welcome").symlink_to(elsewhere)
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": RUN})
    with pytest.raises(ValueError, match="is a symbolic link"):
        runmod.unpack(parts, "h200", root)
    assert (elsewhere / "keep").read_text() == "keep"


def test_call_limit_default_leaves_room_under_the_devices_ten_minutes():
    assert Call(1).limit_s == 540 < 600


def test_a_call_runs_its_items_in_order_and_starts_none_once_its_time_is_spent(tmp_path,
                                                                               monkeypatch):
    code = ("import pathlib, sys, time; time.sleep(1.5)\n"
            "(pathlib.Path(sys.argv[1]) / 'table.txt').write_text('PASS')")
    monkeypatch.setattr(Item, "argv", lambda self, model, profile, out:
                        [sys.executable, "-c", code, str(out)])
    monkeypatch.setattr(runmod, "MIN_LEFT_S", 2)
    first = Item("bench-burst", "bench", "benchmarks/compare_vllm_bench.py", "bench/bench-burst",
                 420, "test")
    second = Item("lab02", "lab", "lab02", "labs/lab02", 450, "test")
    out = tmp_path / "call-1"
    runs = runmod.run_call(Call(1, [first, second], limit_s=3), out, calls=2,
                           echo=lambda line: None)
    assert [r["item"] for r in runs] == ["bench-burst", "lab02"]
    assert runs[0]["exit"] == 0 and runs[0]["failed"] is None and runs[0]["wall_s"] >= 1
    assert (out / "bench/bench-burst/table.txt").read_text() == "PASS"
    assert runs[0]["files"] == ["log.txt", "table.txt", "run.json"]
    assert runs[0]["device_call"] == "1 of 2" and "device call 1 of 2" in runs[0]["headline"]
    assert runs[1]["exit"] is None and runs[1]["failed"].startswith("not started")
    saved = json.loads((out / "labs/lab02/run.json").read_text())
    assert saved == runs[1]
    assert json.loads((out / runmod.MANIFEST).read_text()) == {
        "bench-burst": "bench/bench-burst", "lab02": "labs/lab02"}


def test_check_lines_a_chapter_shows_from_an_earlier_run_are_not_read_as_its_own(capsys):
    # chapter 05 shows a committed H200 run; an executed chapter's own checks start with "ok: "
    from vllm_course import notebook

    notebook.show_reference_run("h200/chapters/03_kv_cache/run.json", numbers=False)
    shown = capsys.readouterr().out
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x")]
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                  text=shown + "ok: its own claim\n")]
    assert "ok: a 8x shorter max_model_len" in shown
    assert runmod.notebook_outputs(nb)[2] == ["ok: its own claim"]


def test_time_s_shortens_the_call_but_keeps_the_plans_items(monkeypatch, tmp_path):
    """A call's items come from the plan at --call-s; --time-s only shortens how long the call
    may run (a lower --call-s for the last call of a session had moved items between calls)."""
    from click.testing import CliRunner

    from vllm_course.cli import main

    items = [_item("a", 300), _item("b", 200), _item("c", 300)]
    monkeypatch.setattr("vllm_course.reference.catalog", lambda profile: items)
    monkeypatch.setattr("vllm_course.reference.select", lambda ids, cat: cat)
    ran: list[Call] = []

    def fake_run_call(call, folder, calls, echo):
        ran.append(call)
        return []

    monkeypatch.setattr(runmod, "run_call", fake_run_call)
    monkeypatch.setattr("vllm_course.cli.reference._gpu_here", lambda name: None)
    args = ["reference", "run", "a", "--call", "2", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--time-s", "250"])
    assert result.exit_code == 0, result.output
    assert [i.id for i in ran[0].items] == ["c"] and ran[0].limit_s == 250
    assert "call 2 may run 250 s (--time-s), not 540 s" in result.output
    result = CliRunner().invoke(main, [*args, "--time-s", "600"])   # not longer than the plan's
    assert result.exit_code == 0, result.output
    assert [i.id for i in ran[1].items] == ["c"] and ran[1].limit_s == 540


def test_a_chapters_figures_come_back_even_where_mplbackend_is_agg(monkeypatch, tmp_path):
    """plt.show() under the Agg backend draws nothing: the H200 runs of chapters 10, 13, 17 and
    18 came back without one figure. The runner gives the kernel ipykernel's inline backend.
    Of the runs the chapter wrote, the numbers come back and the per-run plots do not."""
    monkeypatch.setenv("MPLBACKEND", "Agg")        # as tests/notebooks/conftest.py sets it
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\n"
                                          "plt.plot([1, 2, 3])\nplt.show()\nprint('drawn')"),
                nbformat.v4.new_code_cell(
                    "import pathlib; run = pathlib.Path('../results/chapters/99_plot/r-1')\n"
                    "run.mkdir(parents=True)\n"
                    "for name in ('summary.json', 'timeseries.json', 'timeseries.png'):\n"
                    "    (run / name).write_text('{}')")]
    (tmp_path / "chapters").mkdir()
    nbformat.write(nb, tmp_path / "chapters" / "99_plot.ipynb")
    monkeypatch.setattr(runmod, "REPO_ROOT", tmp_path)
    item = Item("ch99", "chapter", "chapters/99_plot.ipynb", "chapters/99_plot", 10, "test")
    dest = tmp_path / "out"
    dest.mkdir()
    got = runmod.run_chapter(item, dest, "http://127.0.0.1:9", time.monotonic() + 120)
    assert got["exit"] == 0, got["failed"]
    assert (dest / "outputs.txt").read_text() == "drawn\n"
    png = (dest / "figure-01.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    assert sorted(p.name for p in (dest / "runs").rglob("*") if p.is_file()) == \
        ["summary.json", "timeseries.json"]
    assert os.environ["MPLBACKEND"] == "Agg"    # restored after the run


def test_items_that_start_their_own_servers_find_the_pools_idle_servers_stopped(tmp_path,
                                                                               monkeypatch):
    """ch13's and ch18's first H200 runs: a server left idle in the call's pool by an earlier
    item kept the GPU's memory, and the next server was refused. Before a lab, comparison or
    the demo (and lab01's notebook, whose run cell starts its own server) the pool stops its
    idle servers; chapters borrow from it and keep them."""
    events: list[str] = []
    monkeypatch.setattr(runmod.ServerPool, "stop_idle", lambda self: events.append("stop") or 0)

    def fake_chapter(item, dest, url, deadline):
        events.append(f"kernel {item.id}")
        return {"how": "test", "exit": 0, "failed": None, "checks": [], "left_out": []}

    def fake_command(item, dest, model, profile, deadline):
        events.append(f"command {item.id}")
        return {"how": "test", "exit": 0, "failed": None, "checks": [], "left_out": []}

    monkeypatch.setattr(runmod, "run_chapter", fake_chapter)
    monkeypatch.setattr(runmod, "run_command", fake_command)
    items = [Item("ch10", "chapter", "chapters/10_block_size.ipynb", "chapters/10", 300, "t"),
             Item("ch11", "chapter", "chapters/11_max_num_seqs.ipynb", "chapters/11", 300, "t"),
             Item("bench-burst", "bench", "benchmarks/compare_vllm_bench.py", "bench/b", 420, "t"),
             Item("lab01", "lab", "labs/source/lab01/lab01.ipynb", "labs/lab01", 450, "t")]
    runs = runmod.run_call(Call(1, items), tmp_path / "call-1", echo=lambda line: None)
    assert [r["exit"] for r in runs] == [0, 0, 0, 0]
    assert events == ["kernel ch10", "kernel ch11", "stop", "command bench-burst", "stop",
                      "kernel lab01"]


def test_a_chapters_part_runs_with_course_parts_set_and_whole_chapters_without(monkeypatch,
                                                                                tmp_path):
    from vllm_course import notebook

    monkeypatch.setenv("COURSE_PARTS", "stale")       # an outer value never leaks into a run
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from vllm_course import notebook as nb\n"
        "print(nb.part('int4'), nb.part('fp8'))")]
    (tmp_path / "chapters").mkdir()
    nbformat.write(nb, tmp_path / "chapters" / "99_parts.ipynb")
    monkeypatch.setattr(runmod, "REPO_ROOT", tmp_path)
    seen = []
    for parts in ("int4", ""):
        item = Item("ch99", "chapter", "chapters/99_parts.ipynb", "x", 10, "test", (), parts)
        dest = tmp_path / f"out-{parts}"
        dest.mkdir()
        assert runmod.run_chapter(item, dest, "http://127.0.0.1:9",
                                  time.monotonic() + 120)["exit"] == 0
        seen.append((dest / "outputs.txt").read_text())
    assert seen == ["True False\n", "True True\n"]
    assert os.environ["COURSE_PARTS"] == "stale"                    # restored after the run
    monkeypatch.delenv("COURSE_PARTS")
    assert notebook.part("anything")


def test_a_reference_run_names_the_same_item_run_on_other_gpus(monkeypatch, tmp_path, capsys):
    """After the H200 run, one line per other profile folder that ran the item: every check held,
    or the claim it stopped at (without its evidence); in folder order; also when the H200 run is
    pending; none with others=False."""
    from vllm_course import notebook

    def save(profile: str, item: str, **fields) -> None:
        folder = tmp_path / "reference" / profile / "chapters" / item
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(
            {"headline": f"{profile} run", "gpu": f"GPU of {profile}", "measured": "2026-12-06",
             "vllm_version": "0.26.0", "checks": ["ok: a", "ok: b"], **fields}))

    save("h200", "09_x", failed=None)
    save("h100-80g", "09_x", failed=None, checks=["ok: a", "ok: b", "ok: c"])
    save("a100-80g", "09_x", failed="CheckFailed: expected: the pool holds the burst  [1 -> 2]\nx")
    save("a100-80g", "10_y", failed=None)
    (tmp_path / "reference" / "README.md").write_text("not a profile")
    monkeypatch.setattr(notebook, "REFERENCE_DIR", tmp_path / "reference")
    monkeypatch.setattr(notebook, "REPO_ROOT", tmp_path)

    assert notebook.other_gpu_runs("h200/chapters/09_x/run.json") == [
        "also on GPU of a100-80g, profile a100-80g, 2026-12-06, vLLM 0.26.0: stopped early, "
        "the pool holds the burst (reference/a100-80g/chapters/09_x/)",
        "also on GPU of h100-80g, profile h100-80g, 2026-12-06, vLLM 0.26.0: all 3 checks held "
        "(reference/h100-80g/chapters/09_x/)"]
    notebook.show_reference_run("h200/chapters/09_x/run.json")
    shown = capsys.readouterr().out.splitlines()
    assert shown[:3] == ["h200 run", "  ok: a", "  ok: b"] and len(shown) == 5
    assert shown[3].startswith("also on GPU of a100-80g")
    notebook.show_reference_run("h200/chapters/09_x/run.json", others=False)
    assert len(capsys.readouterr().out.splitlines()) == 3
    notebook.show_reference_run("h200/chapters/10_y/run.json")      # the H200 run is pending
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("H200 reference pending") and shown[1].startswith(
        "also on GPU of a100-80g") and "all 2 checks held" in shown[1] and len(shown) == 2


def test_the_committed_h100_run_of_chapter_17_is_named_under_its_h200_run():
    from vllm_course import notebook

    lines = notebook.other_gpu_runs("h200/chapters/17_preemption_scheduling/run.json")
    assert [line.split(":")[0] for line in lines] == [
        "also on NVIDIA H100 80GB HBM3 (81,559 MiB), profile h100-80g, 2026-12-06, vLLM 0.26.0"]
    assert "all 7 checks held" in lines[0]


def test_plan_uses_the_profile_the_device_run_will(monkeypatch):
    """``reference run`` plans with the machine's profile ($PROFILE on the device); ``reference
    plan`` without --profile takes $PROFILE too, so both number the same calls. An H100 plan
    made with the H200's estimates had split ch04 ... ch18 differently from the device's."""
    from click.testing import CliRunner

    from vllm_course.cli import main

    seen: list[str] = []

    def fake_catalog(profile):
        seen.append(profile)
        return [_item("a", 100)]

    monkeypatch.setattr("vllm_course.reference.catalog", fake_catalog)
    monkeypatch.setattr("vllm_course.reference.select", lambda ids, cat: cat)
    runner = CliRunner()
    monkeypatch.delenv("PROFILE", raising=False)
    assert runner.invoke(main, ["reference", "plan", "a"]).exit_code == 0
    monkeypatch.setenv("PROFILE", "h100-80g")
    result = runner.invoke(main, ["reference", "plan", "a"])
    assert result.exit_code == 0 and result.output.startswith("plan for profile h100-80g\n")
    assert runner.invoke(main, ["reference", "plan", "a", "--profile", "h200"]).exit_code == 0
    assert seen == ["h200", "h100-80g", "h200"]
    monkeypatch.setenv("PROFILE", "h100")                     # a typo: refused, nothing planned
    result = runner.invoke(main, ["reference", "plan", "a"])
    assert result.exit_code != 0 and "$PROFILE 'h100' is not a profile" in result.output
    result = runner.invoke(main, ["reference", "plan", "a", "--profile", "h20"])
    assert result.exit_code != 0 and "--profile 'h20' is not a profile" in result.output
    assert seen == ["h200", "h100-80g", "h200"]


# -- where the runs stand ---------------------------------------------------------------------


def _notebook(code: str, prose: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(prose), nbformat.v4.new_code_cell(code)]
    return nbformat.writes(nb)


def test_status_tells_a_stale_run_from_a_current_one(tmp_path, monkeypatch):
    """A run is to redo when it stopped, or when its chapter's code cells changed after its
    run.json landed; a prose edit changes nothing. A lab calibrated before the runner counts
    as run; an item with neither is pending."""
    import shutil
    import subprocess

    from vllm_course.reference import status

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                        "user.email=t@t", *args], check=True, capture_output=True)

    (tmp_path / "chapters").mkdir()
    for name in ("01_a", "02_b"):
        (tmp_path / f"chapters/{name}.ipynb").write_text(_notebook("x = 1", "prose"))
    ref = tmp_path / "reference"
    for profile, dest, run in (
            ("h200", "chapters/01_a", {"measured": "2026-12-01", "checks": ["ok: a", "ok: b"]}),
            ("h200", "chapters/02_b", {"measured": "2026-12-02", "checks": ["ok: a"],
                                       "failed": "CheckFailed: expected: the claim  [1 vs 2]"}),
            ("h100-80g", "chapters/02_b", {"measured": "2026-12-03", "checks": ["ok: a"]})):
        (ref / profile / dest).mkdir(parents=True)
        (ref / profile / dest / "run.json").write_text(json.dumps(run))
    (ref / "h200/labs").mkdir()
    (ref / "h200/labs/lab02-calibration.json").write_text(json.dumps({"valid": True}))
    (tmp_path / "labs/source/lab02").mkdir(parents=True)
    (tmp_path / "labs/source/lab02/lab02.ipynb").write_text(_notebook("y = 2", "lab"))
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "runs")
    items = [_item("01_a", 0), _item("02_b", 0), Item("lab02", "lab", "lab02", "labs/lab02", 0,
                                                       "test")]

    def table():
        return {(r.item, r.profile): (r.measured, r.outcome, r.changed)
                for r in status.standings(items, ref, tmp_path)}

    assert table() == {
        ("01_a", "h100-80g"): ("", "pending", None),
        ("01_a", "h200"): ("2026-12-01", "all 2 checks held", False),
        ("02_b", "h100-80g"): ("2026-12-03", "all 1 checks held", False),
        ("02_b", "h200"): ("2026-12-02", "stopped: the claim", False),
        ("lab02", "h100-80g"): ("", "pending", None),
        ("lab02", "h200"): (table()[("lab02", "h200")][0],
                            "calibrated: lab02-calibration.json (valid: True)", False)}
    (tmp_path / "chapters/01_a.ipynb").write_text(_notebook("x = 1", "prose, rewritten"))
    (tmp_path / "chapters/02_b.ipynb").write_text(_notebook("x = 2", "prose"))
    (tmp_path / "labs/source/lab02/lab02.ipynb").write_text(_notebook("y = 3", "lab"))
    now = table()
    assert now[("01_a", "h200")][2] is False                 # prose only: still current
    assert now[("02_b", "h200")][2] is True and now[("02_b", "h100-80g")][2] is True
    assert now[("lab02", "h200")][2] is True                 # the lab's code changed
    text = status.describe(status.standings(items, ref, tmp_path))
    assert "h200: 3 of 3 run or covered; to redo: 02_b lab02; pending: none" in text
    assert "h100-80g: 1 of 3 run or covered; to redo: 02_b; pending: 01_a lab02" in text
    # a run that records what it executed is judged by that, not by git: the H100 run of 02_b
    # made with today's code is current, one recorded with other code is not
    run_json = ref / "h100-80g/chapters/02_b/run.json"
    run = json.loads(run_json.read_text())
    run_json.write_text(json.dumps({**run, "source_sha256": status.source_digest(items[1],
                                                                                tmp_path)}))
    assert table()[("02_b", "h100-80g")][2] is False
    run_json.write_text(json.dumps({**run, "source_sha256": "0" * 64}))
    git("add", "-A")
    git("commit", "-qm", "a run recorded with other code")     # git alone would call it current
    assert table()[("02_b", "h100-80g")][2] is True
    plain = tmp_path / "plain"                                 # no git history: unknown
    shutil.copytree(ref, plain / "reference")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert status.source_changed(plain / "reference/h200/chapters/01_a/run.json",
                                 ["chapters/01_a.ipynb"], plain) is None
    text = status.describe(status.standings(items, plain / "reference", plain))
    assert text.count("CHANGED") == 1                        # by its recorded source_sha256
    assert text.endswith("3 run(s) not compared with their source: no source_sha256 in "
                         "run.json and no git history here")


def test_status_counts_a_comparison_merged_from_several_calls_as_run(tmp_path):
    """The H100's bench-burst took two calls: no run.json, its repeats joined in merged.txt."""
    from vllm_course.reference import status

    item = Item("bench-burst", "bench", "benchmarks/compare_vllm_bench.py", "bench/bench-burst",
                0, "test")
    (tmp_path / "h100-80g/bench/bench-burst").mkdir(parents=True)
    (tmp_path / "h200/bench/bench-burst").mkdir(parents=True)
    (tmp_path / "h100-80g/bench/bench-burst/merged.txt").write_text("merged")
    rows = {r.profile: r.outcome for r in status.standings([item], tmp_path, tmp_path)}
    assert rows == {"h100-80g": "ok: merged.txt joins several calls' repeats",
                    "h200": "pending"}


def test_status_dates_a_run_by_the_commit_that_brought_it_not_a_later_edit(tmp_path):
    """2026-12-06 a commit edited many run.json file lists (per-run PNGs removed); a chapter
    change between the run and that edit must still mark the run. Unreadable run.json files
    are said so, and chapter parts count as covered only where the whole chapter's run holds
    them."""
    import subprocess

    from vllm_course.reference import status

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                        "user.email=t@t", *args], check=True, capture_output=True)

    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters/14_a.ipynb").write_text(_notebook("np.median(x)", "prose"))
    run_json = tmp_path / "reference/h200/chapters/14_a/run.json"
    run_json.parent.mkdir(parents=True)
    run = {"measured": "2026-12-04", "headline": "H200 run of ch14", "checks": ["ok: a"],
           "files": ["runs/latency.png", "run.json"]}
    run_json.write_text(json.dumps(run))
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "the run")
    (tmp_path / "chapters/14_a.ipynb").write_text(_notebook("min(x)", "prose"))
    git("commit", "-qam", "the chapter's check changed")
    run_json.write_text(json.dumps({**run, "files": ["run.json"]}))
    git("commit", "-qam", "the PNGs left the file list")
    item = _item("14_a", 0)
    ref = tmp_path / "reference"
    row = status.standing(item, "h200", ref, tmp_path)
    assert (row.measured, row.outcome, row.changed) == ("2026-12-04", "all 1 checks held", True)
    run_json.write_text(json.dumps({**run, "headline": "a rerun", "files": ["run.json"]}))
    git("commit", "-qam", "a rerun with today's chapter")
    assert status.standing(item, "h200", ref, tmp_path).changed is False

    run_json.write_text("[1, 2]")                             # JSON, but not an object
    assert status.standing(item, "h200", ref, tmp_path).outcome.startswith("unreadable")
    planned = catalog_item("ch14", "chapter", "chapters/14_a.ipynb", "chapters/14_a", "h200",
                           root=ref)                        # the plan does not break on it
    assert planned.estimate_from == "not run yet: the default for a chapter"

    parts = [Item(i, "chapter", "chapters/x.ipynb", f"chapters/{d}", 0, "test") for i, d in (
        ("ch15", "15_q"), ("ch15.fp8", "15_q.fp8"), ("ch18", "18_p"), ("ch18.layouts-a",
                                                                       "18_p.layouts-a"))]
    for dest in ("15_q", "18_p"):
        (ref / "h200/chapters" / dest).mkdir(parents=True)
        (ref / "h200/chapters" / dest / "run.json").write_text(json.dumps(run))
    rows = {r.item: r.outcome for r in status.standings(parts, ref, tmp_path)}
    assert rows["ch15.fp8"] == "covered by ch15"               # the whole ran on one GPU
    assert rows["ch18.layouts-a"] == "pending"                 # it needs two GPUs


def test_status_counts_a_stopped_chapter_covered_once_its_parts_ran_later(tmp_path):
    """h200's ch15 stopped on 2026-12-04; ch15.fp8 and ch15.int4 ran on 2026-12-07. Parts
    that ran before the stopped run, or that are to redo themselves, do not cover it."""
    from vllm_course.reference import status

    items = [Item(i, "chapter", "chapters/x.ipynb", f"chapters/{d}", 0, "test") for i, d in (
        ("ch15", "15_q"), ("ch15.fp8", "15_q.fp8"), ("ch15.int4", "15_q.int4"))]

    def write(dest, measured, failed=None):
        (tmp_path / "h200/chapters" / dest).mkdir(parents=True, exist_ok=True)
        (tmp_path / "h200/chapters" / dest / "run.json").write_text(json.dumps(
            {"measured": measured, "headline": dest, "checks": ["ok: a"], "failed": failed}))

    def rows():
        return {r.item: r for r in status.standings(items, tmp_path, tmp_path)}

    write("15_q", "2026-12-04", "CellTimeoutError: the call's time ran out")
    write("15_q.fp8", "2026-12-07")
    write("15_q.int4", "2026-12-03")                           # older than the stopped run
    assert rows()["ch15"].outcome.startswith("stopped") and rows()["ch15"].redo
    write("15_q.int4", "2026-12-07", "CheckFailed: b")         # later, but stopped itself
    assert rows()["ch15"].redo
    write("15_q.int4", "2026-12-07")
    whole = rows()["ch15"]
    assert (whole.measured, whole.outcome, whole.redo) == (
        "", "covered by ch15.fp8, ch15.int4; its own run of 2026-12-04 superseded", False)
    assert "to redo: none; pending: none" in status.describe(list(rows().values()))


@pytest.mark.parametrize(("run", "estimate", "servers"), [
    ({"wall_s": 120, "servers": ["a"]}, 120, ("a",)),
    ({"wall_s": float("inf"), "servers": 5}, DEFAULT_S["chapter"], ()),
    ({"wall_s": float("nan"), "servers": None}, DEFAULT_S["chapter"], ()),
    ({"wall_s": -5, "servers": [5]}, DEFAULT_S["chapter"], ()),
    ({"wall_s": 10 ** 400, "servers": [["x"]]}, DEFAULT_S["chapter"], ()),
    ({"wall_s": True, "measured": None}, DEFAULT_S["chapter"], ()),
])
def test_a_damaged_run_json_plans_with_the_default_instead_of_crashing(tmp_path, run, estimate,
                                                                       servers):
    folder = tmp_path / "h200/chapters/01_a"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(run))       # Infinity, NaN: as Python writes
    item = catalog_item("ch01", "chapter", "chapters/01_a.ipynb", "chapters/01_a", "h200",
                        root=tmp_path)
    assert (item.estimate_s, item.servers) == (estimate, servers)
    assert "None" not in item.estimate_from


def test_status_lists_an_unreadable_run_json_to_redo_and_ignores_stray_folders(tmp_path):
    from vllm_course.reference import status

    item = Item("ch01", "chapter", "chapters/01_a.ipynb", "chapters/01_a", 0, "test")
    (tmp_path / "h200/chapters/01_a").mkdir(parents=True)
    (tmp_path / "h200/chapters/01_a/run.json").write_text("[1, 2]")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "junk").mkdir()
    assert status.profiles(tmp_path) == ["h200"]
    text = status.describe(status.standings([item], tmp_path, tmp_path))
    assert "h200: 1 of 1 run or covered; to redo: ch01; pending: none" in text
    assert "junk" not in text and "checkpoints" not in text


@pytest.mark.parametrize("profile", [None, "h200"])
def test_reference_run_refuses_a_machine_without_the_gpu_before_planning(monkeypatch, profile):
    """It printed the plan on a CPU machine and stopped only at --pack (without --pack it would
    have started the call)."""
    from click.testing import CliRunner

    from vllm_course.cli import main
    from vllm_course.env import machine

    if machine.gpu_info():
        pytest.skip("this machine has an NVIDIA GPU: the refusal is for machines without one")
    if profile:
        monkeypatch.setenv("PROFILE", profile)
    else:
        monkeypatch.delenv("PROFILE", raising=False)
    monkeypatch.setattr(runmod, "run_call", lambda *a, **k: pytest.fail("a call started"))
    result = CliRunner().invoke(main, ["reference", "run", "ch01", "--call", "1"])
    assert result.exit_code == 2
    assert "plan for profile" not in result.output
    assert ("reference runs are GPU runs" if profile is None else "nvidia-smi lists none") \
        in result.output


def test_unpack_refuses_member_names_that_are_not_plain_paths(tmp_path):
    """``chapters/01_welcome//tmp/x`` passed the ``..`` check and ``stage / dest / '/tmp/x'``
    wrote to /tmp/x."""
    victim = tmp_path / "victim.txt"
    for odd in (f"chapters/01_welcome/{victim}",            # .../01_welcome//tmp/...
                "chapters/01_welcome/./x", "chapters/01_welcome/a\nb"):
        parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                         {"chapters/01_welcome/run.json": RUN, odd: b"evil"}, name="odd")
        with pytest.raises(ValueError, match="not a plain file inside the pack"):
            runmod.unpack(parts, "h200", tmp_path / "reference")
        assert not victim.exists() and not (tmp_path / "reference").exists()


def test_unpack_refuses_two_calls_joined_trailing_bytes_and_a_damaged_part(tmp_path):
    one = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                   {"chapters/01_welcome/run.json": RUN}, name="reference-call-1")[0]
    two = _pack_of(tmp_path, {"ch03": "chapters/03_kv_cache"},
                   {"chapters/03_kv_cache/run.json": RUN}, name="reference-call-2")[0]
    with pytest.raises(ValueError, match="more than one pack"):
        runmod.unpack([one, two], "h200", tmp_path / "reference")
    stale = tmp_path / "reference-call-1.tgz.01"
    stale.write_bytes(os.urandom(5000))
    with pytest.raises(ValueError, match="do not join into a pack"):
        runmod.unpack([one, stale], "h200", tmp_path / "reference")
    big = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                   {"chapters/01_welcome/run.json": RUN,
                    "chapters/01_welcome/noise": os.urandom(20000)}, name="big")[0]
    data = bytearray(big.read_bytes())
    data[5000:5100] = bytes(100)                       # damaged in transfer
    big.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="do not join into a pack"):
        runmod.unpack([big], "h200", tmp_path / "reference")
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    (copy / one.name).write_bytes(one.read_bytes())
    with pytest.raises(ValueError, match="given twice"):
        runmod.unpack([one, copy / one.name], "h200", tmp_path / "reference")
    assert not (tmp_path / "reference").exists()


def test_unpack_joins_parts_by_name_wherever_they_lie_and_caps_the_unpacked_size(tmp_path,
                                                                                monkeypatch):
    whole = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": RUN,
                      "chapters/01_welcome/zeros": bytes(50000)})[0].read_bytes()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    third = len(whole) // 3
    parts = [tmp_path / "b/c.tgz.00", tmp_path / "a/c.tgz.01", tmp_path / "a/c.tgz.02"]
    for part, piece in zip(parts, (whole[:third], whole[third:2 * third], whole[2 * third:]),
                           strict=True):
        part.write_bytes(piece)
    assert runmod.unpack(parts, "h200", tmp_path / "reference") == ["h200/chapters/01_welcome"]
    monkeypatch.setattr(runmod, "MAX_UNPACKED_BYTES", 40000)      # the zeros unpack to 50,000
    with pytest.raises(ValueError, match="hold more than"):
        runmod.unpack(parts, "h200", tmp_path / "reference2")


def test_unpack_refuses_duplicates_a_cpu_profile_and_an_unreadable_run_json(tmp_path):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in ((runmod.MANIFEST, b'{"ch01": "chapters/01_welcome"}'),
                           ("chapters/01_welcome/run.json", RUN),
                           ("chapters/01_welcome/run.json", b'{"profile": "h100-80g"}')):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    twice = tmp_path / "twice.tgz.00"
    twice.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="comes twice"):
        runmod.unpack([twice], root=tmp_path / "reference")
    cpu = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                   {"chapters/01_welcome/run.json": b'{"profile": "cpu-tiny"}'}, name="cpu")
    with pytest.raises(ValueError, match="not one of the course's GPU profiles"):
        runmod.unpack(cpu, root=tmp_path / "reference")
    for bad in (b"not json", b"[1]", b"[" * 100000):
        garbled = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                           {"chapters/01_welcome/run.json": bad}, name="garbled")
        with pytest.raises(ValueError, match="not a JSON object"):
            runmod.unpack(garbled, "h200", tmp_path / "reference")
    assert not (tmp_path / "reference").exists()


def test_unpack_puts_everything_back_when_a_folder_cannot_be_replaced(tmp_path, monkeypatch):
    """The first item was replaced and the second half deleted when the second could not be
    (a file in its place, an undeletable file, a read-only parent)."""
    root = tmp_path / "reference"
    for dest in ("chapters/01_welcome", "chapters/02_how_vllm_serves"):
        (root / "h200" / dest / "runs").mkdir(parents=True)
        (root / "h200" / dest / "run.json").write_text("old")
        (root / "h200" / dest / "runs/keep.json").write_text("old")
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome",
                                "ch02": "chapters/02_how_vllm_serves"},
                     {"chapters/01_welcome/run.json": RUN,
                      "chapters/02_how_vllm_serves/run.json": RUN})
    real = os.replace

    def refuse_the_second_item(src, dst):
        if str(src).endswith("new/chapters/02_how_vllm_serves"):
            raise PermissionError(1, "Operation not permitted", str(dst))
        return real(src, dst)

    monkeypatch.setattr(runmod.os, "replace", refuse_the_second_item)
    with pytest.raises(PermissionError):
        runmod.unpack(parts, "h200", root)
    for dest in ("chapters/01_welcome", "chapters/02_how_vllm_serves"):
        assert (root / "h200" / dest / "run.json").read_text() == "old"
        assert (root / "h200" / dest / "runs/keep.json").read_text() == "old"
    assert sorted(p.name for p in root.iterdir()) == ["h200"]


def test_unpack_refuses_a_symlink_above_the_item_folder(tmp_path):
    root = tmp_path / "reference"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "01_welcome").mkdir(parents=True)
    (elsewhere / "01_welcome/keep").write_text("keep")
    (root / "h200").mkdir(parents=True)
    (root / "h200/chapters").symlink_to(elsewhere)
    parts = _pack_of(tmp_path, {"ch01": "chapters/01_welcome"},
                     {"chapters/01_welcome/run.json": RUN})
    with pytest.raises(ValueError, match="chapters is a symbolic link"):
        runmod.unpack(parts, "h200", root)
    assert (elsewhere / "01_welcome/keep").read_text() == "keep"


@pytest.mark.parametrize(("kept", "planned"), [
    ({"runs": [1], "runs_wanted": 3}, "resumes 1 of 3 runs kept"),
    ({"runs": [1], "runs_wanted": float("inf")}, "its last run"),
    ({"runs": [1], "runs_wanted": 10 ** 30}, "its last run"),
    ({"runs": "abcdef", "runs_wanted": 3}, "its last run"),
])
def test_a_damaged_kept_calibration_is_planned_as_if_nothing_were_kept(tmp_path, kept, planned):
    folder = tmp_path / "h200/labs/lab04"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"wall_s": 300, "runs_made": 1,
                                                 "measured": "2026-12-01\nch99 fake row"}))
    (folder / "calibration.partial.json").write_text(json.dumps(kept))
    item = catalog_item("lab04", "lab", "lab04", "labs/lab04", "h200", root=tmp_path)
    assert item.estimate_from.startswith(planned) and "fake" not in item.estimate_from
    assert 0 < item.estimate_s <= 600


def test_the_claim_a_run_stopped_at_is_read_one_way_for_status_labs_and_chapters():
    """errors.stopped_claim is the one reader of a run.json's ``failed``: the first line without
    the exception name, ``expected: ``/``stopped: `` and a check's bracketed evidence; the same
    claim in `reference status`, a chapter's other-GPU line and lab01's set-up line."""
    from vllm_course.errors import stopped_claim
    from vllm_course.reference import status

    assert stopped_claim("CheckFailed: expected: TTFT falls  [1.00 over 53]\nTraceback") == \
        "TTFT falls"
    assert stopped_claim("stopped: CellTimeoutError (the call's time ran out)") == \
        "CellTimeoutError (the call's time ran out)"
    assert stopped_claim("one check failed: 'x' compares [a] to b") == \
        "one check failed: 'x' compares [a] to b"             # brackets without two spaces kept
    assert stopped_claim(None) == stopped_claim("") == ""
    # every committed run that stopped: status shows the claim (cut at 90), never the evidence
    stopped = [json.loads(p.read_text()) for p in (REPO_ROOT / "reference").rglob("run.json")]
    stopped = [run for run in stopped if run.get("failed")]
    assert stopped
    for run in stopped:
        claim = stopped_claim(run["failed"])
        assert claim and "CheckFailed" not in claim and "  [" not in claim and "\n" not in claim
        shown = status._outcome(run).removeprefix("stopped: ")
        assert shown == claim or (len(shown) == 90 and claim.startswith(shown[:-1]))


def test_status_says_which_labs_grade_a_gpu_on_measured_targets():
    """lab03's calibration files on h200 say "valid: False" (the calibrate command's verdict
    when it ran), yet its h200 targets are measured, by the course's rule, from those runs: the
    status says which labs' targets are measured, from the lab's own spec, and nothing for a
    chapter."""
    from click.testing import CliRunner

    from vllm_course.cli import main

    result = CliRunner().invoke(main, ["reference", "status", "lab03", "lab04"])
    assert result.exit_code == 0, result.output
    assert "lab03-job512.json (valid: False)" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("measured lab targets")
    assert "h200: lab03 lab04" in last and "h100-80g: lab04;" in last
    result = CliRunner().invoke(main, ["reference", "status", "ch01"])
    assert result.exit_code == 0 and "measured lab targets" not in result.output

"""Every bad input a learner is likely to type gets one clear line and exit status 2, and nothing
is started: each row below is a command line (and the files it reads) with the words its error
must contain. vLLM's flag kinds are a subset of vLLM 0.32.0's as flag_kinds() probed them
(data/vllm_0.32.0_flag_kinds.json); tests/integration/test_flag_values.py checks the recording
against the installed parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_course import server
from vllm_course.cli import main
from vllm_course.server import ServerError, check_values, flags

FLAGS = ["--dtype", "--enforce-eager", "--no-enforce-eager", "--gpu-memory-utilization",
         "--kv-cache-memory-bytes", "--max-model-len", "--max-num-batched-tokens",
         "--max-num-seqs", "--max-num-active-seqs", "--seed"]
KINDS = json.loads((Path(__file__).parent / "data" / "vllm_0.32.0_flag_kinds.json").read_text())

RUN = "workload: {num_requests: 4, input_len: 16, output_len: 4}\nload: {}\n"


def _server(args: str) -> str:
    return f"server:\n  args: {{{args}}}\n{RUN}"


FILES = {
    "empty.yaml": "",
    "comment.yaml": "# nothing here\n",
    "noworkload.yaml": "name: x\n",
    "noload.yaml": "workload: {num_requests: 4}\n",
    "badint.yaml": "workload: {num_requests: abc}\nload: {}\n",
    "unknown.yaml": "serverr: {}\n" + RUN,
    "tab.yaml": "workload:\n\tnum_requests: 4\nload: {}\n",
    "list.yaml": "- a\n- b\n",
    "slash.yaml": "name: a/b\n" + RUN,
    "negrate.yaml": "workload: {}\nload: {rate_rps: -1}\n",
    "seqs-abc.yaml": _server("max-num-seqs: abc"),
    "seqs-0.yaml": _server("max-num-seqs: 0"),
    "seqs-float.yaml": _server("max-num-seqs: 2.5"),
    "gmu.yaml": _server("gpu-memory-utilization: 1.5"),
    "eager.yaml": _server("enforce-eager: maybe"),
    "typo.yaml": _server("max-num-seq: 4"),
    "dtype.yaml": _server("dtype: float33"),
    "mml.yaml": _server("max-model-len: lots"),
    "toolong.yaml": "workload: {num_requests: 2, input_len: 5000, output_len: 4}\nload: {}\n",
    "nodata.yaml": "workload: {kind: file, path: DIR/nope.jsonl}\nload: {}\n",
    "brokendata.yaml": "workload: {kind: file, path: DIR/broken.jsonl}\nload: {}\n",
    "broken.jsonl": '{"prompt": "hi", "output_len": 4}\n{"prompt": "hi", "output_len": \n',
    "chat.jsonl": '{"messages": [{"role": "user", "content": "hi"}], "output_len": 4}\n',
    "host.yaml": "server: {host: 0.0.0.0}\n" + RUN,
    "timeout.yaml": "server: {startup_timeout_s: -5}\n" + RUN,
    "timeout-nan.yaml": "server: {startup_timeout_s: .nan}\n" + RUN,
    "twice.yaml": "server: {}\nserver: {args: {max-num-seqs: 2}}\n" + RUN,
    "infts.jsonl": '{"prompt": "hi", "output_len": 4}\n'
                   '{"prompt": "hi", "output_len": 4, "timestamp_s": Infinity}\n',
    "infts.yaml": "workload: {kind: file, path: DIR/infts.jsonl}\nload: {}\n",
    "spec.yaml": "model: tiny-mistral\n",
    "sweep-unknown.yaml": "hello: 1\n",
    "sweep-value.yaml": ("name: s\nservers:\n  a: {args: {max-num-seqs: abc}}\n"
                         "max_concurrency: [1]\n" + RUN),
    "compare-typo.yaml": ("name: c\nservers:\n  a: {args: {max-num-seq: 2}}\n  b: {}\n" + RUN),
}

# (command line, words the error must contain); DIR is the folder holding FILES
CASES = [
    ("run --config DIR/missing.yaml", "does not exist"),
    ("run --config DIR", "is a directory"),
    ("run --config DIR/empty.yaml", "the file is empty"),
    ("run --config DIR/comment.yaml", "the file is empty"),
    ("run --config DIR/noworkload.yaml", "no workload and no load section"),
    ("run --config DIR/noload.yaml", "no load section"),
    ("run --config DIR/badint.yaml", "num_requests: Input should be a valid integer"),
    ("run --config DIR/unknown.yaml", "serverr: unknown field"),
    ("run --config DIR/tab.yaml", "not valid YAML at line 2, column 1"),
    ("run --config DIR/list.yaml", "expected a mapping at the top level, got list"),
    ("run --config DIR/binary.yaml", "not a text file"),
    ("run --config DIR/slash.yaml", "name 'a/b' must be a plain folder name"),
    ("run --config DIR/negrate.yaml", "load.rate_rps: Input should be greater than 0 (got -1)"),
    ("run --config DIR/seqs-abc.yaml", "--max-num-seqs must be an integer, not 'abc'"),
    ("run --config DIR/seqs-0.yaml", "--max-num-seqs must be at least 1, not 0"),
    ("run --config DIR/seqs-float.yaml", "--max-num-seqs must be an integer, not 2.5"),
    ("run --config DIR/gmu.yaml", "--gpu-memory-utilization must be a fraction in (0, 1]"),
    ("run --config DIR/eager.yaml", "--enforce-eager must be true or false"),
    ("run --config DIR/typo.yaml", "no flag --max-num-seq; did you mean --max-num-seqs"),
    ("run --config DIR/dtype.yaml", "--dtype must be one of auto, bfloat16"),
    ("run --config DIR/mml.yaml", "--max-model-len must be an integer, a size such as 2048"),
    ("run --config DIR/toolong.yaml", "need more than the server's max_model_len of 4096"),
    ("run --config DIR/nodata.yaml", "nope.jsonl: No such file or directory"),
    ("run --config DIR/brokendata.yaml", "broken.jsonl:2: not valid JSON"),
    ("run --config DIR/noworkload.yaml --results /proc/forbidden", "no workload"),
    ("run --config DIR/seqs-abc.yaml --results /proc/forbidden", "--max-num-seqs"),
    ("demo --num-requests 0", "0 is not in the range x>=1"),
    ("demo --results /proc/forbidden", "--results /proc/forbidden: cannot write there"),
    ("workload synth --num-requests 0 --input-len 8 --output-len 4 -o DIR/x.jsonl",
     "num_requests: Input should be greater than 0 (got 0)"),
    ("workload synth --num-requests 2 --input-len abc --output-len 4 -o DIR/x.jsonl",
     "'abc' is not a valid integer"),
    ("workload synth --num-requests 2 --input-len 8 --output-len 4 --input-len-range 2 "
     "-o DIR/x.jsonl", "input_len_range: Input should be less than 1 (got 2.0)"),
    ("workload synth --num-requests 2 --input-len 8 --output-len 4 --endpoint grpc "
     "-o DIR/x.jsonl", "'grpc' is not one of 'completions', 'chat'"),
    ("workload synth --num-requests 2 --input-len 8 --output-len 4 -o DIR/no/such/dir/x.jsonl",
     "No such file or directory"),
    ("workload describe DIR/broken.jsonl", "broken.jsonl:2: not valid JSON"),
    ("workload describe DIR/binary.yaml", "binary.yaml:1: not UTF-8 text (byte 1 of the line)"),
    ("workload describe DIR/badbyte.jsonl", "badbyte.jsonl:2: not UTF-8 text (byte 3 of"),
    ("workload describe DIR/infts.jsonl", "infts.jsonl:2: 'timestamp_s' must be a finite number"),
    ("run --config DIR/infts.yaml", "infts.jsonl:2: 'timestamp_s' must be a finite number"),
    ("run --config DIR/host.yaml", "host '0.0.0.0': a course server binds an IPv4 loopback address"),
    ("run --config DIR/timeout.yaml", "startup_timeout_s: Input should be greater than 0"),
    ("run --config DIR/timeout-nan.yaml", "startup_timeout_s: Input should be a finite number"),
    ("run --config DIR/twice.yaml", "the key 'server' is given twice in one mapping"),
    ("workload describe DIR/nope.jsonl", "does not exist"),
    ("workload describe DIR/chat.jsonl --endpoint completions",
     "a prompt of chat messages goes to the chat endpoint"),
    ("workload generate --spec DIR/spec.yaml -o DIR/y.jsonl",
     "num_requests: Field required; populations: Field required"),
    ("workload generate --spec DIR/empty.yaml -o DIR/y.jsonl", "the file is empty"),
    ("diagnose DIR", "has no summary.json: pass a run folder"),
    ("diagnose DIR/empty.yaml", "is a file"),
    ("sweep --config DIR/empty.yaml --plan", "the file is empty"),
    ("sweep --config DIR/sweep-unknown.yaml --plan", "servers: Field required; hello: unknown"),
    ("sweep --config DIR/sweep-value.yaml --plan", "--max-num-seqs must be an integer"),
    ("slo --config DIR/sweep-unknown.yaml", "hello: unknown field"),
    ("compare --config DIR/compare-typo.yaml", "no flag --max-num-seq"),
    ("servers stop", "give server pids or --all"),
    ("servers stop 1", "pid 1: not a running vLLM server started by the course"),
    ("servers stop abc", "'abc' is not a valid integer"),
    ("sweep --config DIR/empty.yaml --cache-dir", "requires an argument"),
]


@pytest.fixture
def bad_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)   # `--results` defaults to ./results
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PROFILE", raising=False)
    monkeypatch.setattr(flags, "known_flags", lambda: FLAGS)
    monkeypatch.setattr(flags, "flag_kinds", lambda: KINDS)

    def no_start(*args, **kwargs):
        raise AssertionError("a bad input must not start a server")

    monkeypatch.setattr(server.VLLMServer, "start", no_start)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text.replace("DIR", str(tmp_path)))
    (tmp_path / "binary.yaml").write_bytes(bytes(range(128, 256)) * 3)
    (tmp_path / "badbyte.jsonl").write_bytes(b'{"prompt": "hi", "output_len": 4}\n'
                                            b'{"\xff": 1}\n')
    return tmp_path


@pytest.mark.parametrize(("line", "says"), CASES, ids=[c[0].replace("DIR/", "") for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_started(bad_dir: Path, line: str,
                                                      says: str) -> None:
    args = line.replace("DIR", str(bad_dir)).split()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    errors = [ln for ln in lines if ln.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert not [ln for ln in lines if ln.startswith(("error: ", "vllm-course: profile"))], \
        "bad input is click's one error line, with no run banner before it"
    assert says in result.output, result.output


def test_unknown_profile_is_one_line(bad_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFILE", "nosuch")
    result = CliRunner().invoke(main, ["run", "--config", str(bad_dir / "toolong.yaml")])
    assert result.exit_code == 2, result.output
    assert "unknown profile 'nosuch'; known profiles: a100-80g, cpu-tiny, gpu" in result.output


def test_debug_shows_the_traceback(bad_dir: Path) -> None:
    result = CliRunner().invoke(main, ["--debug", "workload", "describe",
                                       str(bad_dir / "chat.jsonl"), "--endpoint", "completions"])
    assert result.exit_code == 1
    assert "WorkloadError" in repr(result.exception)


def test_a_chat_file_is_described_on_the_chat_endpoint(bad_dir: Path) -> None:
    result = CliRunner().invoke(main, ["workload", "describe", str(bad_dir / "chat.jsonl"),
                                       "--png", str(bad_dir / "chat.png")])
    assert result.exit_code == 0, result.output
    assert "chat token ids" in result.output


@pytest.mark.parametrize(("args", "ok"), [
    ({"max-num-seqs": 4, "enforce-eager": True, "dtype": "float32"}, True),
    ({"max-model-len": "25.6k", "kv-cache-memory-bytes": "2G"}, True),
    ({"max-model-len": "auto"}, True),
    ({"max-model-len": -1}, True),
    ({"max-model-len": 0}, False),
    ({"kv-cache-memory-bytes": "1.5G"}, False),
    ({"max-num-batched-tokens": "lots"}, False),
    ({"max-model-len": 1024, "gpu-memory-utilization": 0.92, "seed": -1}, True),
    ({"enforce-eager": False}, True),
    ({"max-num-seqs": None}, True),
    ({"unknown-to-kinds": "x"}, True),
    ({"max-num-seqs": True}, False),
    ({"gpu-memory-utilization": 0}, False),
    ({"gpu-memory-utilization": "most"}, False),
    ({"max-num-batched-tokens": -5}, False),
    ({"dtype": "FLOAT32"}, False),
    ({"quantization": "fp8", "dtype": "float32"}, False),
    ({"quantization": "fp8", "dtype": "bfloat16"}, True),
    ({"quantization": "fp8"}, True),
])
def test_check_values(args: dict, ok: bool) -> None:
    if ok:
        check_values(args, KINDS)
    else:
        with pytest.raises(ServerError) as info:
            check_values(args, KINDS)
        assert info.value.cause == "bad_value"
        assert "(nothing was launched)" in str(info.value)


def test_an_interrupted_run_counts_the_requests_that_finished(tmp_path: Path) -> None:
    import time

    from vllm_course.cli.runs import _interrupted_run

    t0 = time.time()
    assert _interrupted_run(tmp_path, "demo", t0) == "no run had started yet (nothing was sent)"
    run = tmp_path / "demo-20261205-081000"
    run.mkdir()
    (run / "requests.jsonl").write_text("")
    assert _interrupted_run(tmp_path, "demo", t0) == f"no request had finished ({run})"
    # two finished, one cancelled in flight, one never sent, and a line cut short
    cancelled = '"error": "cancelled: the run was interrupted"'
    (run / "requests.jsonl").write_text(
        '{"index": 0, "error": null}\n{"index": 1, "error": null}\n'
        f'{{"index": 2, "sent_s": 1.5, {cancelled}}}\n{{"index": 3, "sent_s": null, {cancelled}}}\n'
        '{"index": 4, "err')
    (tmp_path / "other-20261205-081000").mkdir()            # another run's folder: not it
    assert _interrupted_run(tmp_path, "demo", t0) == (
        "2 of 4 requests had finished; the others were cancelled or never sent; every "
        f"request's record is in {run / 'requests.jsonl'}")


def test_diagnose_on_a_results_folder_names_its_runs(tmp_path: Path) -> None:
    import os

    for n, name in enumerate(["demo-20261205-100000", "my-run-20261205-110000"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text("{}")
        os.utime(tmp_path / name, (1_000_000 + n, 1_000_000 + n))
    result = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert result.exit_code == 2
    assert (f"has no summary.json: pass a run folder, e.g. {tmp_path / 'my-run-20261205-110000'}, "
            f"{tmp_path / 'demo-20261205-100000'}") in " ".join(result.output.split())

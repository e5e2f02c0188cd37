"""``vllm_course.config``: run files (YAML/JSON) into frozen, strict pydantic models."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from vllm_course.config import (
    SLO,
    FileWorkload,
    LoadSpec,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
)


def _write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


SYNTHETIC_YAML = """\
name: chat-c8
server:
  model: tiny-mistral
  args:
    max_num_seqs: 8
    enable-prefix-caching: false
    enforce-eager: true
workload:
  kind: synthetic
  num_requests: 40
  input_len: 128
  output_len: 32
  input_len_range: 0.25
  seed: 3
load:
  endpoint: chat
  rate_rps: .inf
  burstiness: 0.5
  max_concurrency: 8
  num_warmups: 2
  seed: 9
  timeout_s: 30
slo:
  ttft_ms: 250
  tpot_ms: 25
"""


def test_synthetic_run_file(tmp_path: Path) -> None:
    cfg = RunConfig.from_file(_write(tmp_path, SYNTHETIC_YAML))
    assert cfg.name == "chat-c8"
    assert cfg.server == ServerConfig(
        model="tiny-mistral",
        args={"enable-prefix-caching": False, "enforce-eager": True, "max-num-seqs": 8},
    )
    assert cfg.server.argv() == [
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--max-num-seqs",
        "8",
    ]
    assert cfg.workload == SyntheticWorkload(
        num_requests=40,
        input_len=128,
        output_len=32,
        input_len_range=0.25,
        output_len_range=0.0,
        seed=3,
    )
    assert cfg.load.endpoint == "chat"
    assert math.isinf(cfg.load.rate_rps) and cfg.load.rate_rps > 0
    assert cfg.load.burstiness == 0.5
    assert cfg.load.max_concurrency == 8
    assert cfg.load.num_warmups == 2
    assert cfg.load.seed == 9
    assert cfg.load.timeout_s == 30.0
    assert cfg.slo == SLO(ttft_ms=250, tpot_ms=25, e2el_ms=None)


def test_file_workload_run_file(tmp_path: Path) -> None:
    text = """\
name: from-file
workload:
  kind: file
  path: datasets/demo.jsonl
  num_requests: 10
load:
  rate_rps: 4.5
"""
    cfg = RunConfig.from_file(_write(tmp_path, text))
    assert isinstance(cfg.workload, FileWorkload)
    assert cfg.workload.path == Path("datasets/demo.jsonl")
    assert cfg.workload.num_requests == 10
    assert cfg.load.rate_rps == 4.5
    assert cfg.load.burstiness == 1.0
    assert cfg.load.endpoint == "completions"
    assert cfg.slo is None
    assert cfg.server == ServerConfig()


def test_an_empty_file_is_an_error_not_a_default_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the file is empty"):
        RunConfig.from_file(_write(tmp_path, ""))
    with pytest.raises(ValueError, match="the file is empty"):
        RunConfig.from_file(_write(tmp_path, "# only a comment\n"))


@pytest.mark.parametrize(("text", "missing"), [
    ("name: x\n", "no workload and no load section"),
    ("workload:\n  num_requests: 5\n", "no load section"),
    ("load:\n  rate_rps: 2\n", "no workload section"),
])
def test_a_run_file_needs_workload_and_load(tmp_path: Path, text: str, missing: str) -> None:
    with pytest.raises(ValueError, match=missing):
        RunConfig.from_file(_write(tmp_path, text))


def test_defaults_of_a_run_config_in_code() -> None:
    cfg = RunConfig()
    assert cfg.name == "run"
    assert cfg.workload == SyntheticWorkload()
    assert cfg.workload.num_requests == 200 and cfg.workload.input_len == 256
    assert math.isinf(cfg.load.rate_rps)
    assert cfg.load.max_concurrency is None
    assert cfg.server.model == "tiny-mistral"


def test_json_run_file(tmp_path: Path) -> None:
    data = {"name": "j", "workload": {}, "load": {"rate_rps": 2, "max_concurrency": 1}}
    cfg = RunConfig.from_file(_write(tmp_path, json.dumps(data), "run.json"))
    assert cfg.name == "j" and cfg.load.rate_rps == 2.0 and cfg.load.max_concurrency == 1


def test_round_trip_through_json() -> None:
    cfg = RunConfig(
        name="x",
        workload=FileWorkload(path=Path("a.jsonl")),
        load=LoadSpec(rate_rps=3.0, max_concurrency=2),
        slo=SLO(e2el_ms=2000),
    )
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg


def _with_sections(text: str) -> str:
    """``text`` with an empty ``workload:`` and ``load:`` added where it has none (a run file
    needs both)."""
    for key in ("workload", "load"):
        if not text.startswith(f"{key}:") and f"\n{key}:" not in text:
            text += f"{key}: {{}}\n"
    return text


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("load:\n  max_concurency: 4\n", "max_concurency"),
        ("server:\n  modle: tiny-mistral\n", "modle"),
        ("workload:\n  kind: synthetic\n  num_request: 4\n", "num_request"),
        ("slo:\n  ttft: 100\n", "ttft"),
        ("nmae: x\n", "nmae"),
    ],
)
def test_unknown_field_error_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        RunConfig.from_file(_write(tmp_path, _with_sections(text)))
    msg = str(info.value)
    assert field in msg
    assert "Extra inputs are not permitted" in msg
    errors = info.value.errors()
    assert len(errors) == 1 and errors[0]["loc"][-1] == field


@pytest.mark.parametrize(
    ("text", "loc"),
    [
        ("load:\n  rate_rps: 0\n", ("load", "rate_rps")),
        ("load:\n  burstiness: -1\n", ("load", "burstiness")),
        ("load:\n  max_concurrency: 0\n", ("load", "max_concurrency")),
        ("load:\n  endpoint: embeddings\n", ("load", "endpoint")),
        (
            "workload:\n  kind: synthetic\n  input_len_range: 1.0\n",
            ("workload", "synthetic", "input_len_range"),
        ),
        (
            "workload:\n  kind: synthetic\n  output_len: 0\n",
            ("workload", "synthetic", "output_len"),
        ),
        ("workload:\n  kind: replay\n", ("workload",)),
        ("workload:\n  kind: trace\n", ("workload", "trace", "path")),
        ("slo:\n  ttft_ms: 0\n", ("slo", "ttft_ms")),
    ],
)
def test_bad_values_are_rejected(tmp_path: Path, text: str, loc: tuple) -> None:
    with pytest.raises(ValidationError) as info:
        RunConfig.from_file(_write(tmp_path, _with_sections(text)))
    assert info.value.errors()[0]["loc"] == loc


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "", "back\\slash"])
def test_bad_name_rejected(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValidationError, match="must be a plain folder name"):
        RunConfig.from_file(_write(tmp_path, json.dumps({"name": name, "workload": {},
                                                         "load": {}}), "run.json"))


@pytest.mark.parametrize("name", ["run", "chat-c8_v2", "a.b"])
def test_good_names(name: str) -> None:
    assert RunConfig(name=name).name == name


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "- a\n- b\n")
    with pytest.raises(ValueError, match="expected a mapping at the top level, got list"):
        RunConfig.from_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RunConfig.from_file(tmp_path / "nope.yaml")


def test_models_are_frozen() -> None:
    cfg = RunConfig()
    with pytest.raises(ValidationError):
        cfg.name = "other"  # type: ignore[misc]


def test_workload_kind_defaults_to_synthetic(tmp_path: Path) -> None:
    cfg = RunConfig.from_file(_write(tmp_path, "workload:\n  num_requests: 5\nload: {}\n"))
    assert cfg.workload == SyntheticWorkload(num_requests=5)


def test_constant_rate_load_round_trips_through_json():
    # JSON has no infinity: rate_rps=inf and burstiness=inf (a constant rate) are written as null
    from vllm_course.config import LoadSpec

    load = LoadSpec(rate_rps=10.0, burstiness=float("inf"))
    back = LoadSpec.model_validate_json(load.model_dump_json())
    assert back == load and back.burstiness == float("inf")

"""Committed datasets are byte-reproducible from the commands in their data cards."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.workload import read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def _card_command(card: Path) -> list[str]:
    text = card.read_text()
    block = re.search(r"```\n(.*?)\n```", text, re.S).group(1)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0].endswith("vllm-course")
    return argv[1:]


def test_demo_dataset_regenerates_byte_for_byte(tmp_path):
    card = ROOT / "datasets" / "demo.md"
    argv = _card_command(card)
    out = tmp_path / "demo.jsonl"
    argv[argv.index("-o") + 1] = str(out)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    committed = (ROOT / "datasets" / "demo.jsonl").read_bytes()
    assert out.read_bytes() == committed
    digest = hashlib.sha256(committed).hexdigest()
    assert digest in card.read_text()


def test_demo_dataset_matches_its_card():
    requests = read_jsonl(ROOT / "datasets" / "demo.jsonl")
    assert len(requests) == 240
    assert sum(r.prompt_len for r in requests) == 63_023
    assert sum(r.output_len for r in requests) == 15_598
    assert min(r.prompt_len for r in requests) >= 128 and max(r.prompt_len for r in requests) <= 384

"""Committed datasets are byte-reproducible from the commands in their data cards."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from vllm_course.cli import main
from vllm_course.workload import read_jsonl

ROOT = Path(__file__).resolve().parents[3]


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


# Generated datasets: every card's commands regenerate its files (CPU size: the committed file;
# GPU size: the sha256 in the card, as GPU sizes are not committed).

SPECS = sorted(p.stem for p in (ROOT / "datasets" / "specs").glob("*.yaml"))


def _generate_commands(card: Path) -> dict[str, list[str]]:
    """Output file name -> `vllm-course` arguments, for each generate command in the card."""
    commands = {}
    for block in re.findall(r"```\n(.*?)\n```", card.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line)
            if len(argv) > 2 and argv[0].endswith("vllm-course") and argv[1:3] == [
                "workload", "generate"
            ]:
                commands[Path(argv[argv.index("-o") + 1]).name] = argv[1:]
    return commands


def _card_files(card: Path) -> dict[str, tuple[int, str]]:
    """File name -> (requests, sha256) from the card's file table."""
    rows = re.findall(r"^\| `([\w.-]+\.jsonl)` \|[^|\n]*\| ([\d,]+) \| `([0-9a-f]{64})` \|$",
                      card.read_text(), re.M)
    return {name: (int(count.replace(",", "")), sha) for name, count, sha in rows}


def test_every_spec_has_a_card_a_plot_and_a_readme_row():
    assert set(SPECS) >= {"chat", "code-completion", "long-doc", "mixed", "offline-batch"}
    readme = (ROOT / "datasets" / "README.md").read_text()
    for name in SPECS:
        card = ROOT / "datasets" / f"{name}.md"
        assert card.exists(), f"{name}: no data card"
        assert set(_generate_commands(card)) == {f"{name}-cpu.jsonl", f"{name}-gpu.jsonl"}
        assert set(_card_files(card)) == {f"{name}-cpu.jsonl", f"{name}-gpu.jsonl"}
        assert "Published statistics it was fitted to" in card.read_text() or name == "mixed"
        png = ROOT / "datasets" / f"{name}-lengths.png"
        assert png.exists() and png.stat().st_size < 60_000
        assert f"[{name}.md]({name}.md)" in readme


@pytest.mark.parametrize("name", SPECS)
def test_committed_cpu_size_fits_a_small_cpu_server(name):
    path = ROOT / "datasets" / f"{name}-cpu.jsonl"
    requests = read_jsonl(path)
    assert 32 <= len(requests) <= 200
    assert all(r.prompt_len + r.output_len <= 4096 for r in requests)
    assert path.stat().st_size < 1_000_000


@pytest.mark.parametrize("size", ["cpu", "gpu"])
@pytest.mark.parametrize("name", SPECS)
def test_card_command_regenerates_byte_for_byte(name, size, tmp_path):
    card = ROOT / "datasets" / f"{name}.md"
    file = f"{name}-{size}.jsonl"
    argv = _generate_commands(card)[file]
    assert argv[argv.index("--size") + 1] == size
    out = tmp_path / file
    argv[argv.index("-o") + 1] = str(out)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    count, sha = _card_files(card)[file]
    assert hashlib.sha256(data).hexdigest() == sha
    assert data.count(b"\n") == count
    if size == "cpu":
        assert data == (ROOT / "datasets" / file).read_bytes()
    else:  # GPU sizes fit --max-model-len 8192
        assert all(r.prompt_len + r.output_len <= 8192 for r in read_jsonl(out))

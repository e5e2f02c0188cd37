"""Numbers and histogram PNG for a dataset's data card (datasets/<name>.md).

    .venv/bin/python scripts/dataset_card.py chat [code-completion ...]

For each name: generates both sizes from datasets/specs/<name>.yaml into a temporary folder (the
committed datasets/<name>-cpu.jsonl must be identical), prints counts, length percentiles, sha256
and the expected prefix-cache hit rate as Markdown, and writes datasets/<name>-lengths.png.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from vllm_course.workload import PromptTokenizer, write_jsonl
from vllm_course.workload.generators import generate, load_spec
from vllm_course.workload.prefix import expected_prefix_hit_rate

ROOT = Path(__file__).resolve().parents[1]
SIZES = ("cpu", "gpu")


def _line(label: str, values: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return (f"{label}: total {values.sum():,}, mean {values.mean():.1f}, P10 "
            f"{np.percentile(values, 10):g}, P50 {p50:g}, P90 {p90:g}, P99 {p99:g}, "
            f"min {values.min()}, max {values.max()}")


def _size_report(name: str, size: str, tok: PromptTokenizer, tmp: Path) -> tuple[str, dict]:
    spec = load_spec(ROOT / "datasets" / "specs" / f"{name}.yaml", size)
    requests = generate(spec, tok)
    path = tmp / f"{name}-{size}.jsonl"
    write_jsonl(requests, path)
    data = path.read_bytes()
    if size == "cpu":
        committed = ROOT / "datasets" / f"{name}-cpu.jsonl"
        if not committed.exists() or committed.read_bytes() != data:
            print(f"note: {committed.name} differs from a fresh generation", file=sys.stderr)
    prompt = np.array([r.prompt_len for r in requests])
    output = np.array([r.output_len for r in requests])
    stats = expected_prefix_hit_rate(requests, tok, spec.endpoint)
    turns = [len([m for m in r.prompt if m[0] == "user"]) for r in requests if r.is_conversation]
    prios: dict = {}
    for r in requests:
        prios[r.priority] = prios.get(r.priority, 0) + 1
    lines = [
        f"**{size.upper()} size** (`{name}-{size}.jsonl`): {len(requests)} requests, "
        f"sha256 `{hashlib.sha256(data).hexdigest()}`, {len(data):,} bytes.",
        "- " + _line("Prompt tokens", prompt),
        "- " + _line("Output tokens", output),
        f"- prompt + output max {int((prompt + output).max())}",
        f"- expected prefix-cache hit rate {stats.hit_rate:.1%} ({stats.cached_tokens:,} of "
        f"{stats.prompt_tokens:,} prompt tokens, 16-token blocks); sharing ratio "
        f"{stats.sharing_ratio:.1%}",
    ]
    if size == "cpu":  # vLLM's CPU backend defaults to --block-size 128
        cpu = expected_prefix_hit_rate(requests, tok, spec.endpoint, block_size=128)
        lines.append(f"- with 128-token blocks: {cpu.hit_rate:.1%} ({cpu.cached_tokens:,} tokens)")
    if turns:
        counts = np.bincount(turns)[1:]
        user = np.mean([len(tok.encode(r.prompt[-1][1])) for r in requests if r.is_conversation])
        by_turn = ", ".join(f"turn {i + 1}: {c}" for i, c in enumerate(counts))
        lines.append(f"- requests by turn: {by_turn}; {counts[0]} conversations, "
                     f"{len(turns) / counts[0]:.2f} turns each; "
                     f"newest user message {user:.1f} tokens on average (its text alone)")
    if set(prios) != {None}:
        lines.append(f"- priorities: {', '.join(f'{k}: {v}' for k, v in sorted(prios.items()))}")
    return "\n".join(lines), {"prompt": prompt, "output": output}


def _png(name: str, arrays: dict[str, dict]) -> Path:
    fig = Figure(figsize=(8, 5), dpi=72, layout="constrained")
    axes = fig.subplots(2, 2)
    for row, size in enumerate(SIZES):
        for col, key in enumerate(("prompt", "output")):
            ax = axes[row][col]
            values = arrays[size][key]
            ax.hist(values, bins=40, color="tab:blue" if key == "prompt" else "tab:orange")
            mean = values.mean()
            ax.axvline(mean, color="black", lw=1, ls="--", label=f"mean {mean:.0f}")
            ax.set_title(f"{name} {size.upper()}: {key} tokens (n={values.size})", fontsize=9)
            ax.set_xlabel("tokens", fontsize=8)
            ax.set_ylabel("requests", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=7)
    out = ROOT / "datasets" / f"{name}-lengths.png"
    fig.savefig(out, dpi=72)
    return out


def main(names: list[str]) -> None:
    tok = PromptTokenizer("tiny-mistral")  # every spec here uses the Mistral v3 tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            arrays = {}
            print(f"## {name}\n")
            for size in SIZES:
                text, arrays[size] = _size_report(name, size, tok, Path(tmp))
                print(text + "\n")
            out = _png(name, arrays)
            print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size:,} bytes)\n")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Request sets: ``workload synth``, ``workload describe``, ``workload generate``."""

from __future__ import annotations

from pathlib import Path

import click

from vllm_course.cli.base import (
    bad_input,
    main,
)


@main.group(name="workload")
def workload_group() -> None:
    """Request sets (JSONL)."""


@workload_group.command("synth")
@click.option("--num-requests", type=int, required=True)
@click.option("--input-len", type=int, required=True, help="Prompt tokens (usage.prompt_tokens).")
@click.option("--output-len", type=int, required=True, help="Output tokens (max_tokens).")
@click.option(
    "--input-len-range",
    type=float,
    default=0.0,
    show_default=True,
    help="Uniform spread: lengths in input_len*(1±range).",
)
@click.option("--output-len-range", type=float, default=0.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    show_default=True,
    help="Prompt lengths are exact for this endpoint.",
)
@click.option(
    "--model",
    default="tiny-mistral",
    show_default=True,
    help="Card or hub id whose tokenizer counts the tokens.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
def workload_synth(endpoint: str, model: str, output: str, **spec_fields) -> None:
    """Generate a seeded synthetic request set (same arguments: same file, byte for byte)."""
    from vllm_course.config import SyntheticWorkload
    from vllm_course.workload import PromptTokenizer, synthesize, write_jsonl

    spec = SyntheticWorkload(**spec_fields)   # the six length/count/seed options, validated
    requests = synthesize(spec, PromptTokenizer(model), endpoint)
    write_jsonl(requests, output)
    click.echo(f"wrote {len(requests)} requests to {output}")


@workload_group.command("describe")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "azure", "mooncake"]),
    default=None,
    help="Force the file format (default: .csv is azure, a JSONL with input_length mooncake).",
)
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default=None,
    help="Count prompt tokens as this endpoint does (JSONL without prompt_len); default: chat "
         "for a file of conversations, else completions.",
)
@click.option(
    "--model",
    default="tiny-mistral",
    show_default=True,
    help="Card or hub id whose tokenizer counts the tokens (JSONL files only).",
)
@click.option(
    "--block-size",
    type=int,
    default=512,
    show_default=True,
    help="Tokens per Mooncake hash id.",
)
@click.option(
    "--png",
    type=click.Path(dir_okay=False),
    default=None,
    help="Histogram PNG to write (default: FILE's name with .png, in the current folder).",
)
def workload_describe(file, fmt, endpoint, model, block_size, png) -> None:
    """Counts, length percentiles, prefix sharing and arrival rate of a request set or trace."""
    from vllm_course.workload import WorkloadError
    from vllm_course.workload.stats import describe_file, save_histogram_png

    try:
        stats = describe_file(
            file, format=fmt, endpoint=endpoint, model=model, block_size=block_size
        )
    except (WorkloadError, ValueError, OSError) as exc:
        raise bad_input(exc, file) from None
    click.echo(stats.report())
    out = Path(png) if png else Path(Path(file).stem + ".png")
    save_histogram_png(stats, out)
    click.echo(f"wrote {out}")


@workload_group.command("generate")
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Generator spec YAML (see datasets/specs/).",
)
@click.option(
    "--size",
    default=None,
    help="Apply the overrides the spec lists under `sizes:` for this size (e.g. cpu, gpu).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
def workload_generate(spec_path: str, size: str | None, output: str) -> None:
    """Generate a request set from a spec; the same arguments give the same file byte for byte."""
    from vllm_course.workload import PromptTokenizer, write_jsonl
    from vllm_course.workload.generators import generate, load_spec

    try:
        spec = load_spec(spec_path, size)
        requests = generate(spec, PromptTokenizer(spec.model))
    except ValueError as exc:  # pydantic's ValidationError and WorkloadError are ValueErrors
        raise bad_input(exc, spec_path) from None
    write_jsonl(requests, output)
    click.echo(f"wrote {len(requests)} requests for the {spec.endpoint} endpoint to {output}")

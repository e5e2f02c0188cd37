"""The ``vllm-course`` command line: thin wrappers over the library's functions."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """vLLM Throughput Tuning: measure and tune real vLLM servers."""


@main.group()
def cards() -> None:
    """Offline model cards (config + tokenizer, dummy weights)."""


@cards.command("build")
def cards_build() -> None:
    """Build every offline model card under the course home."""
    from vllm_course import models

    for name in models.CARDS:
        click.echo(f"card {name}: {models.card_dir(name)}")


@main.command()
@click.option("--short", is_flag=True,
              help="Print one line: ok and the versions, or the first failure.")
def doctor(short: bool) -> None:
    """Show versions, hardware and the profile; exit 1 if the course cannot run here."""
    from vllm_course.doctor import diagnose

    report = diagnose()
    if short:
        click.echo(report.short())
    else:
        width = max(len(label) for label, _ in report.facts)
        for label, value in report.facts:
            click.echo(f"{label:<{width}}  {value}")
        click.echo("")
        for check in report.checks:
            click.echo(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.message}")
        click.echo("")
        click.echo("doctor: all checks passed" if report.ok
                   else f"doctor: {len(report.failures)} check(s) failed; see FAIL above")
    if not report.ok:
        raise SystemExit(1)

"""Commands about this machine: ``cards``, ``doctor`` and ``servers``."""

from __future__ import annotations

import click

from vllm_course.cli.base import (
    BadInput,
    main,
)


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
@click.option(
    "--short", is_flag=True, help="Print one line: ok and the versions, or the first failure."
)
def doctor(short: bool) -> None:
    """Show versions, hardware and the profile; exit 1 if the course cannot run here."""
    from vllm_course.env.doctor import diagnose

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
        click.echo(
            "doctor: all checks passed"
            if report.ok
            else f"doctor: {len(report.failures)} check(s) failed; see FAIL above"
        )
    if not report.ok:
        raise SystemExit(1)


@main.group()
def servers() -> None:
    """vLLM servers started by this course on this machine."""


NONE_RUNNING = "no vLLM servers started by the course are running"


@servers.command("list")
def servers_list() -> None:
    """Show running servers, their owner and port."""
    import time

    from vllm_course.server import registry

    rows = registry.entries()
    if not rows:
        click.echo(NONE_RUNNING)
        return
    for e in rows:
        owner = f"owner {e['owner_pid']}" + ("" if e["owner_alive"] else " (gone)")
        click.echo(
            f"pid {e['pid']}  {e['host']}:{e['port']}  {e['model']}  up "
            f"{time.time() - e['started_at']:.0f} s  {owner}  log {e['log']}"
        )


@servers.command("stop")
@click.argument("pids", nargs=-1, type=int)
@click.option("--all", "stop_all", is_flag=True, help="Stop every listed server.")
def servers_stop(pids: tuple[int, ...], stop_all: bool) -> None:
    """Stop servers by pid (from `servers list`), or all of them with --all."""
    from vllm_course.server import registry

    if not pids and not stop_all:
        raise click.UsageError("give server pids or --all")
    targets = [e["pid"] for e in registry.entries()] if stop_all else list(pids)
    if not targets:
        click.echo(f"{NONE_RUNNING}; nothing to stop")
        return
    missed = []
    for pid in targets:
        if registry.stop(pid):
            click.echo(f"pid {pid}: stopped")
        else:
            missed.append(pid)
    if missed:
        raise BadInput(f"pid {', '.join(map(str, missed))}: not a running vLLM server started by "
                       "the course; nothing was signalled (`vllm-course servers list` shows them)")

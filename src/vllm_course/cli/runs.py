"""One run: ``run --config``, ``demo`` and ``diagnose``."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import click

from vllm_course.cli.base import (
    BadInput,
    bad_input,
    check_server,
    failure,
    main,
    writable,
)
from vllm_course.models import REPO_ROOT


def _execute(config, results_root: str) -> None:
    """Run one experiment with a progress bar, print the report; this process owns the server."""
    from rich.console import Console

    from vllm_course.env import machine
    from vllm_course.experiment import preflight
    from vllm_course.server import ServerError, ServerPool
    from vllm_course.workload import WorkloadError

    console = Console(stderr=True)
    profile = machine.current_profile()
    # the workload first: a missing or malformed file, or a request longer than the server's
    # --max-model-len, is bad input (one line, before the banner and before a server is started
    # for nothing)
    requests = preflight(config, profile.server_args)
    pool = ServerPool(max_live=1, profile_args=profile.server_args)
    console.print(
        f"[bold]vllm-course[/]: profile {profile.name} ({profile.description}); "
        f"vLLM {machine.vllm_version()} ({machine.vllm_build()} build)"
    )
    t0 = time.time()
    try:
        with pool:
            _start_server(console, pool, config.server)
            result = asyncio.run(_run_with_bar(console, config, results_root, pool, requests))
    except (ServerError, WorkloadError, FileNotFoundError) as exc:
        _fail(console, *failure(exc))
    except KeyboardInterrupt:
        where = _interrupted_run(results_root, config.name, t0)
        console.print(f"interrupted: the server was stopped; {where}")
        raise SystemExit(130) from None
    _report(console, result)


def _interrupted_run(results_root: str | Path, name: str, since: float) -> str:
    """Where an interrupted run's finished requests are: the newest ``<name>-<time>`` folder
    under ``results_root`` made since ``since`` (``time.time()``), in words."""
    folders = [p for p in Path(results_root).glob(f"{name}-*")
               if p.is_dir() and p.stat().st_mtime >= since - 1]
    if not folders:
        return "no run had started yet (nothing was sent)"
    run = max(folders, key=lambda p: p.stat().st_mtime)
    done = run / "requests.jsonl"
    records = []
    for line in done.read_text().splitlines() if done.is_file() else []:
        try:
            records.append(json.loads(line))
        except ValueError:      # a line cut short by the interrupt
            continue
    # the requests still in flight or not yet sent are written too, with the error
    # "cancelled: the run was interrupted"
    finished = sum(1 for r in records if isinstance(r, dict) and not r.get("error"))
    if not records:
        return f"no request had finished ({run})"
    return (f"{finished} of {len(records)} requests had finished; the others were cancelled "
            f"or never sent; every request's record is in {done}")


def _start_server(console, pool, server_config) -> None:
    """Start the run's server outside the event loop, so Ctrl-C stops a start at once; the run
    then reuses it (identical settings, same owner)."""
    with console.status(f"starting a vLLM server for {server_config.model} "
                        "(~40-70 s on a 2-core CPU, ~2 min on a GPU)"):
        server = pool.acquire(server_config)
    pool.release(server)
    facts = server.facts
    console.print(f"server ready at {server.base_url} in {facts.ready_s} s"
                  + (f"; KV cache {facts.kv_cache_tokens:,} tokens"
                     if facts.kv_cache_tokens else "") + f"; log {server.log_path}")


async def _run_with_bar(console, config, results_root: str, pool, requests):
    """The run, with a rich progress bar of finished requests on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from vllm_course.experiment import run_experiment

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), console=console, transient=False)
    task = progress.add_task("requests", total=None)

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    progress.start()
    try:
        return await run_experiment(config, results_root, pool=pool, progress=on_progress,
                                    requests=requests)
    finally:
        progress.stop()


def _report(console, result) -> None:
    """The run's report, its diagnosis and the files written; exit 1 if nothing completed."""
    click.echo(result.report())
    if result.summary is not None and result.summary.completed:
        from vllm_course.diagnosis import diagnose

        click.echo("\n" + diagnose(result).report())
    if result.path:
        files = sorted(p.name for p in Path(result.path).iterdir())
        click.echo(f"\nwrote {result.path}/: {', '.join(files)}")
    if result.summary is None or result.summary.completed == 0:
        _fail(console, "no request completed; see the failures above and requests.jsonl")


def _fail(console, message: str, code: int = 1) -> None:
    console.print("error: ", style="red", end="")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(code)


@main.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="YAML run file: server, workload, load, slo (see examples/).",
)
@click.option(
    "--results",
    "results_root",
    default="results",
    show_default=True,
    help="Folder that receives results/<name>-<time>/.",
)
def run(config_path: str, results_root: str) -> None:
    """Run one experiment from a YAML file against a real vLLM server."""
    import yaml
    from pydantic import ValidationError

    from vllm_course.config import RunConfig

    try:
        config = RunConfig.from_file(config_path)
    except (ValidationError, ValueError, yaml.YAMLError) as exc:
        raise bad_input(exc, config_path) from None
    check_server(config.server)
    writable(results_root)
    _execute(config, results_root)


@main.command()
@click.option("--results", "results_root", default="results", show_default=True)
@click.option("--num-requests", type=click.IntRange(min=1), default=None,
              help="Use only the first N requests.")
def demo(results_root: str, num_requests: int | None) -> None:
    """The course in one command: a real vLLM server, the bundled workload, a report and a plot."""
    from vllm_course.config import SLO, FileWorkload, LoadSpec, RunConfig, ServerConfig
    from vllm_course.env import machine

    profile = machine.current_profile()
    d = profile.demo
    dataset = REPO_ROOT / "datasets" / d.dataset
    config = RunConfig(
        name="demo",
        server=ServerConfig(model=profile.model),
        workload=FileWorkload(path=dataset, num_requests=num_requests or d.num_requests),
        load=LoadSpec(
            endpoint="completions",
            rate_rps=d.rate_rps,
            burstiness=d.burstiness,
            num_warmups=d.num_warmups,
        ),
        slo=SLO(**d.slo) if d.slo else None,
    )
    click.echo(
        f"demo: {dataset.relative_to(REPO_ROOT)} (see datasets/README.md), Poisson arrivals "
        f"at {d.rate_rps:g} req/s, model {profile.model}"
    )
    writable(results_root)
    _execute(config, results_root)


@main.command("diagnose")
@click.argument("result_dir", type=click.Path(exists=True, file_okay=False))
def diagnose_cmd(result_dir: str) -> None:
    """Name the layer that limited a saved run, with evidence numbers and knobs to try."""
    from vllm_course.diagnosis import diagnose

    if not (Path(result_dir) / "summary.json").exists():
        runs = sorted((p.parent for p in Path(result_dir).glob("*/summary.json")),
                      key=lambda p: p.stat().st_mtime)
        example = (", e.g. " + ", ".join(str(p) for p in runs[-3:][::-1]) if runs
                   else ", e.g. results/demo-20261129-101500")
        raise BadInput(f"{result_dir} has no summary.json: pass a run folder{example}")
    try:
        click.echo(diagnose(result_dir).report())
    except ValueError as exc:
        raise bad_input(exc, result_dir) from None

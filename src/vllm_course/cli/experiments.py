"""Many runs (vllm_course.tuning): ``sweep``, ``slo`` and ``compare``, each from a YAML spec,
with a result cache and a progress bar."""

from __future__ import annotations

import asyncio

import click

from vllm_course.cli.base import (
    bad_input,
    check_server,
    is_input,
    main,
    writable,
)

_CACHE_OPTIONS = [
    click.option("--config", "config_path", required=True,
                 type=click.Path(exists=True, dir_okay=False), help="YAML spec (see examples/)."),
    click.option("--results", "results_root", default="results", show_default=True,
                 help="Folder that receives <name>-<time>/ (and cache/)."),
    click.option("--no-cache", is_flag=True,
                 help="Run every point and store nothing (what graded labs do)."),
    click.option("--cache-dir", default=None,
                 help="Result cache folder (default: <results>/cache)."),
]


def _cache_options(f):
    for option in reversed(_CACHE_OPTIONS):
        f = option(f)
    return f


def _load_spec(cls, path: str):
    """Read a sweep, SLO-search or compare spec and check every server's flags before anything
    starts (``--plan`` included).

    Raises:
        BadInput: for a bad file, field, flag or value.
    """
    import yaml
    from pydantic import ValidationError

    try:
        spec = cls.from_file(path)
    except (ValidationError, ValueError, yaml.YAMLError) as exc:
        raise bad_input(exc, path) from None
    servers = getattr(spec, "servers", None)
    for server in servers.values() if servers else [spec.server]:
        check_server(server)
    return spec


def _run_spec(fn, spec, results_root: str, no_cache: bool, cache_dir: str | None):
    """Run ``fn(spec)`` with a progress bar; this process owns (and stops) its servers."""
    from vllm_course.server import ServerError
    from vllm_course.tuning.progress import ProgressBar
    from vllm_course.workload import WorkloadError

    writable(results_root)
    cache = None if no_cache else (cache_dir or True)
    with ProgressBar() as bar:
        try:
            return asyncio.run(fn(spec, cache=cache, results_root=results_root, progress=bar))
        except (ServerError, WorkloadError, FileNotFoundError, ValueError, RuntimeError) as exc:
            if is_input(exc):
                raise bad_input(exc) from None
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            bar.console.print("interrupted: servers stopped; " + (
                "with --no-cache nothing was kept for a resume: the same command starts over"
                if cache is None else "finished points are in the cache, so the same command "
                "resumes where this one stopped"))
            raise SystemExit(130) from None


def _table(frame, columns) -> str:
    cols = [c for c in columns if c in frame.columns]
    return frame[cols].to_string(index=False, float_format=lambda v: f"{v:,.2f}")


@main.command("sweep")
@_cache_options
@click.option("--plan", "plan_only", is_flag=True,
              help="Print the plan (server starts, points, time) and exit; starts nothing.")
def sweep_cmd(config_path, results_root, no_cache, cache_dir, plan_only) -> None:
    """Run a grid of server settings x load levels (cached; an interrupted sweep resumes)."""
    from vllm_course.tuning.grid import SweepSpec, plan, sweep

    spec = _load_spec(SweepSpec, config_path)
    if plan_only:
        try:
            click.echo(str(plan(spec, cache=None if no_cache else (cache_dir or True),
                                results_root=results_root)))
        except (FileNotFoundError, ValueError) as exc:
            raise bad_input(exc, config_path) from None
        return
    result = _run_spec(sweep, spec, results_root, no_cache, cache_dir)
    click.echo(_table(result.to_dataframe(),
                      ["setting", spec.level_kind, "output_throughput_tok_s", "p99_ttft_ms",
                       "p99_tpot_ms", "goodput_rps", "failed", "cached"]))
    click.echo(f"\nwrote {result.path}/sweep.json and latency_throughput.png")
    if result.errors:
        raise click.ClickException("; ".join(result.errors))


@main.command("slo")
@_cache_options
def slo_cmd(config_path, results_root, no_cache, cache_dir) -> None:
    """Find the highest request rate (or concurrency) that meets the SLO (cached points)."""
    from vllm_course.tuning.slo import SLOSearchSpec, slo_search

    spec = _load_spec(SLOSearchSpec, config_path)
    result = _run_spec(slo_search, spec, results_root, no_cache, cache_dir)
    click.echo(_table(result.to_dataframe(), [spec.level_kind, "passed", *spec.objectives,
                                              "goodput_rps", "failed", "phase", "cached"]))
    click.echo(f"\n{result.summary()}")
    for warning in result.warnings:
        click.echo(f"warning: {warning}")
    click.echo(f"wrote {result.path}/slo.json and slo.png")


@main.command("compare")
@_cache_options
def compare_cmd(config_path, results_root, no_cache, cache_dir) -> None:
    """Compare server settings with repeats; says which differences are within noise."""
    from vllm_course.tuning.comparison import CompareSpec, compare

    spec = _load_spec(CompareSpec, config_path)
    result = _run_spec(compare, spec, results_root, no_cache, cache_dir)
    click.echo(result.report())
    click.echo(f"wrote {result.path}/compare.json and compare.png")

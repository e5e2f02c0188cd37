"""The ``vllm-course`` command line: thin wrappers over the library's functions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

REPO_ROOT = Path(__file__).resolve().parents[2]


class BadInput(click.ClickException):
    """A file, flag or value that cannot be used: one line on stderr, exit status 2."""

    exit_code = 2


def bad_input(exc: BaseException, source: str | None = None) -> BaseException:
    """``exc`` as a :class:`BadInput`, its message on one line (a server's error keeps the log
    tail under its first line), prefixed with ``source`` (the file it came from) when given;
    ``exc`` itself under ``vllm-course --debug``, so that its traceback shows."""
    from vllm_course.errors import one_line
    from vllm_course.server import ServerError

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().params.get("debug"):
        return exc
    text = str(exc) if isinstance(exc, ServerError) else one_line(exc)
    return BadInput(f"{source}: {text}" if source and not text.startswith(source) else text)


class _CourseGroup(click.Group):
    """The top-level group: bad input (vllm_course.errors.INPUT_ERRORS) raised anywhere below
    becomes one line and exit status 2, unless ``--debug`` asks for the traceback."""

    def invoke(self, ctx: click.Context):
        from vllm_course.errors import INPUT_ERRORS

        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except INPUT_ERRORS as exc:
            if ctx.params.get("debug"):
                raise
            raise bad_input(exc) from None


@click.group(cls=_CourseGroup)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
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


def _writable(results_root: str) -> None:
    """Fail now, not after a server start, if ``results_root`` cannot be written.

    Raises:
        BadInput: naming the folder and why.
    """
    import tempfile

    try:
        Path(results_root).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=results_root):
            pass
    except OSError as exc:
        raise BadInput(f"--results {results_root}: cannot write there "
                       f"({exc.strerror or exc}); choose another folder") from None


def _check_server(server) -> None:
    """Check a server's flags, names and values, with the installed vLLM before anything starts
    (the profile's flags included, as the server would get them).

    Raises:
        BadInput: naming the flag, and the closest real ones or what the value must be.
    """
    from vllm_course.config import ServerConfig
    from vllm_course.env import machine
    from vllm_course.server import ServerError, check_flags, check_values

    args = {**machine.current_profile().server_args, **server.args}
    try:
        check_flags(ServerConfig(args=args).argv())
        check_values(args)
    except ServerError as exc:
        if exc.cause in INPUT_CAUSES:
            raise BadInput(str(exc)) from None
        raise


def _execute(config, results_root: str) -> None:
    """Run one experiment with a progress bar, print the report; this process owns the server."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from vllm_course.env import machine
    from vllm_course.experiment import preflight, run_experiment
    from vllm_course.server import ServerError, ServerPool
    from vllm_course.workload import WorkloadError

    console = Console(stderr=True)
    profile = machine.current_profile()
    pool = ServerPool(max_live=1, profile_args=profile.server_args)
    console.print(
        f"[bold]vllm-course[/]: profile {profile.name} ({profile.description}); "
        f"vLLM {machine.vllm_version()} ({machine.vllm_build()} build)"
    )
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task("requests", total=None)

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    async def go():
        progress.start()
        try:
            return await run_experiment(config, results_root, pool=pool, progress=on_progress,
                                        requests=requests)
        finally:
            progress.stop()

    def fail(message: str, code: int = 1) -> None:
        console.print("error: ", style="red", end="")
        console.print(message, markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(code)

    try:
        # check the workload first: a bad file or a too-long request fails before a server is
        # started for nothing
        requests = preflight(config, profile.server_args)
        with pool:
            # start the server outside the event loop, so Ctrl-C stops a start at once; the run
            # below then reuses it (identical settings, same owner)
            with console.status(f"starting a vLLM server for {config.server.model} "
                                "(~40-70 s on a 2-core CPU, ~2 min on a GPU)"):
                server = pool.acquire(config.server)
            pool.release(server)
            facts = server.facts
            console.print(f"server ready at {server.base_url} in {facts.ready_s} s"
                          + (f"; KV cache {facts.kv_cache_tokens:,} tokens"
                             if facts.kv_cache_tokens else "") + f"; log {server.log_path}")
            result = asyncio.run(go())
    except (ServerError, WorkloadError, FileNotFoundError) as exc:
        fail(*_failure(exc))
    except KeyboardInterrupt:
        console.print("interrupted: the server was stopped; requests that finished are in "
                      f"{results_root}/<run>/requests.jsonl")
        raise SystemExit(130) from None
    click.echo(result.report())
    if result.summary is not None and result.summary.completed:
        from vllm_course.diagnosis import diagnose

        click.echo("\n" + diagnose(result).report())
    if result.path:
        files = sorted(p.name for p in Path(result.path).iterdir())
        click.echo(f"\nwrote {result.path}/: {', '.join(files)}")
    if result.summary is None or result.summary.completed == 0:
        fail("no request completed; see the failures above and requests.jsonl")


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
    _check_server(config.server)
    _writable(results_root)
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
    _writable(results_root)
    _execute(config, results_root)


@main.command("diagnose")
@click.argument("result_dir", type=click.Path(exists=True, file_okay=False))
def diagnose_cmd(result_dir: str) -> None:
    """Name the layer that limited a saved run, with evidence numbers and knobs to try."""
    from vllm_course.diagnosis import diagnose

    if not (Path(result_dir) / "summary.json").exists():
        raise BadInput(
            f"{result_dir} has no summary.json: pass a run folder, e.g. results/demo-20261129-101500"
        )
    try:
        click.echo(diagnose(result_dir).report())
    except ValueError as exc:
        raise bad_input(exc, result_dir) from None


@main.group()
def servers() -> None:
    """vLLM servers started by this course on this machine."""


@servers.command("list")
def servers_list() -> None:
    """Show running servers, their owner and port."""
    import time

    from vllm_course.server import registry

    rows = registry.entries()
    if not rows:
        click.echo("no vLLM servers started by the course are running")
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
    missed = []
    for pid in targets:
        if registry.stop(pid):
            click.echo(f"pid {pid}: stopped")
        else:
            missed.append(pid)
    if missed:
        raise BadInput(f"pid {', '.join(map(str, missed))}: not a running vLLM server started by "
                       "the course; nothing was signalled (`vllm-course servers list` shows them)")


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
def workload_synth(
    num_requests,
    input_len,
    output_len,
    input_len_range,
    output_len_range,
    seed,
    endpoint,
    model,
    output,
) -> None:
    """Generate a seeded synthetic request set; the same arguments give the same file byte for byte."""
    from vllm_course.config import SyntheticWorkload
    from vllm_course.workload import PromptTokenizer, synthesize, write_jsonl

    spec = SyntheticWorkload(
        num_requests=num_requests,
        input_len=input_len,
        output_len=output_len,
        input_len_range=input_len_range,
        output_len_range=output_len_range,
        seed=seed,
    )
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


# -- experiments: sweeps, SLO searches, compares (vllm_course.tuning) ----------------------

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
        _check_server(server)
    return spec


def _is_input(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's input (exit 2), not a failure of the run (exit 1): a server
    flag vLLM rejected or a request longer than ``max_model_len`` count as input."""
    from vllm_course.errors import INPUT_ERRORS
    from vllm_course.server import ServerError

    if isinstance(exc, ServerError):
        return exc.cause in INPUT_CAUSES
    return isinstance(exc, INPUT_ERRORS)


INPUT_CAUSES = {"bad_flag", "bad_value", "max_model_len"}
"""``ServerError.cause`` values that mean the user's settings, not the server, were at fault."""


def _failure(exc: BaseException) -> tuple[str, int]:
    """(message, exit status) for a run that failed: 2 and one line for bad input, 1 and the
    whole message (a server's log tail included) otherwise; under ``--debug`` bad input is
    re-raised, traceback and all."""
    if not _is_input(exc):
        return str(exc), 1
    err = bad_input(exc)
    if not isinstance(err, BadInput):
        raise exc
    return err.message, 2


def _run_spec(fn, spec, results_root: str, no_cache: bool, cache_dir: str | None):
    """Run ``fn(spec)`` with a progress bar; this process owns (and stops) its servers."""
    from vllm_course.server import ServerError
    from vllm_course.tuning.progress import ProgressBar
    from vllm_course.workload import WorkloadError

    _writable(results_root)
    cache = None if no_cache else (cache_dir or True)
    with ProgressBar() as bar:
        try:
            return asyncio.run(fn(spec, cache=cache, results_root=results_root, progress=bar))
        except (ServerError, WorkloadError, FileNotFoundError, ValueError, RuntimeError) as exc:
            if _is_input(exc):
                raise bad_input(exc) from None
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            bar.console.print("interrupted: servers stopped; finished points are in the cache, "
                              "so the same command resumes where this one stopped")
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

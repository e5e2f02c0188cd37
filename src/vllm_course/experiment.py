"""One experiment end to end: server, workload, load, server metrics, summary, saved results.

``await run_experiment(config)`` is what ``vllm-course run`` and ``vllm-course demo`` call, and
what chapters call from a notebook cell.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
from pathlib import Path

import httpx

from vllm_course import env, metrics, plots, workload
from vllm_course.config import RunConfig
from vllm_course.loadgen import ProgressFn, run_load, warm_up
from vllm_course.pool import ServerPool, default_pool
from vllm_course.prom import Sampler, ServerMetrics
from vllm_course.records import RequestRecord
from vllm_course.results import Checks, RunResult
from vllm_course.server import ServerError, VLLMServer


def new_run_dir(root: str | Path, name: str) -> Path:
    """A fresh folder ``root/<name>-<YYYYmmdd-HHMMSS>`` (suffixed if it exists)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def cross_checks(records: list[RequestRecord], server: ServerMetrics | None) -> Checks:
    """Compare the client's token counts with the server's counters and the requested lengths."""
    measured = [r for r in records if not r.warmup]
    client_tokens = sum(r.output_tokens if r.success else sum(r.chunk_tokens) for r in measured)
    mismatches = sum(
        1
        for r in measured
        if r.success
        and r.prompt_len is not None
        and r.prompt_tokens is not None
        and r.prompt_tokens != r.prompt_len
    )
    warnings = []
    server_tokens = server.generation_tokens if server else None
    if server_tokens is not None and server_tokens != client_tokens:
        warnings.append(
            f"client received {client_tokens} output tokens, the server counted "
            f"{server_tokens:.0f} (Δvllm:generation_tokens_total)"
        )
    if mismatches:
        warnings.append(
            f"{mismatches} request(s) had usage.prompt_tokens different from the "
            "workload's prompt_len (was the workload built for another endpoint or model?)"
        )
    return Checks(
        client_output_tokens=client_tokens,
        server_generation_tokens=server_tokens,
        prompt_len_mismatches=mismatches,
        warnings=warnings,
    )


async def _settle(base_url: str, delay_s: float = 0.3) -> None:
    """Give the server's metrics a moment to count the last step before the final scrape."""
    await asyncio.sleep(delay_s)
    async with httpx.AsyncClient(base_url=base_url, timeout=5.0) as client:
        try:
            await client.get("/health")
        except httpx.HTTPError:
            pass


async def run_experiment(
    config: RunConfig,
    results_root: str | Path = "results",
    *,
    pool: ServerPool | None = None,
    progress: ProgressFn | None = None,
    sample_interval_s: float = 1.0,
) -> RunResult:
    """Run ``config`` against a real vLLM server and save ``results_root/<name>-<time>/``.

    The server comes from ``pool`` (default: this process's pool), so a later run with identical
    server settings reuses it. Finished request records are appended to ``requests.jsonl`` as they
    arrive; if the server dies mid-run the partial results are saved before the error is raised.

    Raises:
        ServerError: the server failed to start or died during the run (results saved first).
        WorkloadError: the workload could not be read or built.
    """
    pool = pool or default_pool()
    endpoint = config.load.endpoint
    requests = workload.load(config.workload, config.server.model, endpoint)
    warmups = (
        workload.warmup_requests(
            workload.PromptTokenizer(config.server.model), config.load.num_warmups, endpoint
        )
        if config.load.num_warmups
        else []
    )
    run_dir = new_run_dir(results_root, config.name)
    server = pool.acquire(config.server, log_path=run_dir / "server.log")
    try:
        return await _measure(
            config, server, requests, warmups, run_dir, progress, sample_interval_s
        )
    finally:
        pool.release(server)


async def _measure(
    config: RunConfig,
    server: VLLMServer,
    requests,
    warmups,
    run_dir: Path,
    progress,
    sample_interval_s: float,
) -> RunResult:
    sink_path = run_dir / "requests.jsonl"
    sink_file = sink_path.open("w")

    def sink(record: RequestRecord) -> None:
        sink_file.write(json.dumps(record.to_dict()) + "\n")
        sink_file.flush()

    def should_stop() -> str | None:
        return None if server.alive() else "the vLLM server died"

    load = config.load
    try:
        if warmups:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=load.timeout_s) as c:
                await warm_up(c, warmups, load, config.server.model)
        async with Sampler(server.base_url, sample_interval_s) as sampler:
            result = await run_load(
                server.base_url,
                config.server.model,
                requests,
                load,
                progress=progress,
                sink=sink,
                should_stop=should_stop,
            )
            if server.alive():
                await _settle(server.base_url)
    finally:
        sink_file.close()
        if server.log_path != run_dir / "server.log" and server.log_path.exists():
            shutil.copyfile(server.log_path, run_dir / "server.log")
    server_metrics = sampler.summary()
    records = result.records
    summary = None
    if any(r.success for r in records):
        summary = metrics.summarize(records, config.slo, result.duration_s)
        plots.save_latency_png(records, str(run_dir / "latency.png"), title=config.name)
    run = RunResult(
        name=config.name,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        config=config,
        summary=summary,
        server_metrics=server_metrics,
        startup=vars(server.facts).copy(),
        checks=cross_checks(records, server_metrics),
        env=env.facts(),
        vllm_bench_keys=summary.to_vllm_keys() if summary else {},
        stopped_early=result.stopped_early,
        path=str(run_dir),
    )
    run.save(run_dir)
    if not server.alive():
        try:
            server.check_alive()
        except ServerError as exc:
            raise ServerError(
                f"{exc.args[0].splitlines()[0]}\npartial results saved in {run_dir}",
                cause="crashed",
                log_tail=exc.log_tail,
                log_path=exc.log_path,
            ) from None
    return run

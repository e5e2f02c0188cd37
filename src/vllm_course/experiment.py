"""One experiment end to end: server, workload, load, server metrics, summary, saved results.

``await run_experiment(config)`` is what ``vllm-course run`` and ``vllm-course demo`` call, and
what chapters call from a notebook cell.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_course import metrics, plots, workload
from vllm_course.config import (
    Endpoint,
    FileWorkload,
    RunConfig,
    Scalar,
    TraceWorkload,
    WorkloadSpec,
)
from vllm_course.env import machine
from vllm_course.env.telemetry import Telemetry, wait_until_idle
from vllm_course.loadgen import LoadHooks, ProgressFn, run_load, warm_up
from vllm_course.loadgen.client import ChunkHook
from vllm_course.loadgen.selfcheck import (
    ClientChecks,
    LoopLagMonitor,
    limited_sentence,
    run_checks,
)
from vllm_course.prom import Sampler, ServerMetrics
from vllm_course.records import RequestRecord
from vllm_course.results import TTFT_GAP_MS, Checks, RunResult
from vllm_course.server import ServerError, ServerPool, VLLMServer, default_pool
from vllm_course.server.process import reset_prefix_cache
from vllm_course.workload import WorkloadError

log = logging.getLogger(__name__)


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


def cross_checks(
    records: list[RequestRecord],
    server: ServerMetrics | None,
    client: ClientChecks | None = None,
) -> Checks:
    """Compare what the client saw with what the server counted.

    Client vs server output tokens (Δ``vllm:generation_tokens_total``), requested vs served
    prompt lengths, client vs server mean TTFT (a gap above :data:`TTFT_GAP_MS` and 50 % of the
    server's mean gets a warning: queueing in the client or on the network), and ``client``'s
    self-check verdict (a warning when the client limited the run).
    """
    measured = [r for r in records if not r.warmup]
    client_tokens = sum(_tokens_received(r) for r in measured)
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
    ttfts = [t for r in measured if r.success and (t := metrics.ttft_s(r)) is not None]
    client_ttft = 1000.0 * sum(ttfts) / len(ttfts) if ttfts else None
    server_hist = server.latency_ms.get("ttft") if server else None
    server_ttft = server_hist.mean if server_hist is not None else None
    gap = None if client_ttft is None or server_ttft is None else client_ttft - server_ttft
    if gap is not None and gap > TTFT_GAP_MS and gap > 0.5 * server_ttft:
        warnings.append(
            f"client mean TTFT {client_ttft:.0f} ms is {gap:.0f} ms above the server's "
            f"{server_ttft:.0f} ms (vllm:time_to_first_token_seconds): time the server's clock "
            "does not see: the HTTP front end and network before vLLM registered the request, "
            "or a client reading its chunks late"
        )
    if client is not None and client.saturated:
        warnings.append(limited_sentence(client.reasons))
    if mismatches:
        warnings.append(
            f"{mismatches} request(s) had usage.prompt_tokens different from the "
            "workload's prompt_len (was the workload built for another endpoint or model?)"
        )
    return Checks(
        client_output_tokens=client_tokens,
        server_generation_tokens=server_tokens,
        prompt_len_mismatches=mismatches,
        client_ttft_mean_ms=client_ttft,
        server_ttft_mean_ms=server_ttft,
        ttft_gap_ms=gap,
        warnings=warnings,
    )


PROGRESS: Callable[[str], ProgressFn] | None = None
"""Makes a progress display for a run by name when :func:`run_experiment` is given none;
``notebook.setup()`` sets it in a Jupyter kernel, so every run shows its requests in the cell."""


def preflight(config: RunConfig, profile_args: Mapping[str, Scalar]) -> list[workload.Request]:
    """The checks :func:`run_experiment` makes before a server starts, for callers that start it
    themselves: the workload is read or built, its send times can be computed, and every request
    fits ``--max-model-len`` when the flags (the profile's, then the config's) set it.

    Returns:
        The requests.

    Raises:
        WorkloadError: naming the bad line, the missing timestamps, or the requests that are too
            long (nothing started, nothing sent).
    """
    endpoint, model, source = config.load.endpoint, config.server.model, _source(config.workload)
    requests = workload.load_requests(config.workload, model, endpoint)
    send_offsets(requests, config.arrivals, source)
    configured_len = max_model_len_from_args({**profile_args, **config.server.args})
    if configured_len is not None:
        check_max_model_len(requests, configured_len, endpoint=endpoint, tokenizer=model,
                            source=source)
    return requests


def _source(spec: WorkloadSpec) -> str:
    return str(spec.path) if isinstance(spec, (FileWorkload, TraceWorkload)) else "workload"


def send_offsets(
    requests: Sequence[workload.Request], arrivals: str, source: str = "workload"
) -> list[float] | None:
    """Send times for ``run_load(offsets_s=...)``: ``None`` for ``process`` arrivals; for
    ``trace``, each request's ``timestamp_s`` minus the first one's (the first is sent at 0).

    Use ``config.arrivals`` (a :class:`RunConfig` property) as ``arrivals``.

    Raises:
        WorkloadError: with ``trace``, if a request has no ``timestamp_s`` (how many, the first)
            or one is earlier than the request before it (requests are sent in order).
    """
    if arrivals == "process":
        return None
    if arrivals != "trace":
        raise ValueError(f"arrivals must be 'process' or 'trace', got {arrivals!r}")
    missing = [i for i, r in enumerate(requests, 1) if r.timestamp_s is None]
    if missing:
        raise WorkloadError(
            f"{source}: {len(missing)} request(s) have no timestamp_s (first: request "
            f"{missing[0]}); arrivals: trace replays every request's timestamp_s"
        )
    times = [float(r.timestamp_s) for r in requests]
    for i, (a, b) in enumerate(zip(times, times[1:], strict=False), 2):
        if b < a:
            raise WorkloadError(
                f"{source}: request {i} has timestamp_s {b:g}, earlier than request {i - 1}'s "
                f"{a:g}; requests are sent in order, so sort them by timestamp_s"
            )
    t0 = times[0] if times else 0.0
    return [round(t - t0, 6) for t in times]


def max_model_len_from_args(args: Mapping[str, Scalar]) -> int | None:
    """``--max-model-len`` from server flags (``4096``, ``"8k"``, ``"4K"``), or ``None`` when it is
    not given or left to vLLM (``-1``/``auto``)."""
    value = args.get("max-model-len", args.get("max_model_len"))
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if value > 0 else None
    text = str(value).strip()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text):
        scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
        return int(float(m.group(1)) * scale[m.group(2)])
    return None


def check_max_model_len(
    requests: Sequence[workload.Request],
    max_model_len: int,
    *,
    endpoint: Endpoint = "completions",
    tokenizer: workload.PromptTokenizer | str | None = None,
    source: str = "workload",
) -> None:
    """Raise before anything is sent if a request cannot fit the server's ``max_model_len``.

    A request fits if ``prompt_len + output_len <= max_model_len``; ``prompt_len`` is the
    request's own, else counted with ``tokenizer`` (a :class:`PromptTokenizer` or a model name;
    only needed for text prompts without ``prompt_len``). vLLM 0.32 rejects a longer prompt and
    silently lowers ``max_tokens`` when prompt + output is too long, so such a run would not
    measure what the workload asks for.

    Raises:
        WorkloadError: naming how many requests are too long, the first few (1-based), and the
            limit.
    """
    from vllm_course.workload.stats import prompt_lengths

    lengths = prompt_lengths(requests, endpoint, tokenizer)
    too_long = [
        (i, p + r.output_len)
        for i, (p, r) in enumerate(zip(lengths, requests, strict=True), 1)
        if p + r.output_len > max_model_len
    ]
    if too_long:
        first = ", ".join(f"{i} ({n} tokens)" for i, n in too_long[:5])
        more = ", ..." if len(too_long) > 5 else ""
        raise WorkloadError(
            f"{source}: {len(too_long)} of {len(requests)} request(s) need more than the "
            f"server's max_model_len of {max_model_len} tokens (prompt + output): requests "
            f"{first}{more}; nothing was sent. Raise --max-model-len or drop those requests"
        )


async def run_experiment(
    config: RunConfig,
    results_root: str | Path = "results",
    *,
    pool: ServerPool | None = None,
    progress: ProgressFn | None = None,
    sample_interval_s: float = 1.0,
    on_chunk: ChunkHook | None = None,
    requests: Sequence[workload.Request] | None = None,
) -> RunResult:
    """Run ``config`` against a real vLLM server and save ``results_root/<name>-<time>/``.

    The server comes from ``pool`` (default: this process's pool), so a later run with identical
    server settings reuses it. Finished request records are appended to ``requests.jsonl`` as they
    arrive; if the server dies mid-run the partial results are saved before the error is raised.

    Send times follow ``config.arrivals``: a rate/burstiness process, or (``trace``) each
    request's ``timestamp_s``, e.g. a ``TraceWorkload`` replayed at its ``time_scale``. Before
    anything is sent, every request is checked against the server's ``max_model_len`` (from
    ``--max-model-len`` before the server starts, else from its startup log). Unless
    ``config.load.reset_prefix_cache`` is false, the server's prefix cache is emptied first.

    While the run goes on, ``/metrics`` and hardware telemetry are sampled every
    ``sample_interval_s`` seconds (``timeseries.json``) and the client checks itself (event-loop
    lag, send lag, CPU; :mod:`vllm_course.loadgen.selfcheck`). ``on_chunk`` is called with a
    request's record after each token-carrying chunk (it runs on the timing event loop: keep it
    cheap).
    ``requests``: what :func:`preflight` returned for this config, when the caller checked the
    workload before starting the server (the CLI does): it is then not read a second time.

    Raises:
        ServerError: the server failed to start or died during the run (results saved first).
        WorkloadError: the workload could not be read or built, a trace replay lacks timestamps,
            or requests are longer than ``max_model_len`` (nothing sent).
    """
    pool = pool or default_pool()
    endpoint = config.load.endpoint
    model = config.server.model
    source = _source(config.workload)
    profile_args = getattr(pool, "profile_args", {})
    requests = list(requests) if requests is not None else preflight(config, profile_args)
    configured_len = max_model_len_from_args({**profile_args, **config.server.args})
    offsets = send_offsets(requests, config.arrivals, source)
    warmups = (
        workload.warmup_requests(
            workload.PromptTokenizer(config.server.model), config.load.num_warmups, endpoint
        )
        if config.load.num_warmups
        else []
    )
    run_dir = new_run_dir(results_root, config.name)
    try:
        server = pool.acquire(config.server, log_path=run_dir / "server.log")
    except BaseException:
        if not any(run_dir.iterdir()):   # failed before launch (bad flag, port): no empty folder
            run_dir.rmdir()
        raise
    try:
        if progress is None and PROGRESS is not None:
            progress = PROGRESS(config.name)   # made now: its clock must not count the start
        served_len = server.facts.max_model_len
        if served_len is not None and served_len != configured_len:
            check_max_model_len(requests, served_len, endpoint=endpoint, tokenizer=model,
                                source=source)
        hooks = _RunHooks(progress=progress, offsets=offsets, on_chunk=on_chunk,
                          sample_interval_s=sample_interval_s,
                          others=_other_server_pids(pool, server))
        return await _measure(config, server, requests, warmups, run_dir, hooks)
    finally:
        pool.release(server)


def _other_server_pids(pool: ServerPool, server: VLLMServer) -> tuple[int, ...]:
    """Pids of the pool's live servers other than ``server`` (a run waits until they idle)."""
    return tuple(s.proc.pid for s in getattr(pool, "servers", ())
                 if getattr(s, "proc", None) is not None and s.proc.pid != server.proc.pid)


async def _measure(config: RunConfig, server: VLLMServer, requests, warmups, run_dir: Path,
                   hooks: _RunHooks) -> RunResult:
    """Measure one run on a started server and save it in ``run_dir`` (see
    :func:`run_experiment`): probes around the load, then the result built from what they saw."""
    result, sampler, lag = await _run_with_probes(config, server, requests, warmups, run_dir,
                                                  hooks)
    run = _build_result(config, server, result, sampler, lag, run_dir)
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


@dataclass(frozen=True)
class _RunHooks:
    """How :func:`_run_with_probes` sends and watches (see :func:`run_experiment`)."""

    progress: ProgressFn | None = None
    offsets: list[float] | None = None
    on_chunk: ChunkHook | None = None
    sample_interval_s: float = 1.0
    others: tuple[int, ...] = ()   # pids of the pool's other live servers (wait until idle)


async def _run_with_probes(config: RunConfig, server: VLLMServer, requests, warmups,
                           run_dir: Path, hooks: _RunHooks):
    """Reset the prefix cache, warm up, and send the requests while ``/metrics``, telemetry and
    the client's own event loop are watched; each finished record is appended to
    ``requests.jsonl`` at once. Returns ``(LoadResult, Sampler, LoopLagMonitor)``."""
    sink_file = (run_dir / "requests.jsonl").open("w")

    def sink(record: RequestRecord) -> None:
        sink_file.write(json.dumps(record.to_dict()) + "\n")
        sink_file.flush()

    def should_stop() -> str | None:
        return None if server.alive() else "the vLLM server died"

    load = config.load
    telemetry = Telemetry(server.proc.pid)
    try:
        if load.reset_prefix_cache:
            await reset_prefix_cache(server.base_url)
        if warmups:
            await warm_up(server.base_url, warmups, load, config.server.model)
        busy = await wait_until_idle(hooks.others)
        if busy is not None:
            log.warning("%s: the pool's other vLLM servers still used %.2f cores after 10 s; "
                        "measuring anyway (their load slows this run)", config.name, busy)
        async with Sampler(server.base_url, hooks.sample_interval_s, telemetry) as sampler:
            async with LoopLagMonitor() as lag:
                result = await run_load(
                    server.base_url, config.server.model, requests, load,
                    offsets_s=hooks.offsets,
                    hooks=LoadHooks(progress=hooks.progress, sink=sink,
                                    should_stop=should_stop, on_chunk=hooks.on_chunk),
                )
            if server.alive():
                # the final scrape waits until the server has counted what the client received
                sampler.expect_generation_tokens = sum(_tokens_received(r) for r in result.records)
    finally:
        sink_file.close()
        telemetry.close()
        if server.log_path != run_dir / "server.log" and server.log_path.exists():
            shutil.copyfile(server.log_path, run_dir / "server.log")
    return result, sampler, lag


def _tokens_received(r: RequestRecord) -> int:
    """Output tokens the client received for a request (usage, or the chunks of a failed one)."""
    return r.output_tokens if r.success else sum(r.chunk_tokens)


def _build_result(config: RunConfig, server: VLLMServer, result, sampler: Sampler,
                  lag: LoopLagMonitor, run_dir: Path) -> RunResult:
    """The run's :class:`RunResult` from what the client and the probes saw; writes
    ``timeseries.json`` and the PNG plots beside it."""
    # Little's law needs the span in which the server could hold requests: from the first send
    # (a client held up at the start sends late, and the server idles until then) to the end
    sent = [r.sent_s for r in result.records if r.sent_s is not None]
    server_metrics = sampler.summary(
        window=(result.started_at, result.started_at + result.duration_s),
        duration_s=result.duration_s - min(sent, default=0.0),
    )
    series = sampler.series(result.started_at)
    (run_dir / "timeseries.json").write_text(series.model_dump_json() + "\n")
    if len(series.points) > 1:
        plots.save_timeseries_png(series, str(run_dir / "timeseries.png"), title=config.name)
    records = result.records
    client = run_checks(result, lag)
    summary = None
    if records and result.duration_s > 0:   # also when every request failed: say so
        summary = metrics.summarize(records, config.slo, result.duration_s)
    if any(r.success for r in records):
        plots.save_latency_png(records, str(run_dir / "latency.png"), title=config.name)
    return RunResult(
        name=config.name,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        config=config,
        summary=summary,
        server_metrics=server_metrics,
        startup=server.facts.model_copy(),
        checks=cross_checks(records, server_metrics, client),
        client=client,
        env=machine.facts(),
        vllm_bench_keys=summary.to_vllm_keys() if summary else {},
        stopped_early=result.stopped_early,
        path=str(run_dir),
    )

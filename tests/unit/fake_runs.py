"""Fakes for the runner under sweeps, SLO searches and compares (unit tests only).

:func:`install` replaces :func:`vllm_course.experiment.run_experiment` with a function that
writes a real run folder (``summary.json``, ``requests.jsonl``) whose latencies come from a
model of the server, ``model(config) -> [(ttft_s, tpot_s), ...]`` (one pair per request), and
replaces vLLM's flag check. :class:`FakePool` stands in for a :class:`ServerPool` and records
which servers were "started".
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from types import SimpleNamespace

from vllm_course import env, experiment, metrics, server
from vllm_course.config import RunConfig, ServerConfig
from vllm_course.loadgen.selfcheck import ClientChecks
from vllm_course.metrics import Dist
from vllm_course.prom import ServerMetrics
from vllm_course.records import RequestRecord
from vllm_course.results import RunResult

Model = Callable[[RunConfig], list[tuple[float, float]]]


class FakePool:
    """Servers are namespaces; ``started`` lists every config that was "started"."""

    def __init__(self, max_live: int = 2, profile_args: dict | None = None):
        self.max_live = max_live
        # the profile's flags, as a real pool of this machine has them
        self.profile_args = dict(profile_args or env.current_profile().server_args)
        self.started: list[ServerConfig] = []
        self.live: dict[str, SimpleNamespace] = {}
        self.closed = False

    @property
    def servers(self):
        return list(self.live.values())

    def acquire(self, config: ServerConfig, log_path=None):
        key = config.key()
        if key not in self.live:
            self.started.append(config)
            self.live[key] = SimpleNamespace(config=config, base_url="http://fake")
        return self.live[key]

    def release(self, s) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def records(config: RunConfig, latencies: list[tuple[float, float]]) -> list[RequestRecord]:
    """One record per request: sent on the arrival schedule (1/rate apart, or all at t=0),
    first token after ``ttft_s``, then one token every ``tpot_s``."""
    osl = config.workload.output_len
    rate = config.load.rate_rps
    out = []
    for i, (ttft, tpot) in enumerate(latencies):
        sent = i / rate if math.isfinite(rate) else 0.0
        chunks = [sent + ttft + tpot * k for k in range(osl)]
        out.append(RequestRecord(
            index=i, prompt_len=config.workload.input_len, max_tokens=osl, scheduled_s=sent,
            sent_s=sent, chunk_s=chunks, chunk_tokens=[1] * osl, last_choice_s=chunks[-1],
            end_s=chunks[-1], prompt_tokens=config.workload.input_len, output_tokens=osl,
            finish_reason="length"))
    return out


def install(monkeypatch, model: Model, calls: list | None = None,
            interrupt_after: int | None = None, crash: Callable[[RunConfig], bool] | None = None,
            client_limited: Callable[[RunConfig], bool] | None = None,
            prefix_hits: Callable[[RunConfig], float] | None = None):
    """Patch the runner; ``calls`` receives each config run. After ``interrupt_after`` runs
    the next one raises KeyboardInterrupt (as Ctrl-C would); ``crash(config)`` True raises
    ServerError; ``client_limited(config)`` True marks the run's client as saturated;
    ``prefix_hits(config)`` the server's Δ prefix-cache hits (tokens)."""
    calls = [] if calls is None else calls

    async def fake_run(config, results_root, *, pool, progress=None, **_):
        if interrupt_after is not None and len(calls) >= interrupt_after:
            raise KeyboardInterrupt
        if crash is not None and crash(config):
            raise server.ServerError("vLLM server exited with code 1 while starting: crashed",
                                     cause="crashed")
        pool.acquire(config.server)
        calls.append(config)
        recs = records(config, model(config))
        summary = metrics.summarize(recs, config.slo)
        run_dir = experiment.new_run_dir(results_root, config.name)
        (run_dir / "requests.jsonl").write_text(
            "".join(json.dumps(r.to_dict()) + "\n" for r in recs))
        if progress is not None:
            progress(len(recs), len(recs))
        limited = client_limited is not None and client_limited(config)
        client = ClientChecks(loop_lag_ms=Dist.of([1.0, 1.0]), send_lag_ms=Dist.of([0.0]),
                              slot_wait_ms=Dist.of([0.0]), saturated=limited,
                              reasons=["92% of inter-token gaps were 0"] if limited else [])
        server_metrics = ServerMetrics(prefix_cache_hits=prefix_hits(config) if prefix_hits
                                       else 0.0)
        RunResult(name=config.name, created_at=dt.datetime.now().isoformat(), config=config,
                  summary=summary, startup={"ready_s": READY_S}, client=client,
                  server_metrics=server_metrics, path=str(run_dir)).save(run_dir)
        return RunResult.load(run_dir)

    monkeypatch.setattr(experiment, "run_experiment", fake_run)
    monkeypatch.setattr(server, "check_flags", lambda argv, flags=None: None)
    monkeypatch.setattr(server, "check_values", lambda args, kinds=None: None)
    return calls


READY_S = 12.5
"""The fake runs' ``startup["ready_s"]``: seconds a server start takes."""


def fake_clock(monkeypatch, module) -> None:
    """Give ``module`` (which calls ``time.monotonic()``) a clock on which every run takes 1 s,
    and a run that starts its server :data:`READY_S` more. Call after :func:`install`."""
    fake = experiment.run_experiment
    now = [0.0]

    async def timed(config, results_root, *, pool, **kw):
        now[0] += 1.0 + (READY_S if config.server.key() not in pool.live else 0.0)
        return await fake(config, results_root, pool=pool, **kw)

    monkeypatch.setattr(experiment, "run_experiment", timed)
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: now[0]))


def constant(ttft_s: float = 0.05, tpot_s: float = 0.01) -> Model:
    """Every request has the same latencies."""
    return lambda config: [(ttft_s, tpot_s)] * config.workload.num_requests

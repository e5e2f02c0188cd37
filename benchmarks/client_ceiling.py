#!/usr/bin/env python
"""How many streamed events per second our client can time before it limits what it measures.

Not vLLM: a synthetic local stream server (``--serve``, started here in a process of its own)
answers ``/v1/completions`` with server-sent events shaped like vLLM's (one ``choices`` event per
token with ``continuous_usage_stats``, a final usage event, ``[DONE]``), one event per stream
every ``--interval-ms``, each sent at an absolute deadline, and logs the
``time.perf_counter_ns()`` at which it wrote every event. Our client
(:func:`vllm_course.loadgen.run_load`, exactly as a run uses it) reads the streams. On Linux
``perf_counter`` is the system-wide ``CLOCK_MONOTONIC`` in every process, so an event's
**timestamp error** is the client's stamp minus the server's write time.

For each level (concurrent streams x events per stream, all requests at once) it reports the
event rate reached, the client's CPU per event (µs) and share of a core, the timestamp error
P50/P99 (ms), and **bunching**: the share of event gaps the client saw under 0.5 ms that the
server wrote at least 1 ms apart (events read in one gulp, so ITL and TPOT are distorted). The
verdict names the highest event rate whose error P99 stays under 1 ms.

Usage (from the repository root; the server and the client share this machine's cores)::

    .venv/bin/python benchmarks/client_ceiling.py                      # default levels
    .venv/bin/python benchmarks/client_ceiling.py --streams 50 100 200 --interval-ms 10 5 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vllm_course.config import LoadSpec
from vllm_course.loadgen import run_load
from vllm_course.workload import Request

ERROR_P99_LIMIT_MS = 1.0
BUNCHED_GAP_MS = 0.5          # a client gap this short ...
SPACED_GAP_MS = 1.0           # ... between events the server wrote at least this far apart


# ---- the synthetic stream server (runs in a process of its own) ---------------------------

def _event(k: int, n: int) -> bytes:
    """vLLM's shape of a /v1/completions chunk with continuous usage: token ``k`` of ``n``."""
    done = "length" if k == n else None
    body = {"id": "cmpl-x", "object": "text_completion", "model": "fake",
            "choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": done}],
            "usage": {"prompt_tokens": 1, "total_tokens": 1 + k, "completion_tokens": k}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def serve(port: int, interval_s: float, log_path: Path) -> None:
    """Serve streams on 127.0.0.1:``port`` until killed (``SO_REUSEPORT``: several such
    processes share the port, the kernel spreads connections over them); append one JSON line
    per finished request to ``log_path`` + ``.<pid>``: its prompt and the perf_counter_ns of
    every event written."""
    from aiohttp import web

    log = Path(f"{log_path}.{os.getpid()}").open("a", buffering=1)

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start, sent = time.perf_counter(), []
        for k in range(1, n + 1):
            delay = start + k * interval_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(time.perf_counter_ns())
            await resp.write(_event(k, n))
        usage = {"prompt_tokens": 1, "total_tokens": 1 + n, "completion_tokens": n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
                         + b"\n\n" + b"data: [DONE]\n\n")
        await resp.write_eof()
        log.write(json.dumps({"prompt": body["prompt"], "sent_ns": sent}) + "\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, reuse_port=True,
                backlog=4096)


# ---- the driver -------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(interval_ms: float, log_path: Path, procs: int = 1
                  ) -> tuple[list[subprocess.Popen], str]:
    """``procs`` server processes on one port; returns them and the base URL once each has
    started listening (a process that is not listening yet gets no connection)."""
    port = _free_port()
    started = [subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(interval_ms),
                                 str(log_path)], start_new_session=True) for _ in range(procs)]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _listening(port) >= procs:
            return started, url
        time.sleep(0.2)
    _stop(started)
    raise RuntimeError(f"the stream servers did not all listen on port {port} within 60 s")


def _listening(port: int) -> int:
    """Sockets listening on 127.0.0.1:``port`` (Linux's /proc/net/tcp: state 0A is LISTEN)."""
    local = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == local and row.split()[3] == "0A")


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
    for proc in procs:
        proc.wait(timeout=10)


class _Raw:
    """What a stamping-only reader keeps of one stream: (arrival, events) per read."""

    def __init__(self) -> None:
        self.chunk_s: list[float] = []
        self.chunk_tokens: list[int] = []
        self.error: str | None = None


async def _raw_load(url: str, requests: list[Request]) -> tuple[list[_Raw], float]:
    """The floor of a fast reader: aiohttp (no connection cap), each read stamped on arrival
    and its events counted (``\n\n``), nothing parsed; the last two events of a stream (usage
    and ``[DONE]``) carry no token. Returns the streams and the start on perf_counter."""
    import aiohttp

    t0 = time.perf_counter()
    out = [_Raw() for _ in requests]

    async def one(session: aiohttp.ClientSession, req: Request, raw: _Raw) -> None:
        body = {"model": "fake", "prompt": req.prompt, "max_tokens": req.output_len,
                "stream": True}
        tail = b""
        async with session.post(url + "/v1/completions", json=body) as resp:
            async for chunk in resp.content.iter_any():
                now = time.perf_counter() - t0
                raw.chunk_s.append(now)
                # an event ends at a blank line; its "\n\n" may straddle two reads
                raw.chunk_tokens.append((tail + chunk).count(b"\n\n"))
                tail = chunk[-1:] if chunk[-2:] != b"\n\n" else b""
        # one stamp per token: a read that carried n events stamps all n at its arrival
        stamps = [t for t, n in zip(raw.chunk_s, raw.chunk_tokens, strict=True)
                  for _ in range(n)][:req.output_len]
        raw.chunk_s, raw.chunk_tokens = stamps, [1] * len(stamps)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session, r, x) for r, x in zip(requests, out, strict=True)))
    return out, t0


async def _vllm_load(url: str, requests: list[Request]) -> tuple[list[_Raw], float]:
    """vLLM's own reader (``vllm bench serve``'s ``async_request_openai_completions``, from the
    installed vLLM) on one aiohttp session without a connection cap, as ``vllm bench serve``
    opens it; each event's arrival is rebuilt from its start, TTFT and ITLs."""
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    t0 = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, trust_env=True,
                                     timeout=aiohttp.ClientTimeout(total=6 * 3600)) as session:
        outs = await asyncio.gather(*(async_request_openai_completions(
            RequestFuncInput(prompt=r.prompt, api_url=url + "/v1/completions", prompt_len=1,
                             output_len=r.output_len, model="fake", ignore_eos=True), session)
            for r in requests))
    streams = []
    for out in outs:
        raw = _Raw()
        if out.success:
            first = out.start_time + out.ttft - t0
            raw.chunk_s = list(np.cumsum([first, *out.itl]))
            raw.chunk_tokens = [1] * len(raw.chunk_s)
        else:
            raw.error = (out.error or "failed")[-200:]
        streams.append(raw)
    return streams, t0


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the client's worker processes;
    the stream servers are reaped only after the measurement)."""
    own, kids = (resource.getrusage(resource.RUSAGE_SELF),
                 resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def measure(streams: int, events: int, interval_ms: float, client: str = "ours",
                  server_procs: int = 1, workers: int = 1) -> dict:
    """One level: ``streams`` requests at once, ``events`` events each, one per ``interval_ms``
    per stream on the server (``server_procs`` processes), read by ``client`` (``ours``:
    :func:`run_load` over ``workers`` processes; ``raw``: the stamping-only aiohttp reader;
    ``vllm``: ``vllm bench serve``'s reader); returns the level's figures."""
    with tempfile.TemporaryDirectory(prefix="client-ceiling-") as tmp:
        log_path = Path(tmp) / "sent.jsonl"
        procs, url = _start_server(interval_ms, log_path, server_procs)
        try:
            requests = [Request(prompt=f"stream-{i}", output_len=events) for i in range(streams)]
            load = LoadSpec(timeout_s=events * interval_ms / 1000 * 5 + 30, workers=workers)
            if client == "vllm":    # importing vLLM takes seconds of CPU: not the reader's
                import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401
            cpu0, wall0 = _cpu_s(), time.perf_counter()
            if client == "ours":
                result = await run_load(url, "fake", requests, load)
                records, t0, duration_s = result.records, result.t0, result.duration_s
                # a worker's start (a fresh interpreter) is not reading streams
                busy = [w.cpu_s for w in result.workers if w.cpu_s is not None]
            else:
                reader = _raw_load if client == "raw" else _vllm_load
                records, t0 = await reader(url, requests)
                duration_s = time.perf_counter() - t0
                busy = []
            cpu_s, wall_s = _cpu_s() - cpu0, time.perf_counter() - wall0
            if busy:      # workers: their CPU over the run; the parent only waited
                cpu_s, wall_s = sum(busy), duration_s
        finally:
            _stop(procs)
        sent = {}
        for part in Path(tmp).glob("sent.jsonl.*"):
            for line in part.read_text().splitlines():
                row = json.loads(line)
                sent[row["prompt"]] = np.asarray(row["sent_ns"], dtype=float) / 1e9
    errors, bunched, spaced = [], 0, 0
    for req, rec in zip(requests, records, strict=True):
        got = np.asarray(rec.chunk_s, dtype=float) + t0
        wrote = sent.get(req.prompt)
        if rec.error or wrote is None or len(got) != len(wrote):
            continue
        errors.append((got - wrote) * 1000)
        server_gaps, client_gaps = np.diff(wrote) * 1000, np.diff(got) * 1000
        mask = server_gaps >= SPACED_GAP_MS
        spaced += int(mask.sum())
        bunched += int((client_gaps[mask] < BUNCHED_GAP_MS).sum())
    err = np.concatenate(errors) if errors else np.array([math.nan])
    received = sum(sum(r.chunk_tokens) for r in records if not r.error)
    return {
        "client": client if workers == 1 else f"{client} x{workers}", "workers": workers,
        "streams": streams, "events_per_stream": events,
        "interval_ms": interval_ms,
        "target_events_s": streams * 1000 / interval_ms,
        "events_s": received / duration_s if duration_s else math.nan,
        "failed": sum(1 for r in records if r.error),
        "client_cpu_us_per_event": cpu_s / received * 1e6 if received else math.nan,
        "client_cpu_share": cpu_s / wall_s,      # of one core; summed over workers
        "error_p50_ms": float(np.percentile(err, 50)),
        "error_p99_ms": float(np.percentile(err, 99)),
        "bunched_share": bunched / spaced if spaced else math.nan,
    }


def report(rows: list[dict]) -> str:
    head = ("client", "streams", "interval ms", "target ev/s", "reached ev/s", "CPU µs/event",
            "CPU of a core", "error P50 ms", "error P99 ms", "bunched")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        lines.append(" | ".join([
            r["client"], f"{r['streams']}", f"{r['interval_ms']:g}", f"{r['target_events_s']:,.0f}",
            f"{r['events_s']:,.0f}", f"{r['client_cpu_us_per_event']:.1f}",
            f"{r['client_cpu_share']:.0%}", f"{r['error_p50_ms']:.2f}",
            f"{r['error_p99_ms']:.2f}", f"{r['bunched_share']:.1%}"]))
    verdicts = []
    for client in dict.fromkeys(r["client"] for r in rows):
        ok = [r["events_s"] for r in rows if r["client"] == client
              and r["error_p99_ms"] < ERROR_P99_LIMIT_MS and not r["failed"]]
        verdicts.append(f"{client}: highest event rate with timestamp error P99 < "
                        f"{ERROR_P99_LIMIT_MS:g} ms: {max(ok):,.0f} events/s" if ok else
                        f"{client}: no level kept the timestamp error P99 under "
                        f"{ERROR_P99_LIMIT_MS:g} ms")
    return "\n".join(lines) + "\n\n" + "\n".join(verdicts)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), float(sys.argv[3]) / 1000, Path(sys.argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[25, 50, 100, 200],
                   help="concurrent streams per level")
    p.add_argument("--interval-ms", type=float, nargs="+", default=[10.0],
                   help="ms between one stream's events (each level: every streams x interval)")
    p.add_argument("--events", type=int, default=200, help="events per stream")
    p.add_argument("--client", nargs="+", choices=("ours", "raw", "vllm"), default=["ours"],
                   help="ours: the course's client (run_load); raw: a stamping-only aiohttp "
                        "reader, the floor of a fast design; vllm: vllm bench serve's reader "
                        "(needs vLLM installed)")
    p.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="ours: client worker processes (load.workers), one level each")
    p.add_argument("--server-procs", type=int, default=1,
                   help="stream server processes sharing the port (one writes ~20-40k events/s)")
    p.add_argument("--uvloop", action="store_true",
                   help="run the client on uvloop's event loop (the server always uses it)")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    a = p.parse_args()
    rows = []
    levels = [(c, w, i, n) for c in a.client for w in (a.workers if c == "ours" else [1])
              for i in a.interval_ms for n in a.streams]
    for client, workers, interval, streams in levels:
        level = measure(streams, a.events, interval, client, a.server_procs, workers)
        if a.uvloop:
            import uvloop
            row = uvloop.run(level)
        else:
            row = asyncio.run(level)
        row["loop"] = "uvloop" if a.uvloop else "asyncio"
        rows.append(row)
        print(f"{row['client']}: {streams} streams every {interval:g} ms: {row['events_s']:,.0f} "
              f"events/s, error P99 {row['error_p99_ms']:.2f} ms, CPU "
              f"{row['client_cpu_us_per_event']:.1f} µs/event", flush=True)
    print()
    print(report(rows))
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
